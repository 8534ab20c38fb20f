"""Where a password could leak, for the tests that search for one: every process's arguments while a run
goes, and what the embedded stack's logs gained during a test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eosbatch import stack
from eosbatch.config import Settings
from eosbatch.ledger import store


@contextmanager
def command_lines() -> Iterator[set[str]]:
    """Every process's arguments (what `ps` shows), sampled every 0.1 s while the block runs."""
    seen: set[str] = set()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    seen.add(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    pass
            time.sleep(0.1)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        stop.set()
        watcher.join()


def stack_logs() -> dict[Path, int]:
    """The embedded stack's logs (PostgreSQL's, the broker's, the Spark Connect server's, rolled-over ones and
    the servers' stdout) and their sizes."""
    skip = {"data", "cache", "airflow", "bench-checkpoints"}
    paths = {p for pattern in ("*.log", "*.log.*", "*.out") for p in stack.home().rglob(pattern)}
    return {path: path.stat().st_size for path in paths if not skip & set(path.parts)}


def grown_since(before: dict[Path, int]) -> dict[str, str]:
    """What each stack log gained since `before` (stack_logs() then)."""
    grown = {}
    for path in stack_logs():
        with path.open("rb") as log:
            start = before.get(path, 0)
            log.seek(start if path.stat().st_size >= start else 0)  # rolled over since: all of it is new
            grown[str(path)] = log.read().decode(errors="replace")
    return grown


def ledger_rows(settings: Settings) -> list[str]:
    """Every row of every table of the ledger, as text."""
    with store.transaction(settings) as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'eosbatch'")
        rows = []
        for (table,) in cur.fetchall():
            cur.execute(f'SELECT t::text FROM eosbatch."{table}" t')  # noqa: S608 - names from the catalog
            rows.extend(row for (row,) in cur.fetchall())
    return rows
