"""eosbatch's own runs in bench.run: the warm-up runs, the one batch timed step by step (with its commit's
durability cost beside it), and whole runs' memory footprints in processes of their own."""

from __future__ import annotations

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from bench import memory
from bench.harness import TRANSACTION_SIZE, Run, Timing, _measured, _timed
from bench.memory import Footprint
from bench.report import _row, _table
from eosbatch import engine, registry, running, steps
from eosbatch.commands import context
from eosbatch.config import Settings
from eosbatch.context import quiet
from eosbatch.ledger import sinks, trial
from eosbatch.protocol import sequence
from eosbatch.steps import sequence as bound
from examples.orders.generate import ensure_topics, generate


def footprint(settings: Settings, run: Run, partitions: int, padding: int) -> tuple[Footprint, float]:
    """A whole `eosbatch run` of `run.records` fresh records in a spawned child: its records, time, baseline
    and peak RSS; then the engine's heap after GC."""
    generate(settings, topic=run.topic, records=run.records, partitions=partitions,
             transaction_size=TRANSACTION_SIZE, abort_every=0, malformed_every=0, value_padding=padding)
    ensure_topics(settings, {run.output: partitions})
    return memory.whole_run(settings, run.name, run.records)


def warm_up(settings: Settings, runs: list[Run], partitions: int, padding: int) -> None:
    """Whole runs over one topic, not reported, until the engine is in its steady state. The engine is
    long-lived: a batch meets a server (and a broker) whose JIT has compiled the read, parse, staging and
    produce paths. Measured here on a server just started, the same 1M-record process step (without its
    COPY) took 16.6, 7.5, 5.7, 5.1 and 4.5 s in five runs in a row, then stayed there: the JIT needs a few
    million records. Without this, the table reports a server's first minutes, not the engine running."""
    if not runs:
        print("engine warm-up: none (--warm-up-runs 0)", flush=True)
        return
    generate(settings, topic=runs[0].topic, records=runs[0].records, partitions=partitions,
             transaction_size=TRANSACTION_SIZE, abort_every=0, malformed_every=0, value_padding=padding)
    seconds = []
    for run in runs:  # every run reads the first one's topic (see main)
        ensure_topics(settings, {run.output: partitions})
        summary, took = _timed(running.run, context(run.name, quiet))
        if summary.records_read != run.records:
            raise RuntimeError(f"{run.name}: the warm-up run read {summary.records_read} records, "
                               f"expected all {run.records} in one batch")
        seconds.append(took)
    print(f"engine warm-up: {len(runs)} run(s) of {runs[0].records:,} records in "
          f"{', '.join(f'{s:.1f}' for s in seconds)} s (not reported)", flush=True)
    settle(settings, [sinks.sink_table(registry.get(run.name)) for run in runs])


def settle(settings: Settings, tables: list[sql.Identifier]) -> None:
    """Drop the warm-up's sinks (a few million rows that autovacuum and ANALYZE would get to during the
    measured steps) and CHECKPOINT (else one may land in them: here one comes every ~2.2 GB of WAL). A role
    that may not CHECKPOINT (pg_checkpoint, PostgreSQL 15) is told so, and the bench goes on."""
    connection = psycopg2.connect(settings.psycopg_dsn)
    connection.autocommit = True
    try:
        with connection.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.SQL(", ").join(tables)))
            try:
                cur.execute("CHECKPOINT")
            except psycopg2.errors.InsufficientPrivilege:
                print("engine warm-up: no CHECKPOINT after it (this role may not); a checkpoint may land in the "
                      "measured steps", flush=True)
    finally:
        connection.close()


