"""MkDocs hook (mkdocs.yml `hooks:`): the reference pages that are generated from the code at every build, so
they cannot drift from it. Nothing is written into docs/: the pages exist only in the build.

- reference/settings.md: every EOSBATCH_* setting of eosbatch/config.py, its default as `config.load` really
  computes it (through `config.to_env`) and its meaning from the comments next to the constant and the
  `Settings` field it fills; then the development stack's ports, from their `_port(NAME, default)` calls.
- reference/cli.md: every command and action of the `eosbatch` parser (eosbatch/cli_parser.py), as its own
  `--help` prints it.
- index.md: README.md, its links into docs/ made relative to docs/ (a link elsewhere in the repository becomes
  its path as text, checked to exist), so the home page is the README and the build checks the README's links.
"""

from __future__ import annotations

import argparse
import ast
import io
import logging
import os
import re
import sys
import tokenize
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "eosbatch" / "config.py"
# Where the development stack and the local Airflow read their ports (`_port("EOSBATCH_...", default)`).
STACK_SOURCES = [ROOT / "eosbatch" / "stack" / "__init__.py", ROOT / "eosbatch" / "stack" / "schema_registry.py",
                 ROOT / "eosbatch" / "orchestration" / "local.py"]
HELP_WIDTH = "110"  # argparse wraps to $COLUMNS: fixed, so the page does not depend on the terminal
log = logging.getLogger("mkdocs.hooks.eosbatch")


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    if str(ROOT) not in sys.path[:1]:
        sys.path.insert(0, str(ROOT))  # document this checkout, not an installed eosbatch
    pages = {"index.md": home_page(), "reference/settings.md": settings_page(), "reference/cli.md": cli_page()}
    for uri, text in pages.items():
        files.append(File.generated(config, uri, content=text))
    return files


# ---- the home page

LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")


def _home_link(match: re.Match[str]) -> str:
    text, target = match["text"], match["target"]
    if "://" in target or target.startswith("#"):
        return match[0]
    if target.startswith("docs/"):
        return f"[{text}]({target.removeprefix('docs/')})"
    if not (ROOT / target.split("#")[0]).exists():  # a warning fails the --strict build, as a dead link does
        log.warning("README.md links to %s, which does not exist", target)
    return f"`{target}`" if text.strip("`") == target else f"{text} (`{target}`)"


def home_page() -> str:
    return LINK.sub(_home_link, (ROOT / "README.md").read_text())


# ---- settings


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line number -> (the comment's text, whether the line holds nothing else)."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            alone = token.line.strip().startswith("#")
            found[token.start[0]] = (token.string.lstrip("#").strip(), alone)
    return found


def _comment_of(line: int, comments: dict[int, tuple[str, bool]]) -> str:
    """The comment at the end of `line`, else the block of comment lines right above it."""
    trailing = comments.get(line)
    if trailing and not trailing[1]:
        return trailing[0]
    above, number = [], line - 1
    while number in comments and comments[number][1]:
        above.insert(0, comments[number][0])
        number -= 1
    return " ".join(above)


def _settings_fields(tree: ast.Module) -> dict[str, int]:
    """Settings' field -> its line."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Settings":
            return {item.target.id: item.lineno for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    raise LookupError("eosbatch/config.py has no class Settings")


def _env_to_field(tree: ast.Module) -> dict[str, str]:
    """The constant's name -> the Settings field that `to_env` writes it from."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "to_env":
            table = next(n for n in ast.walk(node) if isinstance(n, ast.Dict))
            mapping = {}
            for key, value in zip(table.keys, table.values, strict=True):
                fields = [n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)
                          and isinstance(n.value, ast.Name) and n.value.id == "settings"]
                if isinstance(key, ast.Name) and fields:
                    mapping[key.id] = fields[0]
            return mapping
    raise LookupError("eosbatch/config.py has no function to_env")


