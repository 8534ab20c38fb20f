"""The package's shape (issue 34), checked: the import contracts of pyproject.toml ([tool.importlinter]), no
import cycle between modules, no module over 400 lines, and SQL only in the modules that own the database.

The last three read the source with `ast`, every import and string of a module, inside functions and under
TYPE_CHECKING too: a cycle is not hidden by a local import. Each guard names what breaks it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "eosbatch"

MAX_LINES = 400

# Where SQL may be written: the ledger owns the database; the development stack and the local Airflow set up
# their own. (migrations/, outside the package, holds the schema's history.)
SQL_HOMES = ("ledger/", "stack/", "orchestration/local.py")


def test_the_import_contracts_hold() -> None:
    run = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    done = subprocess.run([sys.executable, "-c", run, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


# ---------------------------------------------------------------- the module graph

def module_name(path: Path, root: Path) -> str:
    """eosbatch/ledger/store.py -> eosbatch.ledger.store; a package's __init__.py is the package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources(root: Path) -> Iterator[tuple[Path, str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path, module_name(path, root), ast.parse(path.read_text(), filename=str(path))


def imported_modules(tree: ast.Module, name: str, is_package: bool, modules: set[str]) -> Iterator[tuple[str, int]]:
    """(module, line) for every import of one of `modules` anywhere in the tree. `from a import b` imports the
    submodule a.b when there is one, else a name of a (its module, or its package's __init__)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the importing module's package, one level up per extra dot
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}", node.lineno
                elif base in modules:
                    yield base, node.lineno


def import_graph(root: Path) -> dict[str, dict[str, list[str]]]:
    """module -> {module it imports -> ["path:line", ...]}, over the package at `root`."""
    parsed = list(sources(root))
    modules = {name for _, name, _ in parsed}
    graph: dict[str, dict[str, list[str]]] = {name: {} for name in modules}
    for path, name, tree in parsed:
        for imported, line in imported_modules(tree, name, path.name == "__init__.py", modules):
            where = f"{path.relative_to(root.parent)}:{line}"
            if imported != name and where not in graph[name].get(imported, []):
                graph[name].setdefault(imported, []).append(where)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def shortest_cycle(graph: dict[str, dict[str, list[str]]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, as the modules in import order."""
    start, inside = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node]):
            if target == start:
                return paths[node] + [start]
            if target in inside and target not in paths:
                paths[target] = paths[node] + [target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component always has one


def import_cycles(root: Path) -> list[str]:
    """One line per set of modules that import each other: a shortest cycle, each import with where it is
    written; then, when the set is larger than that cycle, every other import inside it."""
    graph = import_graph(root)
    described = []
    for component in strongly_connected(graph):
        cycle = shortest_cycle(graph, component)
        edges = list(zip(cycle, cycle[1:], strict=False))
        others = [(a, b) for a in component for b in sorted(graph[a]) if b in component and (a, b) not in edges]
        line = "; ".join(f"{a} -> {b} ({', '.join(graph[a][b])})" for a, b in edges)
        if others:
            line += "; and inside the same cycle: " + "; ".join(f"{a} -> {b} ({', '.join(graph[a][b])})"
                                                                for a, b in others)
        described.append(line)
    return described


def test_no_import_cycles() -> None:
    cycles = import_cycles(PACKAGE)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# ---------------------------------------------------------------- module size

def long_modules(root: Path, limit: int = MAX_LINES) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(root.parent)}: {lines} lines")
    return found


def test_no_module_is_over_400_lines() -> None:
    found = long_modules(PACKAGE)
    assert not found, f"modules over {MAX_LINES} lines:\n" + "\n".join(found)


# ---------------------------------------------------------------- SQL

# The start of a statement (the string's start, or after `;`, `(` or a line break), then its shape. Keywords in
# capitals, as the project writes SQL: prose ("select the rows from") is not SQL. `?` stands for an f-string's
# expression, `{}` for a psycopg2 sql.SQL placeholder.
_NAME = r"[\w.\"{}?]+"
SQL = re.compile(
    r"(?:^|[;(\n])\s*(?:"
    r"SELECT\b[^;]*?\bFROM\b|SELECT\s+\S[^;]*$"  # a query, or a whole string that is one SELECT
    r"|INSERT\s+INTO\b|DELETE\s+FROM\b"
    rf"|UPDATE\s+(?:ONLY\s+)?{_NAME}\s+(?:AS\s+\w+\s+|\w+\s+)?SET\b"
    r"|(?:CREATE|ALTER|DROP)\s+(?:UNIQUE\s+|UNLOGGED\s+|TEMP(?:ORARY)?\s+|OR\s+REPLACE\s+)*"
    r"(?:TABLE|SCHEMA|INDEX|VIEW|SEQUENCE|DATABASE)\b"
    rf"|TRUNCATE\s+(?:TABLE\s+)?{_NAME}"
    r"|COPY\s+[^;]*?\b(?:FROM|TO)\b"
    r"|LOCK\s+TABLE\b"
    rf"|WITH\s+(?:RECURSIVE\s+)?{_NAME}(?:\s*\([^)]*\))?\s+AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\("
    r"|SET\s+(?:LOCAL|SESSION|TRANSACTION)\b"
    r")")


