"""Scale: the steps' cost as the partition count grows, and the ledger's growth per batch.

    .venv/bin/python -m bench.scale [--partitions 10,100,1000] [--per-partition 20] [--staging-writers 0,2]
                                    [--fetch-wait-ms 500,5] [--readers spark,python,auto] [--rounds 3]
                                    [--batches 10000] [--real-batches 5]
                                    [--no-peer] [--rss-partitions 10,1000] [--rss-records 20000]
                                    [--results DIR] [--keep]

- For each partition count P, a fresh topic of P partitions with `per-partition` records in each, one batch
  over all of it: plan, process, commit, publish (+ finalize) timed one by one, then `status` and `ranges`
  (what an operator runs), and the ledger rows the batch added; with each `--staging-writers` bound and each
  `--fetch-wait-ms` of the Kafka reader and each `--readers` (EOSBATCH_KAFKA_READER; alternating), side by
  side, `--rounds` times. After the first of
  those cases of each partition count and round, the Structured Streaming peer (bench/peer.py, as bench.run
  runs it) over the same topic, unless --no-peer: seconds per batch of both, the ratio beside them, and the
  figure (bench/plots.py) as JSON and PNG in --results.
- Goal 6: a whole `eosbatch run` over a fresh topic at each of `--rss-partitions` in a process of its own
  (its peak RSS), then the engine's heap after GC (bench/memory.py, as bench.run --rss-check), and whether
  both stay within 10 %. Every one of those topics holds the same `--rss-records`, spread over its
  partitions, so that the partition count is the only thing that differs (a run's publish holds memory
  that grows with its records up to the producer's bounds: 200 records against 20,000 differed by 18 %).
- Then a history of `--batches` small batches of one 10-partition pipeline, each planned by the plan step and
  taken to published by the ledger writes alone (no Spark: 10,000 batches in minutes): the ledger's size
  (every table and index of the `eosbatch` schema, pg_total_relation_size) and rows per batch, the plan
  step's time at the first and the last tenth; then `--real-batches` batches through the engine, a
  compaction (`eosbatch compact`'s cleanup.compact) and as many again: does the plan or a batch slow down
  with the history, and what does compaction give back?

Same stack selection as bench.run (EOSBATCH_HOME and the ports, or EOSBATCH_DATABASE_URL +
EOSBATCH_KAFKA_BOOTSTRAP). docs/scaling.md models a 1,000-partition, 10^9-records-a-day pipeline from these.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from bench import PIPELINES_ENV, memory, plots, scale_peer
from bench.harness import MODULE, TRANSACTION_SIZE, Run, _cleanup, _padding, _settings, _timed
from bench.memory import Footprint
from bench.report import _table
from eosbatch import commands, config, registry, running, steps
from eosbatch.config import Settings
from eosbatch.context import quiet
from eosbatch.kafka import offsets
from eosbatch.ledger import claims, cleanup, lanes, positions, store
from eosbatch.spark import reader
from examples.orders.generate import ensure_topics, generate


class Ledger(NamedTuple):
    bytes: int
    rows: dict[str, int]


def ledger(settings: Settings) -> Ledger:
    """The ledger's on-disk size (tables, indexes, TOAST) and each table's row count."""
    with store.transaction(settings) as cur:
        cur.execute("SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON "
                    "n.oid = c.relnamespace WHERE n.nspname = 'eosbatch' AND c.relkind = 'r'")
        sizes = dict(cur.fetchall())
        rows = {}
        for table in sizes:
            cur.execute(f'SELECT count(*) FROM eosbatch."{table}"')  # noqa: S608 - names from the catalog
            rows[table] = cur.fetchone()[0]
    return Ledger(sum(sizes.values()), rows)


def _grew(before: Ledger, after: Ledger) -> dict[str, int]:
    return {t: after.rows[t] - before.rows.get(t, 0) for t in after.rows if after.rows[t] != before.rows.get(t, 0)}


def define(cases: list[tuple[Run, int, int | None]]) -> None:
    """All the cases' pipelines at once (bench/pipelines.py builds them from the environment, here and in the
    engine): `max_records` per case, None for one batch over the whole topic (a marker offset per input
    transaction and partition included)."""
    specs = [{"name": run.name, "topic": run.topic, "output": run.output,
              "max_records": most or run.records + math.ceil(run.records / TRANSACTION_SIZE) * partitions}
             for run, partitions, most in cases]
    os.environ[PIPELINES_ENV] = json.dumps(specs)
    os.environ[config.PIPELINES] = MODULE
    registry.load()


def _settled(settings: Settings, topic: str, partitions: int, records: int, timeout: float = 120) -> None:
    """Wait until the broker's metadata lists every partition of a new topic and its last stable offsets
    hold every record and stop moving (commit markers land last; 1,000 partitions take a while)."""
    deadline = time.monotonic() + timeout
    seen = -1
    while time.monotonic() < deadline:
        bounds = offsets.bounds(settings, [topic])
        total = sum(b.stable - b.low for b in bounds.values())
        if len(bounds) == partitions and total >= records and total == seen:
            return
        seen = total
        time.sleep(1)
    raise RuntimeError(f"{topic}: the broker shows {len(bounds)} of {partitions} partitions after {timeout:.0f}s")


def _fresh_topic(settings: Settings, run: Run, partitions: int) -> None:
    generate(settings, topic=run.topic, records=run.records, partitions=partitions, abort_every=0,
             transaction_size=TRANSACTION_SIZE, malformed_every=0, value_padding=_padding())
    ensure_topics(settings, {run.output: partitions})
    _settled(settings, run.topic, partitions, run.records)


def partitions_case(settings: Settings, run: Run, partitions: int) -> tuple[list[str], float]:
    """One batch over a fresh topic, step by step: the table's row, and the batch's seconds (plan..publish)."""
    _fresh_topic(settings, run, partitions)
    before = ledger(settings)
    ctx = commands.context(run.name, quiet)
    batch, plan_s = _timed(steps.plan, ctx)
    assert batch is not None, f"{run.name}: nothing planned"
    _, process_s = _timed(steps.process, ctx, batch.id)
    committed, commit_s = _timed(steps.commit, ctx, batch.id)
    done, publish_s = _timed(steps.publish, ctx, batch.id)
    _, status_s = _timed(commands.status, run.name)
    _, ranges_s = _timed(commands.ranges, run.name)
    grew = _grew(before, ledger(settings))
    if done.state != "published":
        raise RuntimeError(f"{run.name}: batch {batch.id} is {done.state}")
    # what the last stable offsets showed at plan time (a commit marker may land after the settle check)
    return ([f"{partitions:,}", f"{committed.records_read:,}", f"{plan_s:.2f}", f"{process_s:.2f}",
            f"{commit_s:.2f}",
            f"{publish_s:.2f}", f"{status_s:.2f}", f"{ranges_s:.2f}",
            f"{grew.get('batch_ranges', 0)}/{grew.get('committed_ranges', 0)}"],
            plan_s + process_s + commit_s + publish_s)


def partitions_footprint(settings: Settings, run: Run, partitions: int) -> tuple[Footprint, float]:
    """Goal 6 at `partitions`: a whole `eosbatch run` over a fresh topic in a spawned process (its peak RSS),
    then the engine's heap after GC (bench/memory.py, as bench.run --rss-check over record counts)."""
    _fresh_topic(settings, run, partitions)
    return memory.whole_run(settings, run.name, run.records)