def run_pipeline(settings: Settings, run: Run, partitions: int, padding: int) -> tuple[Timing, list[Timing]]:
    """Generate the run's input, then plan, process, commit and publish it as one batch, timing each step."""
    produced, seconds = _timed(generate, settings, topic=run.topic, records=run.records,
                               partitions=partitions, transaction_size=TRANSACTION_SIZE, abort_every=0,
                               malformed_every=0, value_padding=padding)
    generated = Timing("generate input (transactional)", len(produced.committed), seconds)
    del produced
    ensure_topics(settings, {run.output: partitions})
    ctx = context(run.name, quiet)
    batch, plan_s, plan_cpu = _measured(steps.plan, ctx)
    if batch is None:
        raise RuntimeError(f"{run.name}: nothing to plan in {run.topic}")
    # The declared steps after plan (eosbatch.protocol.sequence), timed by the overlapped run's stages:
    # process, commit, publish + finalize.
    _, process_s, process_cpu = _measured(bound.run_in_order, ctx, batch.id, sequence.in_stage("main"))
    durability = durability_cost(settings, run.name, batch.id)
    clean_up_after_rollbacks(settings, run.name)
    committed, commit_s, commit_cpu = _measured(bound.run_in_order, ctx, batch.id, sequence.in_stage("commit"))
    if committed.records_read != run.records:
        raise RuntimeError(f"{run.name}: batch {batch.id} read {committed.records_read} records, "
                           f"expected all {run.records} in one batch")
    done, publish_s, publish_cpu = _measured(bound.run_in_order, ctx, batch.id, sequence.in_stage("publish"))
    staged = committed.records_read - (committed.dead_letters or 0)
    print("\n" + _table(["commit statement, side by side (rolled back)", "records", "seconds", "records/s",
                         "vs upsert only", ""], [_row(t, durability[0]) for t in durability]) + "\n", flush=True)
    return generated, [Timing("plan", run.records, plan_s, plan_cpu),
                       Timing(f"process ({engine.kind(settings)})", committed.records_read, process_s,
                              process_cpu),
                       Timing(f"commit ({committed.sink_rows:,} sink rows)", staged, commit_s, commit_cpu),
                       Timing("publish + finalize", done.published_records or 0, publish_s, publish_cpu)]


def durability_cost(settings: Settings, pipeline: str, batch_id: int, rounds: int = 3) -> list[Timing]:
    """The commit's durability costs, measured on the batch just staged, alternating, each in a transaction
    that is rolled back: the upsert alone (what the commit did before the outbox) against the staged-count
    check plus the upsert that also writes the logged outbox from RETURNING. Best of `rounds` each."""
    defined = registry.get(pipeline)
    best: dict[str, trial.Trial] = {}
    for _ in range(rounds):
        for label, durable in (("upsert only (before)", False), ("count check + upsert + outbox (now)", True)):
            tried = trial.rolled_back_move(settings, defined, batch_id, durable)
            if label not in best or tried.seconds < best[label].seconds:
                best[label] = tried
    return [Timing(label, n, s) for label, (n, s) in best.items()]


def clean_up_after_rollbacks(settings: Settings, pipeline: str) -> None:
    """VACUUM the sink and the outbox (untimed) after durability_cost's rolled-back statements. Each one
    leaves a batch's worth of dead rows and dead index entries behind, which the timed commit would otherwise
    wade through (measured on a staged 1M batch: 13.3-14.1 s vacuumed, 15.4-17.5 s after one rolled-back
    attempt) unless autovacuum happened to get there first: noise against eosbatch, not part of its cost."""
    from eosbatch.ledger import cleanup

    defined = registry.get(pipeline)
    connection = psycopg2.connect(settings.psycopg_dsn)
    connection.autocommit = True  # VACUUM refuses to run inside a transaction
    try:
        with connection.cursor() as cur:
            tables = [sinks.sink_table(defined), sql.Identifier("eosbatch", "outbox")]
            if cleanup.table_exists(cur, sinks.outbox_table(defined)):  # the rolled-back commits' typed outbox
                tables.append(sinks.outbox_table(defined))
            cur.execute(sql.SQL("VACUUM {}").format(sql.SQL(", ").join(tables)))
    finally:
        connection.close()
