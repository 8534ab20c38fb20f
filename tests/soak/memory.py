"""The soak's memory figures: every `every` seconds, the Spark Connect server's resident memory (its JVM, and
the PySpark workers it started), its JVM heap (`jcmd <pid> GC.heap_info`, a fraction of a second), and the
runner running at that moment; the runners' own peaks come from tests/soak/runners.py. Written as a CSV and
summed up per time slice for the report."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.soak.runners import rss_kb

HEAP = re.compile(r"heap\s+total (\d+)K, used (\d+)K")
METASPACE = re.compile(r"Metaspace\s+used (\d+)K")


@dataclass
class Sample:
    elapsed_s: float
    connect_pid: int
    connect_rss_mb: float
    connect_workers_rss_mb: float  # the Python workers under the Connect server (the transform runs there)
    heap_used_mb: float
    heap_committed_mb: float
    metaspace_mb: float
    runner_pid: int
    runner_rss_mb: float


def heap_info(pid: int) -> tuple[float, float, float]:
    """(heap used, heap committed, metaspace used) in MB from `jcmd <pid> GC.heap_info`; zeros if it cannot say."""
    try:
        done = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0.0, 0.0, 0.0
    heap, meta = HEAP.search(done.stdout), METASPACE.search(done.stdout)
    return ((int(heap.group(2)) / 1024, int(heap.group(1)) / 1024) if heap else (0.0, 0.0)) + \
        ((int(meta.group(1)) / 1024,) if meta else (0.0,))


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, pending = [], list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(children.get(child, []))
    return found


class MemorySampler:
    """Samples until stop(); `connect_pid` and `runner_pid` say what runs now (None: nothing)."""

    def __init__(self, every: float, origin: float, connect_pid: Callable[[], int | None],
                 runner_pid: Callable[[], int | None]) -> None:
        self.every, self.origin = every, origin
        self.connect_pid, self.runner_pid = connect_pid, runner_pid
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-memory", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def sample(self) -> Sample:
        connect = self.connect_pid() or 0
        runner = self.runner_pid() or 0
        used, committed, meta = heap_info(connect) if connect else (0.0, 0.0, 0.0)
        workers = sum(rss_kb(p) for p in descendants(connect)) if connect else 0
        return Sample(round(time.monotonic() - self.origin, 1), connect, round(rss_kb(connect) / 1024, 1) if connect
                      else 0.0, round(workers / 1024, 1), round(used, 1), round(committed, 1), round(meta, 1),
                      runner, round(rss_kb(runner) / 1024, 1) if runner else 0.0)

    def _run(self) -> None:
        while True:
            self.samples.append(self.sample())
            if self._stop.wait(self.every):
                break

