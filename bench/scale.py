"""Scale: the steps' cost as the partition count grows, and the ledger's growth per batch.

    .venv/bin/python -m bench.scale [--partitions 10,100,1000] [--per-partition 20] [--batches 40] [--keep]

- For each partition count P, a fresh topic of P partitions with `per-partition` records in each, one batch
  over all of it: plan, process, commit, publish (+ finalize) timed one by one, then `status` and `ranges`
  (what an operator runs), and the ledger rows the batch added.
- Then `--batches` small batches of one 10-partition pipeline (`eosbatch run`, one process): the ledger's
  size (every table and index of the `eosbatch` schema, pg_total_relation_size) and rows per batch, and
  the plan step's time at the first and the last batches (does it grow with the history?).

Same stack selection as bench.run (EOSBATCH_HOME and the ports, or EOSBATCH_DATABASE_URL +
EOSBATCH_KAFKA_BOOTSTRAP). docs/scaling.md models a 1,000-partition, 10^9-records-a-day pipeline from these.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from typing import Any, NamedTuple

from bench import PIPELINES_ENV
from bench.run import MODULE, TRANSACTION_SIZE, Run, _padding, _settings, _table, _timed
from eosbatch import commands, config, registry, steps
from eosbatch.config import Settings
from eosbatch.kafka import offsets
from eosbatch.ledger import store
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


def partitions_case(settings: Settings, run: Run, partitions: int) -> list[str]:
    generate(settings, topic=run.topic, records=run.records, partitions=partitions, abort_every=0,
             transaction_size=TRANSACTION_SIZE, malformed_every=0, value_padding=_padding())
    ensure_topics(settings, {run.output: partitions})
    _settled(settings, run.topic, partitions, run.records)
    before = ledger(settings)
    batch, plan_s = _timed(steps.plan, run.name)
    assert batch is not None, f"{run.name}: nothing planned"
    _, process_s = _timed(steps.process, run.name, batch.id)
    committed, commit_s = _timed(steps.commit, run.name, batch.id)
    done, publish_s = _timed(steps.publish, run.name, batch.id)
    _, status_s = _timed(commands.status, run.name)
    _, ranges_s = _timed(commands.ranges, run.name)
    grew = _grew(before, ledger(settings))
    if done.state != "published":
        raise RuntimeError(f"{run.name}: batch {batch.id} is {done.state}")
    # what the last stable offsets showed at plan time (a commit marker may land after the settle check)
    return [f"{partitions:,}", f"{committed.records_read:,}", f"{plan_s:.2f}", f"{process_s:.2f}", f"{commit_s:.2f}",
            f"{publish_s:.2f}", f"{status_s:.2f}", f"{ranges_s:.2f}",
            f"{grew.get('batch_ranges', 0)}/{grew.get('committed_ranges', 0)}"]


HISTORY_PARTITIONS, HISTORY_BATCH = 10, 100  # the history case: offsets per batch over 10 partitions


def history_case(settings: Settings, run: Run, partitions: int = HISTORY_PARTITIONS,
                 per_batch: int = HISTORY_BATCH) -> list[str]:
    generate(settings, topic=run.topic, records=run.records, partitions=partitions, abort_every=0,
             transaction_size=TRANSACTION_SIZE, malformed_every=0, value_padding=_padding())
    ensure_topics(settings, {run.output: partitions})
    before = ledger(settings)
    plans: list[float] = []
    started = time.perf_counter()
    while True:
        batch, plan_s = _timed(steps.plan, run.name)
        if batch is None:
            break
        plans.append(plan_s)
        steps.run_batch(run.name, batch)
    seconds = time.perf_counter() - started
    after = ledger(settings)
    n = len(plans)
    grew = _grew(before, after)
    head, tail = plans[: max(1, n // 10)], plans[-max(1, n // 10):]
    return [f"{n:,} batches of {per_batch} offsets, {partitions} partitions, in {seconds:.0f}s",
            f"ledger +{(after.bytes - before.bytes) / n / 1024:.1f} KiB per batch",
            "rows per batch: " + ", ".join(f"{t} {g / n:.1f}" for t, g in sorted(grew.items())),
            f"plan: first tenth median {statistics.median(head) * 1000:.0f} ms, last tenth median "
            f"{statistics.median(tail) * 1000:.0f} ms",
            f"ledger now {after.bytes / 1024 / 1024:.1f} MiB, {sum(after.rows.values()):,} rows in all pipelines"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="10,100,1000", help="comma-separated (default %(default)s)")
    parser.add_argument("--per-partition", type=int, default=20)
    parser.add_argument("--batches", type=int, default=40, help="of the history case (0: skip it)")
    args = parser.parse_args(argv)
    settings = _settings()
    stamp = time.strftime("%Y%m%d_%H%M%S")
    counts = [int(p) for p in args.partitions.split(",") if p]
    # a budget of twice the records: one batch over everything, commit markers included
    cases = [(Run(f"bench_{stamp}_p{p}", p * args.per_partition), p, 2 * p * args.per_partition + 4 * p)
             for p in counts]
    history = Run(f"bench_{stamp}_history", args.batches * HISTORY_BATCH)
    define([*cases, (history, HISTORY_PARTITIONS, HISTORY_BATCH)])
    rows: list[list[Any]] = []
    for run, partitions, _ in cases:
        rows.append(partitions_case(settings, run, partitions))
        print(f"{partitions} partitions: done", flush=True)
    print("\n" + _table(["partitions", "records read", "plan s", "process s", "commit s", "publish s", "status s",
                         "ranges s", "batch/committed ranges rows"], rows))
    if args.batches:
        print("\n" + "\n".join(history_case(settings, history)))


if __name__ == "__main__":
    main()
