"""Goal 6, memory stays flat: a whole `eosbatch run` in a spawned process of its own (its peak RSS), then the
engine's heap after a full GC, for runs that differ in one dimension (records in bench.run --rss-check,
partitions in bench.scale), and whether the largest stays within 10 % of the smallest."""

from __future__ import annotations

import math
import multiprocessing
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from eosbatch import engine, registry, running, stack
from eosbatch.commands import context
from eosbatch.config import Settings
from eosbatch.context import quiet

FLAT_WITHIN = 0.10


class Footprint(NamedTuple):
    """A whole run in a process of its own."""
    records: int
    seconds: float
    baseline_mib: float  # its VmRSS before the run (imports done)
    peak_mib: float      # its VmHWM after the run


def vm_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def run_child(pipeline: str, reply: Any) -> None:
    registry.load()  # the baseline holds the imports, the peak what the run adds
    baseline = vm_mib("VmRSS")
    started = time.perf_counter()
    summary = running.run(context(pipeline, quiet))
    reply.send(Footprint(summary.records_read, time.perf_counter() - started, baseline, vm_mib("VmHWM")))


def in_child(target: Callable[..., None], *args: Any) -> Footprint:
    # spawn, not fork: a forked child's RSS would start with this process's pages (the generator's records).
    spawned = multiprocessing.get_context("spawn")
    receive, send = spawned.Pipe(duplex=False)
    child = spawned.Process(target=target, args=(*args, send))
    child.start()
    send.close()
    try:
        result: Footprint = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"{target.__name__}{args} died (exit code {child.exitcode})") from None
    child.join()
    return result


def engine_heap_mib(settings: Settings) -> float:
    """The Spark Connect server's JVM heap in use right after a full GC (`jcmd GC.run`, `GC.heap_info`):
    what the engine keeps between batches. NaN for the spark-submit engine (its JVM ends with the batch)."""
    pid = stack.status().spark_connect_pid if engine.kind(settings) == "connect" else None
    jcmd = shutil.which("jcmd")
    if pid is None or jcmd is None:
        return math.nan
    subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, check=True, timeout=120)
    info = subprocess.run([jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, check=True, timeout=60)
    found = re.search(r"heap\s+total \d+K, used (\d+)K", info.stdout)
    return int(found.group(1)) / 1024 if found else math.nan


def whole_run(settings: Settings, pipeline: str, records: int) -> tuple[Footprint, float]:
    """A whole `eosbatch run` of the pipeline (its input already in its topic) in a spawned child, checked to
    have read all `records`; then the engine's heap after GC."""
    ran = in_child(run_child, pipeline)
    if ran.records != records:
        raise RuntimeError(f"{pipeline}: the run read {ran.records} records, expected {records}")
    return ran, engine_heap_mib(settings)


def rows(unit: str, footprints: dict[int, tuple[Footprint, float]]) -> tuple[list[str], list[list[str]]]:
    """A table's header and rows, a run per case (`unit`: what the cases differ in, e.g. records)."""
    header = ["runner (eosbatch run, own process)", "records", "seconds", "baseline RSS MiB", "peak RSS MiB (VmHWM)",
              "engine heap after GC MiB"]
    return header, [[f"{n:,} {unit}", f"{p.records:,}", f"{p.seconds:.2f}", f"{p.baseline_mib:.0f}",
                     f"{p.peak_mib:.0f}", f"{heap:.0f}"] for n, (p, heap) in sorted(footprints.items())]


def as_json(footprints: dict[int, tuple[Footprint, float]]) -> dict[str, Any]:
    """The memory check as a figure's JSON keeps it (an unknown heap as null), with its verdict."""
    if not footprints:
        return {}
    runs = {str(n): {**p._asdict(), "engine_heap_mib": None if math.isnan(heap) else heap}
            for n, (p, heap) in sorted(footprints.items())}
    return {"memory": runs, "memory_verdict": verdict(footprints)}


def growth(smallest: float, largest: float) -> float:
    """The largest's change over the smallest, as a fraction (NaN when either is unknown)."""
    return (largest - smallest) / smallest if smallest and not math.isnan(smallest + largest) else math.nan


def verdict(footprints: dict[Any, tuple[Footprint, float]], within: float = FLAT_WITHIN) -> str:
    """'memory flat: yes/no (within 10 %)' between the first and the last case (in key order), peak RSS and
    engine heap each; an unknown heap (the spark-submit engine) is left out of the verdict and said so."""
    if len(footprints) < 2:
        return "memory flat: not measured (fewer than two cases)"
    first, last = sorted(footprints)[0], sorted(footprints)[-1]
    (small, small_heap), (large, large_heap) = footprints[first], footprints[last]
    rss, heap = growth(small.peak_mib, large.peak_mib), growth(small_heap, large_heap)
    known = [g for g in (rss, heap) if not math.isnan(g)]
    flat = all(abs(g) <= within for g in known)
    heap_text = (f"engine heap after GC {small_heap:.0f} -> {large_heap:.0f} MiB ({heap:+.1%})" if not math.isnan(heap)
                 else "engine heap not measured (no Connect server or no jcmd)")
    return (f"memory flat: {'yes' if flat else 'no'} (within {within:.0%}): {first:,} -> {last:,}: runner peak RSS "
            f"{small.peak_mib:.0f} -> {large.peak_mib:.0f} MiB ({rss:+.1%}), {heap_text}")
