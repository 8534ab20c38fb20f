"""docs/quickstart.md, run exactly as written, so that the page cannot rot.

Every fenced block of the page is one of:
- a bash block: run, in page order, in one bash session (`set -euo pipefail`), so a failing command fails the
  test and exports carry over to the later blocks;
- a file block, after `<!-- file: NAME -->`: written to NAME in the session's folder at that point;
- an output block, after `<!-- output -->`: each of its lines must be a line of what the bash block before it
  printed;
- a block marked `<!-- not run: REASON -->`, with the reason.
A block that is none of these fails the test.

The session starts in the checkout, as the page does, with HOME a temporary folder, so that the page's
`~/eosbatch-quickstart` is outside the repository. It runs on the suite's stack, which must be the embedded
one: the page's `eval "$(.venv/bin/eosbatch stack up)"` finds it running and starts nothing (the page's own
`.venv/bin` goes first on PATH). The page's `eosbatch airflow up` starts the local Airflow with the page's
pipeline module (restarting one the orchestration tests left with other pipelines) and its `eosbatch airflow
down` stops it. It lives at the top of tests/ so that it
runs after the orchestration tests, which use that Airflow with their own pipelines."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from eosbatch import config
from tests.conftest import _unavailable

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "quickstart.md"
MARKER = re.compile(r"<!--\s*(not run:\s*(?P<reason>.*?)|file:\s*(?P<file>\S+)|(?P<output>output))\s*-->")
FENCE = re.compile(r"^```(?P<lang>\S*)\n(?P<body>.*?)^```\n", re.S | re.M)
BLOCK_START = "::quickstart block {} $(date +%s.%N)::"  # its index, and when it started


class Block(NamedTuple):
    line: int  # where it starts in the page, for messages
    lang: str
    body: str
    kind: str  # "run", "file", "output" or "not run"
    detail: str  # the file's name, or why it is not run


def blocks(page: str) -> list[Block]:
    """The page's fenced blocks with what the marker line just above each says about it."""
    found = []
    for match in FENCE.finditer(page):
        before = page[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.fullmatch(before.strip())
        line = page.count("\n", 0, match.start()) + 1
        lang, body = match["lang"], match["body"]
        if marker is None:
            kind, detail = ("run", "") if lang == "bash" else ("unmarked", "")
        elif marker["reason"] is not None:
            kind, detail = "not run", marker["reason"].strip()
        elif marker["file"] is not None:
            kind, detail = "file", marker["file"]
        else:
            kind, detail = "output", ""
        found.append(Block(line, lang, body, kind, detail))
    return found


def session_script(found: list[Block]) -> str:
    """One bash script: the bash blocks, each announced on stdout, and the file blocks written where they come."""
    lines = ["set -euo pipefail"]
    for i, block in enumerate(found):
        if block.kind == "run":
            lines += [f'echo "{BLOCK_START.format(i)}"', block.body]
        elif block.kind == "file":
            delimiter = "QUICKSTART_FILE_END"
            assert delimiter not in block.body
            lines += [f"cat > {block.detail} <<'{delimiter}'", block.body + delimiter]
    lines.append(f'echo "{BLOCK_START.format(len(found))}"')
    return "\n".join(lines) + "\n"


class Printed(NamedTuple):
    stdout: str
    seconds: float


def outputs(stdout: str) -> dict[int, Printed]:
    """What each run block printed and how long it took (block index -> Printed)."""
    parts = re.split(r"^::quickstart block (\d+) ([\d.]+)::\n", stdout, flags=re.M)
    starts = [(int(parts[i]), float(parts[i + 1]), parts[i + 2]) for i in range(1, len(parts), 3)]
    return {index: Printed(text, following[1] - start)
            for (index, start, text), following in zip(starts, starts[1:], strict=False)}


def test_every_block_of_the_quickstart_runs_or_says_why_not() -> None:
    made_up = "<!-- not run: why -->\n```bash\nrm -rf /\n```\n\n```python\nx = 1\n```\n\n```bash\nls\n```\n"
    assert [(b.kind, b.detail) for b in blocks(made_up)] == [("not run", "why"), ("unmarked", ""), ("run", "")]
    found = blocks(PAGE.read_text())
    assert [b for b in found if b.kind == "unmarked"] == []
    assert all(b.detail for b in found if b.kind == "not run"), "a not-run block must give its reason"
    assert {b.kind for b in found} == {"run", "file", "output", "not run"}
    assert [b.detail for b in found if b.kind == "file"] == ["views.jsonl", "page_views.py", "views_by_visitor.sql"]
    assert all(found[i - 1].kind == "run" for i, b in enumerate(found) if b.kind == "output")


def test_the_quickstart_runs_as_written(settings, tmp_path) -> None:
    from eosbatch import stack

    embedded = stack.status().env() if stack.home().exists() else {}
    if embedded.get(config.DATABASE_URL) != settings.database_url:
        _unavailable("the quickstart runs on the embedded stack (`eosbatch stack up`), which is not the suite's")
    found = blocks(PAGE.read_text())
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    env.pop(config.PIPELINES, None)
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", session_script(found)], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900, check=False)
    took = time.monotonic() - started
    print(f"the quickstart's blocks ran in {took:.1f}s")
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    printed = outputs(done.stdout)
    for i, ran in printed.items():
        print(f"  {ran.seconds:6.1f}s  docs/quickstart.md line {found[i].line}: {found[i].body.splitlines()[0]}")
    for i, block in enumerate(found):
        if block.kind == "output":
            said = {line.rstrip() for line in printed[i - 1].stdout.splitlines()}
            missing = [line for line in block.body.splitlines() if line.rstrip() not in said]
            assert missing == [], (f"docs/quickstart.md line {block.line}: not printed: {missing}\n"
                                   f"{printed[i - 1].stdout}")
    assert (home / "eosbatch-quickstart" / "page_views.py").exists()
    assert not (home / "eosbatch-quickstart").resolve().is_relative_to(ROOT)
