"""bench.scale's side by side: the Structured Streaming peer (bench/peer.py, spark-submitted as bench.run
does) over the same topic as eosbatch's one batch at each partition count, seconds per batch of each with the
ratio, and the figure (seconds per batch against partition count) as JSON and PNG."""

from __future__ import annotations

import statistics
from typing import Any, NamedTuple

from bench import plots
from bench.harness import Run
from bench.peer_submit import run_peer
from bench.report import _table
from eosbatch import stack
from eosbatch.config import Settings
from examples.orders.generate import ensure_topics

STEM = "seconds_per_batch"
EOSBATCH, PEER, PEER_TRIGGER = "eosbatch (plan..publish)", "peer (spark-submit, wall)", "peer (trigger alone)"


class Side(NamedTuple):
    partitions: int
    records: int
    eosbatch_s: float        # plan + process + commit + publish (+ finalize) of the one batch
    peer_s: float | None     # the peer's wall time, its JVM and session start included (None: --no-peer)
    peer_trigger_s: float | None


def peer_batch(settings: Settings, run: Run, partitions: int) -> tuple[float, float]:
    """The peer's one availableNow trigger over the run's input topic: its wall time and its trigger alone."""
    output = f"{run.name}_peer_out"
    ensure_topics(settings, {output: partitions})
    result, wall = run_peer(settings, ["once", run.topic, output, f"{run.name}_peer",
                                       str(stack.home() / "bench-checkpoints" / run.name)])
    return wall, result["triggers_s"][0]


def table(sides: list[Side]) -> str:
    rows = []
    for s in sides:
        peer = ([f"{s.peer_s:.2f}", f"{s.peer_trigger_s:.2f}", f"{s.peer_s / s.eosbatch_s:.2f}",
                 f"{s.peer_trigger_s / s.eosbatch_s:.2f}"]
                if s.peer_s is not None and s.peer_trigger_s is not None else ["", "", "", ""])
        rows.append([f"{s.partitions:,}", f"{s.records:,}", f"{s.eosbatch_s:.2f}", *peer])
    return "\n".join([
        _table(["partitions", "records", "eosbatch s/batch", "peer s/batch", "peer trigger s", "ratio (peer s / "
                "eosbatch s)", "ratio vs trigger"], rows),
        "eosbatch s/batch: plan + process + commit + publish of its one batch; peer s/batch: its spark-submit's "
        "wall time, JVM and session start included (a scheduled spark-submit pays them), and its trigger alone"])


def figure(sides: list[Side], per_partition: int, measured: dict[str, Any]) -> plots.Figure:
    """The median seconds per batch of each side at each partition count."""
    counts = sorted({s.partitions for s in sides})

    def median(field: str) -> list[float]:
        return [statistics.median(getattr(s, field) for s in sides if s.partitions == p) for p in counts]

    x = [float(p) for p in counts]
    series = [plots.Series(EOSBATCH, x, median("eosbatch_s"))]
    if all(s.peer_s is not None for s in sides):
        series += [plots.Series(PEER, x, median("peer_s")), plots.Series(PEER_TRIGGER, x, median("peer_trigger_s"))]
    return plots.Figure(f"seconds per batch against partition count, {per_partition} records a partition",
                        "partitions", "seconds per batch (median of the rounds)", series, log_x=True, log_y=True,
                        measured={**measured, "rounds": [s._asdict() for s in sides]})
