"""Per-step throughput of one eosbatch batch, side by side with this machine's own ceilings.

    python -m bench.run [--records N] [--partitions 4] [--rss-check]

Generates N JSON orders of ~200 B into a fresh topic (committed Kafka transactions, none aborted, none
malformed, so every step sees all N records; 1 in 10 orders repeats an earlier order id), runs them as ONE
batch through plan -> process -> commit -> publish, timing each step, then measures on the same stack a
PostgreSQL COPY of N similar rows and a plain (non-transactional) produce of N records of the same size.
With --rss-check, whole runs of 100k and 1M records (--rss-sizes) run each in a spawned process of its own:
its peak RSS (VmHWM), and the Spark Connect server's heap in use after a full GC, show that memory stays
flat as the batch grows (Spark streams the records, the outbox is streamed to Kafka).
With --peer-rounds R (default 2), eosbatch and a Structured Streaming peer (bench/peer.py) run alternately
on the same topic, and each round also runs eosbatch as K batches with overlapped steps (--overlap K[,K...],
default 2: `eosbatch run --overlap`); --tiny measures the fixed cost per micro-batch instead (CLI, one run,
Airflow, peer); --sizes N[,N...] runs only the records sweep (bench/sweep.py): eosbatch and the peer at each
record count, plotted (records/s against record count) into --results as JSON and PNG.

Uses EOSBATCH_DATABASE_URL / EOSBATCH_KAFKA_BOOTSTRAP when both are set, else brings up the embedded stack
(EOSBATCH_HOME, EOSBATCH_KAFKA_PORT, EOSBATCH_POSTGRES_PORT and EOSBATCH_SPARK_CONNECT_PORT choose which one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any, NamedTuple

from bench import PIPELINES_ENV, cpu, plots
from bench.ceilings import copy_ceilings, produce_ceiling
from bench.harness import (
    RECORD_BYTES,
    TRANSACTION_SIZE,
    WARM_UP_RECORDS,
    WARM_UP_RUNS,
    Run,
    _cleanup,
    _define,
    _measured,
    _padding,
    _settings,
    _timed,
)
from bench.one_batch import footprint, run_pipeline, warm_up
from bench.peer_submit import produce_orders, run_peer
from bench.report import _cpu_row, _table, report
from eosbatch import config, engine, running, stack
from eosbatch.commands import context
from eosbatch.config import Settings
from eosbatch.context import quiet
from examples.orders.generate import ensure_topics, generate

# ---------------------------------------------------------------- the Structured Streaming peer, side by side

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


def through_airflow(settings: Settings, name: str, batches: int, records: int) -> list[dict[str, Any]]:
    """`batches` runs of the pipeline's micro-batch DAG by `dag.test()` (bench/airflow_tiny.py) in a child
    with the local Airflow's environment; each run's wall time and task durations."""
    import subprocess
    import sys

    from eosbatch.orchestration import local

    local.write_config()
    local.ensure_database()
    env = local.environment(os.environ)
    local.migrate_and_connect(env, settings, log=lambda _: None)
    done = subprocess.run([sys.executable, "-m", "bench.airflow_tiny", name, str(batches), str(records)], env=env,
                          cwd=local.REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench.airflow_tiny {name}: exit {done.returncode}: {done.stderr[-3000:]}")
    runs: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])["runs"]
    return runs


def tiny_batches(settings: Settings, name: str, peer_name: str, airflow_name: str, batches: int, records: int
                 ) -> str:
    """The fixed cost of a micro-batch: `batches` batches of `records` records each, for eosbatch through the
    CLI from a fresh process (one batch per run), eosbatch within one run (the further batches), eosbatch
    through Airflow (a `dag.test()` run per batch), and the peer's warm triggers (one application, a
    trigger per batch)."""
    import statistics
    import subprocess
    import sys

    topic = f"{name}_in"
    ensure_topics(settings, {topic: 1, f"{name}_out": 1})
    fresh = []
    for _ in range(batches):
        produce_orders(settings.kafka_bootstrap, topic, records)
        done, seconds = _timed(subprocess.run, [sys.executable, "-m", "eosbatch.cli", "run", name],
                               capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"eosbatch run {name}: {done.stderr[-2000:]}")
        fresh.append(seconds)
    for _ in range(batches):
        produce_orders(settings.kafka_bootstrap, topic, records)
    summary, within = _timed(running.run, context(name, quiet))  # this process's session is warm after the first batch
    if summary.batches < batches:
        raise RuntimeError(f"{name}: expected {batches} batches in one run, got {summary.batches}")
    peer_topic = f"{peer_name}_in"
    ensure_topics(settings, {peer_topic: 1, f"{peer_name}_out": 1})
    result, wall = run_peer(settings, ["tiny", peer_topic, f"{peer_name}_out", peer_name,
                                       str(stack.home() / "bench-checkpoints" / peer_name), str(batches),
                                       str(records)])
    warm = result["triggers_s"][1:] or result["triggers_s"]
    ensure_topics(settings, {f"{airflow_name}_in": 1, f"{airflow_name}_out": 1})
    airflow = through_airflow(settings, airflow_name, batches, records)
    per_airflow = statistics.median(r["wall_s"] for r in airflow)
    task_names = ["plan", "process", "commit", "publish", "finalize"]
    task_medians = {t: statistics.median(r["tasks_s"].get(t, 0.0) for r in airflow) for t in task_names}
    per_fresh, per_within, per_peer = statistics.median(fresh), within / summary.batches, statistics.median(warm)
    rows = [["eosbatch run, fresh process, 1 batch", f"{per_fresh:.2f}", f"{min(fresh):.2f}",
             f"{per_fresh / per_peer:.1f}"],
            [f"eosbatch, one run of {summary.batches} batches (per batch)", f"{per_within:.2f}", "",
             f"{per_within / per_peer:.1f}"],
            ["eosbatch through Airflow, dag.test() per batch", f"{per_airflow:.2f}",
             f"{min(r['wall_s'] for r in airflow):.2f}", f"{per_airflow / per_peer:.1f}"],
            ["peer, warm trigger (per batch)", f"{per_peer:.2f}", f"{min(warm):.2f}", "1.0"],
            ["peer, spark-submit start + session", f"{result['session_s']:.2f}", "", ""]]
    first_airflow = airflow[0]["wall_s"]
    return "\n".join([f"fixed cost per micro-batch of {records} records ({engine.kind(settings)} engine):",
                      _table(["", "median s", "min s", "vs peer trigger"], rows),
                      "through Airflow, median task durations (s): "
                      + ", ".join(f"{t} {task_medians[t]:.2f}" for t in task_names)
                      + f"; the first dag.test() run (DAG import, session open): {first_airflow:.2f} s"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rss-check", action="store_true",
                        help="run each of --rss-sizes in a process of its own: its peak RSS, the engine's heap")
    parser.add_argument("--rss-sizes", default="100000,1000000", help="comma-separated (default %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' topics and sink tables")
    parser.add_argument("--peer-rounds", type=int, default=2,
                        help="rounds of eosbatch vs the Structured Streaming peer on one topic (0: none)")
    parser.add_argument("--warm-up", type=int, default=WARM_UP_RECORDS, metavar="N",
                        help="records of each of the engine's warm-up runs, not reported (default %(default)s)")
    parser.add_argument("--warm-up-runs", type=int, default=WARM_UP_RUNS, metavar="R",
                        help="warm-up runs over one topic (default %(default)s: a server's JIT needs a few million "
                             "records to reach its steady state; 0: none, to measure a server as it is)")
    parser.add_argument("--overlap", default="2", metavar="K[,K...]",
                        help="each peer round also runs eosbatch as K batches with overlapped steps, for each K "
                             "(default %(default)s; 0: none)")
    parser.add_argument("--split", action=argparse.BooleanOptionalAction, default=True,
                        help="each peer round also runs eosbatch as one batch committed, then published "
                             "(EOSBATCH_EARLY_PUBLISH=0; the default is early publish)")
    parser.add_argument("--tiny", action="store_true",
                        help="only the fixed cost per micro-batch: 10 batches of 100 records, eosbatch vs peer")
    parser.add_argument("--sizes", default="", metavar="N[,N...]",
                        help="only the records sweep (bench/sweep.py): eosbatch and the peer at each record count, "
                             "--peer-rounds rounds each (0: eosbatch alone); plotted into --results")
    parser.add_argument("--results", default=str(plots.RESULTS), help="where figures go (default %(default)s)")
    args = parser.parse_args(argv)
    if args.warm_up_runs < 0 or (args.warm_up_runs and args.warm_up <= 0):
        parser.error("--warm-up-runs must be 0 or more, and --warm-up more than 0 records")

    settings = _settings()
    prefix = time.strftime("bench_%Y%m%d_%H%M%S")
    if args.sizes:
        from bench import sweep
        sweep.main(settings, args, prefix)
        return
    if args.tiny:
        tiny, through = Run(f"{prefix}_tiny", 100), Run(f"{prefix}_tinyaf", 100)
        _define([tiny, through], 1)
        os.environ[PIPELINES_ENV] = json.dumps([{"name": r.name, "topic": r.topic, "output": r.output,
                                                 "max_records": 101}  # 100 records + 1 commit marker
                                                for r in (tiny, through)])
        print(tiny_batches(settings, tiny.name, f"{prefix}_tinypeer", through.name, 10, 100))
        if not args.keep:
            _cleanup(settings, prefix)
        return
    sizes = [args.records]
    if args.rss_check:
        sizes += [int(n) for n in args.rss_sizes.split(",")]
    runs = [Run(f"{prefix}_{i}", n) for i, n in enumerate(sizes)]
    peers = [Run(f"{prefix}_p{i}", args.records) for i in range(args.peer_rounds)]
    splits = [int(k) for k in args.overlap.split(",") if int(k) > 0]
    lapped = {k: [Run(f"{prefix}_o{k}x{i}", args.records) for i in range(args.peer_rounds)] for k in splits}
    variants = [Variant(f"{k} batches with their steps overlapped (EOSBATCH_OVERLAP)", f"overlapped x{k}", rs,
                        True, True) for k, rs in lapped.items()]
    if args.split:
        variants.append(Variant("one batch committed, then published (EOSBATCH_EARLY_PUBLISH=0)", "split",
                                [Run(f"{prefix}_e{i}", args.records) for i in range(args.peer_rounds)], False, False))
    warm = [Run(f"{prefix}_warm{i}", args.warm_up) for i in range(args.warm_up_runs)]
    _define(runs + peers + [r for v in variants for r in v.runs] + warm, args.partitions)
    # The warm-up runs read one topic; every peer round, and its variants' runs, the first round's topic, an
    # overlapped run's batches being 1/K of it.
    split = {r.name: k for k, rs in lapped.items() for r in rs}
    topics = {**{r.name: warm[0].topic for r in warm},
              **{r.name: peers[0].topic for r in [*peers, *(r for v in variants for r in v.runs)]}}
    specs = json.loads(os.environ[PIPELINES_ENV])
    for spec in specs:
        spec["topic"] = topics.get(spec["name"], spec["topic"])
        if spec["name"] in split:
            spec["max_records"] = math.ceil(spec["max_records"] / split[spec["name"]])
    os.environ[PIPELINES_ENV] = json.dumps(specs)
    padding = _padding()
    print(f"{args.records:,} records of ~{RECORD_BYTES} B over {args.partitions} partitions in one batch "
          f"(input in transactions of {TRANSACTION_SIZE:,}, none aborted, none malformed)", flush=True)

    warm_up(settings, warm, args.partitions, padding)
    generated, timings = run_pipeline(settings, runs[0], args.partitions, padding)
    copies = copy_ceilings(settings, args.records, args.partitions, padding, prefix)
    produce = produce_ceiling(settings, args.records, args.partitions, padding, f"{prefix}_ceiling")
    footprints = {}
    for run in runs[1:]:
        print(f"rss check: a run of {run.records:,} records in a process of its own", flush=True)
        footprints[run.records] = footprint(settings, run, args.partitions, padding)
    print("\n" + report(generated, timings, copies, produce, footprints))
    if peers:
        print("\n" + compare_with_peer(settings, peers, args.partitions, padding, variants), flush=True)
    if not args.keep:
        _cleanup(settings, prefix)


if __name__ == "__main__":
    main()
