"""The documentation: the site builds with `mkdocs build --strict` (a dead link, a dead anchor or a page left out
of the nav fails it), its generated reference pages hold every setting and every command; the README stays a
front page and its quickstart runs as written, on the suite's stack; and every `eosbatch` command line that a
page shows parses with the real parser."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from eosbatch import cli_parser, config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
BLOCK = re.compile(r"^[ \t]*```bash\n(.*?)^[ \t]*```", re.S | re.M)


def test_the_site_builds_strict_with_the_generated_reference(tmp_path) -> None:
    site = tmp_path / "site"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True,
                          timeout=300)
    took = time.monotonic() - started
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stdout[-3000:] + done.stderr[-5000:]
    print(f"mkdocs build --strict: {took:.1f} s")

    settings = (site / "reference" / "settings" / "index.html").read_text()
    variables = {value for value in vars(config).values() if isinstance(value, str) and value.startswith("EOSBATCH_")}
    assert variables and not [v for v in variables if f"<code>{v}</code>" not in settings]
    assert "<code>10080</code>" in settings  # a default as config.load computes it

    cli = (site / "reference" / "cli" / "index.html").read_text()
    commands = _commands(cli_parser.parser())
    assert len(commands) > 20 and not [c for c in commands if f"usage: {c} " not in cli]

    api = (site / "reference" / "api" / "index.html").read_text()
    assert "max_records_per_batch" in api and "Where results are published" in api  # from the docstrings

    home = (site / "index.html").read_text()  # the README, its links made the site's
    assert 'href="design/"' in home and "./scripts/test.sh" in home


def _commands(parser) -> list[str]:
    import argparse

    found = [parser.prog]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _commands(sub)
    return found


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    # The test command CI runs (.ci/run runs scripts/test.sh) is the README's, as written.
    assert "./scripts/test.sh     # set up, start the embedded stack, run the whole test suite" in text
    assert "./scripts/demo.sh     #" in text


# Placeholders of the command lines in the docs, given a value the parser takes.
PLACEHOLDERS = {"N": "1", "OFFSET": "5", "BATCH_ID": "7", "ID": "7", "T:P": "orders:0", "REVISION": "head",
                "FILE": "in.jsonl"}


def _command_lines() -> list[tuple[str, str]]:
    """(page, command line) of every `eosbatch` command in a bash block of the README and the docs."""
    found = []
    for path in [README, *PAGES]:
        for block in BLOCK.findall(path.read_text()):
            for line in block.splitlines():
                line = re.sub(r"\s+#.*$", "", line.strip())
                for part in re.split(r"\s*(?:&&|;|\|\|)\s*", line):
                    part = re.sub(r"^\S*\.venv/bin/", "", part.removeprefix('eval "$(').removesuffix(')"'))
                    if part.startswith("eosbatch ") and "COMMAND" not in part:
                        found.append((str(path.relative_to(ROOT)), part))
    return found


@pytest.mark.unit
def test_every_eosbatch_command_the_docs_show_parses() -> None:
    lines = _command_lines()
    assert len(lines) > 30
    refused = []
    for page, line in lines:
        words = []
        for word in shlex.split(line.replace("[", " ").replace("]", " "))[1:]:
            word = word.split("|")[0] if re.fullmatch(r"[\w-]+(\|[\w-]+)+", word) else word
            words.append(PLACEHOLDERS.get(word, word.lower() if word.isupper() else word))
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # --version, --help
                cli_parser.parser().parse_args(words)
        except SystemExit as exc:
            if exc.code:
                refused.append(f"{page}: {line}")
    assert not refused, "\n".join(refused)


@pytest.mark.unit
def test_the_pipeline_page_defines_a_pipeline_as_written() -> None:
    from eosbatch import Pipeline

    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "docs" / "pipelines.md").read_text(), re.S | re.M)
    found: dict = {}
    exec(compile(blocks[0], "docs/pipelines.md", "exec"), found)  # the page's own code, as written
    pipeline = found["pipeline"]
    assert isinstance(pipeline, Pipeline) and pipeline.transform is found["to_totals"]
    assert pipeline.sink.mode == "accumulate" and pipeline.output is not None


@pytest.mark.unit
def test_the_event_driven_example_builds_as_written() -> None:
    """docs/airflow-dags.md's pipeline of event-driven runs: its DAG is scheduled on the watched source Asset."""
    from eosbatch.orchestration import dags

    section = (ROOT / "docs" / "airflow-dags.md").read_text().split("## Event-driven runs", 1)[1]
    found: dict = {}
    exec(compile(re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)[0], "docs/airflow-dags.md", "exec"),
         found)
    [asset] = dags.schedule(found["orders_latest_live"])
    assert asset.uri == "x-eosbatch://orders_latest_live/source" and len(asset.watchers) == 1


@pytest.mark.integration
@pytest.mark.spark
def test_the_readme_quickstart_runs_as_written(settings, tmp_path) -> None:
    """The README's quickstart block, as written, from the checkout: its `stack up` finds the suite's stack
    running (it starts no second one); the pipeline module lives in a folder outside the checkout (the test's
    HOME). Then an independent count: the sink's totals equal the topic's records, read back read_committed."""
    block = BLOCK.findall(README.read_text().split("## Quickstart", 1)[1])[0]
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=ROOT, stdin=subprocess.DEVNULL,
                          env={**os.environ, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert (tmp_path / "my_pipelines" / "spend.py").is_file()

    import json

    from eosbatch.kafka.read_back import read_topic
    from eosbatch.ledger import store

    expected: dict[str, list] = {}
    for record in read_topic(settings, "purchases"):
        value = json.loads(record.value or b"{}")
        totals = expected.setdefault(value["customer"], [Decimal(0), 0])
        totals[0] += Decimal(str(value["amount"]))
        totals[1] += 1
    with store.transaction(settings) as cur:
        cur.execute("SELECT customer, spent, purchases FROM public.spend")
        stored = {customer: [spent, purchases] for customer, spent, purchases in cur.fetchall()}
    assert expected and stored == expected