def _setting_constants(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(constant, variable, line) of every module-level NAME = "EOSBATCH_..." in source order."""
    found = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                and node.value.value.startswith("EOSBATCH_")):
            found.append((node.targets[0].id, node.value.value, node.lineno))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_page() -> str:
    from eosbatch import config

    source = CONFIG.read_text()
    tree = ast.parse(source)
    comments = _comments(source)
    fields, to_field = _settings_fields(tree), _env_to_field(tree)
    # The least a load needs; placeholders for what a default is derived from, so no path of this machine shows.
    base = {config.DATABASE_URL: "postgresql+psycopg2://user@host/db", config.KAFKA_BOOTSTRAP: "host:9092",
            "EOSBATCH_HOME": "$EOSBATCH_HOME"}
    defaults = config.to_env(config.load(base))
    rows = []
    for constant, variable, line in _setting_constants(tree):
        try:
            config.load({k: v for k, v in base.items() if k != variable})
            required = False
        except config.ConfigError as exc:
            required = exc.field == variable
        field = to_field.get(constant)
        meaning = "; ".join(part for part in (_comment_of(line, comments),
                                               _comment_of(fields[field], comments) if field else "") if part)
        if required:
            default = "**required**"
        elif variable in defaults and defaults[variable] != "":
            default = f"`{defaults[variable]}`"
        else:
            default = "unset"
        name = f"`{variable}`" + (f"<br>(`Settings.{field}`)" if field else "")
        rows.append(f"| {name} | {_cell(default)} | {_cell(meaning) or '-'} |")
    stack: dict[str, tuple[str, str]] = {}
    for path in STACK_SOURCES:
        for name, (default, meaning) in _environment_reads(path).items():
            known = stack.get(name, ("", ""))
            stack[name] = (known[0] or default, known[1] or meaning)
    stack_rows = [f"| `{name}` | {f'`{default}`' if default else '-'} | {_cell(meaning) or '-'} |"
                  for name, (default, meaning) in sorted(stack.items())]
    return "\n".join([
        "# Settings",
        "",
        "Generated at every build from `eosbatch/config.py`: the variables `config.load()` reads, their defaults as",
        "it computes them, and the comments next to each in the code. A bad value fails when the settings load,",
        "naming the variable (`ConfigError`). In Airflow, the connections `eosbatch_postgres`, `eosbatch_kafka` and",
        "`eosbatch_spark` come before the environment (see [Airflow](../airflow.md)).",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
        *rows,
        "",
        "## The embedded stack (development only)",
        "",
        "Read by `eosbatch stack` and `eosbatch airflow` only (see [the embedded stack](../how-to/embedded-stack.md));",
        "generated from where they read the environment, and the comments there.",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
        *stack_rows,
        "",
    ])


def _environment_reads(path: Path) -> dict[str, tuple[str, str]]:
    """EOSBATCH_* variable -> (its default, its comment) from a module: its constants naming one, and its calls
    `<x>.get(NAME[, default])` and `_port(NAME, default)`."""
    source = path.read_text()
    tree, comments = ast.parse(source), _comments(source)
    constants = {n.targets[0].id: n.value.value for n in tree.body
                 if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                 and isinstance(n.value, ast.Constant)}

    def value(node: ast.expr) -> str:
        if isinstance(node, ast.Constant):
            return str(node.value)
        if isinstance(node, ast.Name) and node.id in constants:
            return str(constants[node.id])
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "str" and len(node.args) == 1:
            return value(node.args[0])
        return re.sub(r"_port\('(\w+)', \w+\)", r"$\1", ast.unparse(node))

    found: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and str(node.value.value).startswith("EOSBATCH_"):
            found[node.value.value] = ("", _comment_of(node.lineno, comments))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("get", "_port") \
                and node.args and value(node.args[0]).startswith("EOSBATCH_"):
            name = value(node.args[0])
            default = value(node.args[1]) if len(node.args) > 1 else ""
            known = found.get(name, ("", ""))
            found[name] = (known[0] or default, known[1] or _comment_of(node.lineno, comments))
    return found


# ---- the CLI


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [choice for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for choice in dict.fromkeys(action.choices.values())]


def cli_page() -> str:
    from eosbatch import cli_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        sections: list[str] = []
        pending = [cli_parser.parser()]
        while pending:
            parser = pending.pop(0)
            level = "#" * min(parser.prog.count(" ") + 1, 3)
            title = "The `eosbatch` command" if level == "#" else f"`{parser.prog}`"
            sections += [f"{level} {title}", "", "```text", parser.format_help().rstrip(), "```", ""]
            pending[:0] = _subcommands(parser)
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    intro = ["Generated at every build from `eosbatch/cli_parser.py`: each command's and action's own `--help`.",
             "Exit codes: [errors and exit codes](errors.md).", ""]
    return "\n".join(sections[:2] + intro + sections[2:])