HISTORY_PARTITIONS, HISTORY_BATCH = 10, 100  # the history case: offsets per batch over 10 partitions


def ledger_only_batch(settings: Settings, pipeline: str, batch: store.Batch) -> None:
    """Take a planned batch through staged, committed and published with the ledger writes that process,
    commit and finalize make (the same store calls, offsets moved, coverage claimed, a commit sequence), but
    no Spark and no sink or output rows: a history of ten thousand batches in minutes, row for row the
    shape that real batches leave."""
    records = sum(r.end - r.start for r in batch.ranges)
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch.id, lock=True)
        lanes.check_epoch(cur, batch, lock=True)
        batch = store.set_state(cur, batch, "staged", writers={"sink": {}, "dead_letters": {}, "columns": []},
                                records_read=records, dead_letters=0)
        claims.claim_coverage(cur, batch)
        positions.set_next_offsets(cur, pipeline, {r.tp: r.end for r in batch.ranges})
        batch = store.set_state(cur, batch, "committed", sink_rows=records, dead_letters=0, outbox_records=0,
                                commit_seq=store.next_commit_seq(cur, pipeline))
        cur.execute("UPDATE eosbatch.batches SET committed_at = now() WHERE id = %s", (batch.id,))
        store.set_state(cur, batch, "published", published_records=0)


def _pipeline_rows(settings: Settings, pipeline: str) -> dict[str, int]:
    with store.transaction(settings) as cur:
        cur.execute("SELECT (SELECT count(*) FROM eosbatch.batches WHERE pipeline = %(p)s), "
                    "(SELECT count(*) FROM eosbatch.batch_ranges r JOIN eosbatch.batches b ON b.id = r.batch_id "
                    " WHERE b.pipeline = %(p)s), "
                    "(SELECT count(*) FROM eosbatch.committed_ranges WHERE pipeline = %(p)s)", {"p": pipeline})
        return dict(zip(("batches", "batch_ranges", "committed_ranges"), cur.fetchone(), strict=True))


def _median_ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.0f} ms"