def string_text(node: ast.expr) -> str | None:
    """The text of a string expression: a constant, an f-string (its expressions as `?`), or a `+` of them."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "?" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = string_text(node.left), string_text(node.right)
        return None if left is None or right is None else left + right
    return None


def sql_strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, text) of every string in the tree that holds a SQL statement. Docstrings and other strings standing
    alone as statements are prose, not code, and are skipped."""
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        text = string_text(node) if isinstance(node, ast.expr) and id(node) not in prose else None
        if text is not None:
            if SQL.search(text):
                yield node.lineno, " ".join(text.split())[:90]
            continue  # its parts are not strings of their own
        pending.extend(ast.iter_child_nodes(node))


def misplaced_sql(root: Path, homes: tuple[str, ...] = SQL_HOMES) -> list[str]:
    found = []
    for path, _, tree in sources(root):
        inside = path.relative_to(root).as_posix()
        if inside.startswith(homes):
            continue
        found.extend(f"{path.relative_to(root.parent)}:{line}: {text}" for line, text in sorted(sql_strings(tree)))
    return found


def test_sql_is_written_in_the_ledger_only() -> None:
    found = misplaced_sql(PACKAGE)
    assert not found, f"SQL outside {', '.join(SQL_HOMES)}:\n" + "\n".join(found)


# ---------------------------------------------------------------- the guards catch what they are for

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_cycle_through_a_local_import_or_a_relative_one_is_found(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "a.py": "def f():\n    from pkg.sub import b\n",          # a local import of a submodule
        "sub/__init__.py": "from .b import thing\n",               # a package's __init__, relative
        "sub/b.py": "from .. import c\nthing = 1\n",               # `from .. import c`: the module pkg.c
        "c.py": "import pkg.a\n",
        "d.py": "from pkg import a, sub\n",                       # outside the cycle
    })
    assert import_cycles(root) == ["pkg.a -> pkg.sub.b (pkg/a.py:2); pkg.sub.b -> pkg.c (pkg/sub/b.py:1); "
                                   "pkg.c -> pkg.a (pkg/c.py:1)"]
    assert import_graph(root)["pkg.d"] == {"pkg.a": ["pkg/d.py:1"], "pkg.sub": ["pkg/d.py:1"]}
    assert import_graph(root)["pkg.sub"] == {"pkg.sub.b": ["pkg/sub/__init__.py:1"]}


def test_a_name_imported_from_a_package_is_an_import_of_its_init(tmp_path: Path) -> None:
    root = _package(tmp_path, {"sub/__init__.py": "from pkg.e import E\n", "e.py": "from pkg.sub import x\n"})
    assert import_cycles(root) == ["pkg.e -> pkg.sub (pkg/e.py:1); pkg.sub -> pkg.e (pkg/sub/__init__.py:1)"]


def test_a_long_module_is_named(tmp_path: Path) -> None:
    root = _package(tmp_path, {"short.py": "x = 1\n" * 400, "long.py": "x = 1\n" * 401})
    assert long_modules(root) == ["pkg/long.py: 401 lines"]


def test_sql_is_found_in_strings_f_strings_and_sql_objects_but_not_in_prose(tmp_path: Path) -> None:
    code = '''"""SELECT the rows FROM the ledger: a docstring is prose."""
from psycopg2 import sql


def work(cur, table):
    """Deletes rows. DELETE FROM in a docstring is prose too."""
    cur.execute("SELECT id FROM eosbatch.batches WHERE id = %s", (1,))
    cur.execute(f"INSERT INTO {table} (a) VALUES (%s)", (2,))
    cur.execute(sql.SQL("UPDATE {} SET state = %s").format(sql.Identifier(table)))
    cur.execute("WITH moved AS (" + f"DELETE FROM {table} RETURNING *) SELECT count(*) FROM moved")
    cur.execute("SET LOCAL lock_timeout = '5s'")
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (3,))
    raise ValueError("select the rows from the table, then update the batch set")
'''
    root = _package(tmp_path, {"steps.py": code, "ledger/store.py": code})
    assert [line.split(":")[1] for line in misplaced_sql(root)] == ["7", "8", "9", "10", "11", "12"]


# ---------------------------------------------------------------- the judge is not the code under test

HISTORY = ROOT / "tests" / "history"


def foreign_imports(root: Path, allowed: tuple[str, ...] = ("tests.history",)) -> list[str]:
    """path:line of every import, anywhere in a module of `root` (inside functions too), of eosbatch, or of tests
    outside `allowed` (a test helper may import eosbatch, and so would pull it in)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top in ("eosbatch", "examples", "bench") or (top == "tests" and not name.startswith(allowed)):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} imports {name}")
    return found


def test_the_history_checker_imports_nothing_of_eosbatch() -> None:
    """tests/history judges eosbatch's histories (docs/history-checker.md): it reads Kafka and PostgreSQL with
    their own clients and spells the output's contract itself, so a bug in eosbatch cannot hide in its judge."""
    assert HISTORY.is_dir()
    assert foreign_imports(HISTORY) == []


def test_an_import_of_eosbatch_in_the_checker_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f():\n    from eosbatch.kafka import record\n")
    (tmp_path / "b.py").write_text("import tests.history.history\nimport json\n")
    found = foreign_imports(tmp_path)
    assert len(found) == 1 and found[0].endswith("a.py:2 imports eosbatch.kafka")
