"""eosbatch side by side with the Structured Streaming peer (bench/peer.py): rounds over the same input topic,
alternating, each also running eosbatch in its other ways (Variant); the times, ratios and CPU of each."""

from __future__ import annotations

import os
from typing import NamedTuple

from bench import cpu
from bench.harness import TRANSACTION_SIZE, Run, _measured
from bench.peer_submit import run_peer
from bench.report import _cpu_row, _table
from eosbatch import config, engine, running, stack
from eosbatch.commands import context
from eosbatch.config import Settings
from examples.orders.generate import ensure_topics, generate


class Variant(NamedTuple):
    """Another way to run eosbatch in each peer round, a run per round."""
    label: str      # what the table says it is
    short: str      # its rows in the CPU table
    runs: list[Run]
    overlap: bool   # EOSBATCH_OVERLAP: the run's batches' steps side by side
    early: bool     # EOSBATCH_EARLY_PUBLISH: the batch produced while it commits


def _eosbatch_round(settings: Settings, run: Run, partitions: int, overlap: bool, early: bool = True
                    ) -> tuple[float, cpu.Usage]:
    ensure_topics(settings, {run.output: partitions})
    os.environ[config.EARLY_PUBLISH] = "1" if early else "0"  # read by the run's config.load()
    logged: list[str] = []
    try:
        summary, seconds, used = _measured(running.run, context(run.name, logged.append), overlap=overlap)
    finally:
        os.environ.pop(config.EARLY_PUBLISH)
    if summary.records_read != run.records:
        raise RuntimeError(f"{run.name}: read {summary.records_read} of {run.records}")
    if early and not overlap and not any("produced while it committed" in line for line in logged):  # a fallback
        raise RuntimeError(f"{run.name}: the early publish was not kept: {logged[-3:]}")
    return seconds, used


def compare_with_peer(settings: Settings, runs: list[Run], partitions: int, padding: int,
                      variants: list[Variant] | None = None) -> str:
    """eosbatch (one `running.run`, plan..publish, exactly-once) and the Structured Streaming peer (one
    availableNow trigger, at-least-once) over the SAME input topic, alternating, a round per run. Each round
    also runs each of `variants` (K batches with overlapped steps; one batch published while it commits)."""
    topic, records = runs[0].topic, runs[0].records
    generate(settings, topic=topic, records=records, partitions=partitions, transaction_size=TRANSACTION_SIZE,
             abort_every=0, malformed_every=0, value_padding=padding)
    variants = variants or []
    rows: list[list[str]] = []
    ratios: list[float] = []
    usages: list[tuple[float, cpu.Usage, float, cpu.Usage]] = []
    lapped: list[list[tuple[float, cpu.Usage]]] = [[] for _ in variants]
    for i, run in enumerate(runs):
        ours, our_cpu = _eosbatch_round(settings, run, partitions, overlap=False)
        for variant, timed in zip(variants, lapped, strict=True):
            timed.append(_eosbatch_round(settings, variant.runs[i], partitions, variant.overlap, variant.early))
        peer_out = f"{run.name}_peer_out"
        ensure_topics(settings, {peer_out: partitions})
        (result, wall), _, peer_cpu = _measured(run_peer, settings, [
            "once", topic, peer_out, f"{run.name}_peer", str(stack.home() / "bench-checkpoints" / run.name)])
        trigger = result["triggers_s"][0]
        ratios.append((records / ours) / (records / wall))
        usages.append((ours, our_cpu, wall, peer_cpu))
        rows.append([f"round {i + 1}", f"{ours:.1f}", f"{records / ours:,.0f}", f"{wall:.1f}", f"{trigger:.1f}",
                     f"{records / wall:,.0f}", f"{ratios[-1]:.2f}", f"{wall and (trigger / ours):.2f}",
                     f"{our_cpu.machine:.1f}", f"{peer_cpu.machine:.1f}"])
    import statistics

    median = statistics.median(ratios)
    cpu_rows = [row for i, (ours, our_cpu, wall, peer_cpu) in enumerate(usages)
                for row in (_cpu_row(f"round {i + 1} eosbatch", ours, our_cpu),
                            _cpu_row(f"round {i + 1} peer", wall, peer_cpu))]
    cores = cpu.cores()
    floor = statistics.median(u[1].machine for u in usages) / cores
    needed = statistics.median(u[2] for u in usages) / 2
    text = [
        f"eosbatch ({engine.kind(settings)}, exactly-once) vs Structured Streaming peer (at-least-once), "
        f"{records:,} records, same topic, alternating:",
        _table(["", "eosbatch s", "eosbatch rec/s", "peer s (spark-submit)", "peer trigger s", "peer rec/s",
                "ratio (rec/s)", "ratio vs trigger", "eosbatch CPU-s", "peer CPU-s"], rows),
        f"median ratio eosbatch/peer records/s: {median:.2f} (peer s includes its JVM and session start, as "
        "a scheduled spark-submit pays it; 'ratio vs trigger' holds eosbatch against the trigger alone)"]
    for variant, timed in zip(variants, lapped, strict=True):
        over = [[f"round {i + 1}", f"{s:.1f}", f"{records / s:,.0f}", f"{u[0] / s:.2f}", f"{u[2] / s:.2f}",
                 f"{used.machine:.1f}", f"{used.machine / s:.2f}"]
                for i, ((s, used), u) in enumerate(zip(timed, usages, strict=True))]
        cpu_rows += [_cpu_row(f"round {i + 1} {variant.short}", s, used) for i, (s, used) in enumerate(timed)]
        text += ["", f"the same rounds, eosbatch as {variant.label} (run between the one-batch run and the peer):",
                 _table(["", "eosbatch s", "rec/s", "vs one batch", "ratio vs peer (rec/s)", "CPU-s",
                         "cores busy"], over),
                 f"median ratio of {variant.label} vs the peer, records/s: "
                 f"{statistics.median(u[2] / s for (s, _), u in zip(timed, usages, strict=True)):.2f}"]
    return "\n".join([
        *text, "",
        _table(["CPU seconds", "wall s", "machine", "cores busy", *usages[0][1].parts, "other"], cpu_rows),
        f"2x the peer needs eosbatch within {needed:.1f} s (median); its median CPU work on {cores} cores takes "
        f"at least {floor:.1f} s however it is overlapped"])