def history_case(settings: Settings, run: Run, batches: int, real: int, partitions: int = HISTORY_PARTITIONS,
                 per_batch: int = HISTORY_BATCH) -> list[str]:
    """`batches` batches written ledger-only (each planned by the real plan step, then ledger_only_batch),
    then `real` batches through the engine, then a compaction and `real` more: the plan's time and the
    ledger's size as the history grows, and what compaction gives back."""
    generate(settings, topic=run.topic, records=run.records, partitions=partitions, abort_every=0,
             transaction_size=TRANSACTION_SIZE, malformed_every=0, value_padding=_padding())
    ensure_topics(settings, {run.output: partitions})
    before = ledger(settings)
    plans: list[float] = []
    started = time.perf_counter()
    for _ in range(batches):
        batch, plan_s = _timed(steps.plan, commands.context(run.name, quiet))
        if batch is None:
            raise RuntimeError(f"{run.name}: the topic ran out after {len(plans)} batches")
        plans.append(plan_s)
        ledger_only_batch(settings, run.name, batch)
    history_s = time.perf_counter() - started
    after = ledger(settings)
    rows = _pipeline_rows(settings, run.name)

    def real_batches() -> tuple[list[float], list[float]]:
        planned, whole = [], []
        for _ in range(real):
            started = time.perf_counter()
            batch, plan_s = _timed(steps.plan, commands.context(run.name, quiet))
            if batch is None:
                raise RuntimeError(f"{run.name}: the topic ran out")
            done = running.run_batch(commands.context(run.name, quiet), batch)
            if done.state != "published":
                raise RuntimeError(f"{run.name}: batch {batch.id} is {done.state}")
            planned.append(plan_s)
            whole.append(time.perf_counter() - started)
        return planned, whole

    real_plans, real_whole = real_batches()
    with store.transaction(settings) as cur:
        compacted, compact_s = _timed(cleanup.compact, cur, run.name, 0)
    after_compact = _pipeline_rows(settings, run.name)
    compacted_plans, compacted_whole = real_batches()
    n = len(plans)
    head, tail = plans[: max(1, n // 10)], plans[-max(1, n // 10):]
    return [f"{n:,} batches of {per_batch} offsets over {partitions} partitions written ledger-only in "
            f"{history_s:.0f}s (each planned by the plan step), then {real} real batches, a compaction, {real} more",
            f"ledger +{(after.bytes - before.bytes) / n / 1024:.2f} KiB per batch "
            f"({(after.bytes - before.bytes) / 1024 / 1024:.1f} MiB for the history)",
            "this pipeline's rows: " + ", ".join(f"{t} {c:,}" for t, c in rows.items()),
            f"plan: first tenth median {_median_ms(head)}, last tenth median {_median_ms(tail)}",
            f"real batches after the history: plan median {_median_ms(real_plans)}, whole batch median "
            f"{_median_ms(real_whole)}",
            f"compact: {compacted.batches:,} batches, committed_ranges {compacted.committed_before:,} -> "
            f"{compacted.committed_after:,}, "
            f"batch_ranges -{compacted.batch_ranges_deleted:,}, in {compact_s:.2f}s; now "
            + ", ".join(f"{t} {c:,}" for t, c in after_compact.items()),
            f"real batches after compaction: plan median {_median_ms(compacted_plans)}, whole batch median "
            f"{_median_ms(compacted_whole)}",
            f"ledger now {ledger(settings).bytes / 1024 / 1024:.1f} MiB in all pipelines (before VACUUM)"]


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="10,100,1000", help="comma-separated (default %(default)s)")
    parser.add_argument("--per-partition", type=int, default=20)
    parser.add_argument("--staging-writers", default="0",
                        help="EOSBATCH_STAGING_WRITERS values to run each partition count with, side by side "
                             "(comma-separated; 0: unset, eosbatch's default: one task per engine core past 4 ranges "
                             "a core; 10000: a task per partition; default %(default)s)")
    parser.add_argument("--fetch-wait-ms", default="",
                        help="the Kafka reader's fetch.max.wait.ms values to run each case with, alternating "
                             "(comma-separated, e.g. 500,5: Kafka's default against eosbatch's; default: "
                             "eosbatch's only)")
    parser.add_argument("--readers", default="",
                        help="EOSBATCH_KAFKA_READER values to run each case with, alternating (comma-separated, "
                             "e.g. spark,python,auto; default: the environment's, else auto)")
    parser.add_argument("--rounds", type=int, default=1, help="of every case, one after the other")
    parser.add_argument("--batches", type=int, default=10_000,
                        help="of the history case, written ledger-only (0: skip it)")
    parser.add_argument("--real-batches", type=int, default=5,
                        help="through the engine after the history, and again after compacting it")
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                        help="the Structured Streaming peer over the same topic after eosbatch's batch, once per "
                             "partition count and round (default on; ~5 min at 1,000 partitions)")
    parser.add_argument("--rss-partitions", default="10,1000", metavar="P[,P...]",
                        help="partition counts of the memory check: a whole run in a process of its own (peak "
                             "RSS) and the engine's heap after GC, each (default %(default)s; empty: none)")
    parser.add_argument("--rss-records", type=int, default=20_000, metavar="N",
                        help="records of every memory-check topic, spread over its partitions (default "
                             "%(default)s: 1,000 partitions of 20)")
    parser.add_argument("--results", default=str(plots.RESULTS),
                        help="where the figure goes, as JSON and PNG (default %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the topics and tables of this sitting")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _options(argv)
    settings = _settings()
    stamp = time.strftime("%Y%m%d_%H%M%S")
    counts = [int(p) for p in args.partitions.split(",") if p]
    writers = [int(w) for w in args.staging_writers.split(",") if w]
    waits = [w.strip() for w in args.fetch_wait_ms.split(",") if w.strip()] or [reader.FETCH_MAX_WAIT_MS]
    readers = [config.kafka_reader(k) for k in args.readers.split(",") if k.strip()] or [settings.kafka_reader]
    # a budget of twice the records: one batch over everything, commit markers included
    cases = [(Run(f"bench_{stamp}_p{p}_w{w}_f{f}_{k}_r{r}", p * args.per_partition), p,
              2 * p * args.per_partition + 4 * p, w, f, k)
             for p in counts for w in writers for r in range(args.rounds) for f in waits for k in readers]
    history = Run(f"bench_{stamp}_history", (args.batches + 2 * args.real_batches) * HISTORY_BATCH)
    rss = [(Run(f"bench_{stamp}_rss{p}", args.rss_records), p)
           for p in (int(p) for p in args.rss_partitions.split(",") if p.strip())]
    define([*((run, p, most) for run, p, most, _, _, _ in cases), (history, HISTORY_PARTITIONS, HISTORY_BATCH),
            *((run, p, 2 * run.records + 4 * p) for run, p in rss)])
    rows: list[list[Any]] = []
    sides: list[scale_peer.Side] = []
    default_wait = reader.FETCH_MAX_WAIT_MS
    try:
        for run, partitions, _, bound, wait, kind in cases:
            os.environ[config.STAGING_WRITERS] = str(bound) if bound else ""
            os.environ[config.KAFKA_READER] = kind
            reader.FETCH_MAX_WAIT_MS = wait  # read when the batch's DataFrame is built, in this process
            row, batch_s = partitions_case(settings, run, partitions)
            rows.append([kind, str(bound or "unset"), wait, *row])
            print(f"{partitions} partitions, {kind} reader, staging writers {bound or 'unset'}, fetch wait {wait} "
                  f"ms: {batch_s:.1f} s a batch", flush=True)
            if (bound, wait, kind) == (writers[0], waits[0], readers[0]):  # the peer once per count and round
                peer_s, trigger_s = scale_peer.peer_batch(settings, run, partitions) if args.peer else (None, None)
                sides.append(scale_peer.Side(partitions, run.records, batch_s, peer_s, trigger_s))
                if peer_s is not None:
                    print(f"{partitions} partitions, the peer on the same topic: {peer_s:.1f} s "
                          f"(trigger {trigger_s:.1f} s)", flush=True)
        os.environ.pop(config.STAGING_WRITERS, None)
        os.environ[config.KAFKA_READER] = settings.kafka_reader  # as the environment had it (the memory check)
        reader.FETCH_MAX_WAIT_MS = default_wait
        if rows:
            print("\n" + _table(["reader", "staging writers", "fetch wait ms", "partitions", "records read", "plan s",
                                 "process s", "commit s", "publish s", "status s", "ranges s",
                                 "batch/committed ranges rows"], rows))
            print("\n" + scale_peer.table(sides), flush=True)
        footprints = {}
        for run, partitions in rss:
            print(f"memory check: a whole run over {partitions:,} partitions in a process of its own", flush=True)
            footprints[partitions] = partitions_footprint(settings, run, partitions)
        if footprints:
            print("\n" + _table(*memory.rows("partitions", footprints)) + "\n" + memory.verdict(footprints))
        if sides:
            measured = {**plots.sitting(["python -m bench.scale", *sys.argv[1:]]), **memory.as_json(footprints)}
            data, png = plots.save(scale_peer.figure(sides, args.per_partition, measured),
                                   Path(args.results) / scale_peer.STEM)
            print(f"figure: {png} (data {data})")
        if args.batches:
            print("\n" + "\n".join(history_case(settings, history, args.batches, args.real_batches)))
    finally:
        if not args.keep:
            _cleanup(settings, f"bench_{stamp}")


if __name__ == "__main__":
    main()
