"""What each `eosbatch` command does, as plain functions: the CLI only parses arguments and prints."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from eosbatch import backfill as history
from eosbatch import config, overview, preflight, registry, running, steps, telemetry
from eosbatch import redrive as redriving
from eosbatch.context import Context
from eosbatch.exceptions import ConfigError
from eosbatch.kafka import json_lines, offsets, topics
from eosbatch.ledger import cleanup, connection, lanes, migrate, positions, store
from eosbatch.protocol import redrive as redrive_rules
from eosbatch.protocol import sources
from eosbatch.protocol.recovery import recovery_action

if TYPE_CHECKING:
    from eosbatch.stack import StackInfo

Log = Callable[[str], None]


def context(pipeline: str, log: Log = print) -> Context:
    """A command's edge: the settings from the environment, the pipeline from the registry, the log, and the
    meter EOSBATCH_METRICS names (eosbatch.telemetry)."""
    settings = config.load()
    return Context(settings, registry.get(pipeline), log, telemetry.metrics(settings))


# The development stack is imported by its commands only: `run`, the DAG tasks and the rest never load it.

def stack_up(log: Log = print, spark_cluster: bool | None = None,
             schema_registry: bool | None = None, postgres_replica: str | None = None,
             kafka_brokers: int | None = None, warm_up_records: int = 0) -> StackInfo:
    from eosbatch import stack

    if warm_up_records < 0:
        raise ConfigError("--warm-up", f"must be 0 (none) or a number of records, got {warm_up_records}")
    return stack.up(log, spark_cluster, schema_registry, postgres_replica, kafka_brokers, warm_up_records)


def stack_env(spark_cluster: bool | None = None, schema_registry: bool | None = None,
              postgres_replica: bool | None = None) -> dict[str, str]:
    from eosbatch import stack

    return stack.status(spark_cluster, schema_registry, postgres_replica).env()


def stack_down() -> None:
    from eosbatch import stack

    stack.down()


def stack_status(spark_cluster: bool | None = None, schema_registry: bool | None = None,
                 postgres_replica: bool | None = None) -> StackInfo:
    from eosbatch import stack

    return stack.status(spark_cluster, schema_registry, postgres_replica)


def stack_broker(action: str, node_id: int, log: Log = print) -> None:
    """`stack broker stop|start N`: one node of the stack's Kafka cluster."""
    from eosbatch import stack

    if action == "stop":
        stack.broker_stop(node_id, log)
    else:
        stack.broker_start(node_id, log)


class PipelineRoles(NamedTuple):
    pipeline: str
    leaders: dict[tuple[str, int], int | None]  # (topic, partition) of its source and output topics: the leader
    coordinators: dict[str, tuple[str, int | None]]  # lane: its transactional id and the node coordinating it


def stack_kafka_roles(bootstrap: str) -> list[PipelineRoles]:
    """For each registered pipeline (EOSBATCH_PIPELINES), which node of the Kafka at `bootstrap` leads each
    partition of its topics and coordinates each lane's transactional id."""
    from eosbatch import stack
    from eosbatch.steps.shared import lane_transactional_id

    found = []
    for name, pipeline in sorted(registry.load().items()):
        topics = [*pipeline.source.topics, *([pipeline.output.topic] if pipeline.output is not None else [])]
        lanes_ids = {lane: lane_transactional_id(pipeline, lane) for lane in ("regular", "backfill")}
        roles = stack.kafka_roles(topics, list(lanes_ids.values()), bootstrap)
        found.append(PipelineRoles(name, roles.leaders,
                                   {lane: (tid, roles.coordinators[tid]) for lane, tid in lanes_ids.items()}))
    return found


def airflow_up(log: Log = print) -> Any:
    """The local Airflow (eosbatch.orchestration.local), started, with the DAGs of the registered pipelines
    parsed, so that they can be unpaused and triggered at once; its `exports()` name its connections."""
    from eosbatch.orchestration import dags, local  # imports Airflow: only for the airflow commands

    info = local.up(log=log)
    started, names = time.monotonic(), sorted(registry.load())
    local.wait_parsed([dags.dag_id(name) for name in names])
    log(f"airflow: the DAGs of {len(names)} pipeline(s) are parsed ({time.monotonic() - started:.1f}s)")
    return info


def airflow_down() -> None:
    from eosbatch.orchestration import local

    local.down()


def airflow_status() -> Any:
    from eosbatch.orchestration import local

    return local.status()


def db_upgrade(revision: str = "head") -> str | None:
    url = config.load().database_url
    migrate.upgrade(url, revision)
    return migrate.current(url)


def db_downgrade_deletes(revision: str) -> str | None:
    """What downgrading the ledger to `revision` deletes, when that is users' data (to base: the whole
    schema); None when a downgrade to it keeps them."""
    if revision != "base":
        return None
    return (f"the schema eosbatch in {config.redact(config.load().database_url)}: every pipeline's batches, "
            "offsets, committed ranges, resets, outbox and dead letters")


def db_downgrade(revision: str) -> str | None:
    url = config.load().database_url
    migrate.downgrade(url, revision)
    return migrate.current(url)


def db_current() -> str | None:
    return migrate.current(config.load().database_url)


def db_psql(command: str | None = None, file: str | None = None) -> tuple[list[str], dict[str, str]]:
    """psql's arguments and environment for the ledger's database; psql must be installed (postgresql-client)."""
    if shutil.which("psql") is None:
        raise ConfigError("psql", "not found on PATH; install PostgreSQL's client (Debian: postgresql-client)")
    return connection.psql_command(config.load(), command, file)


def warm_up(records: int, rounds: int, log: Log = print) -> list[Any]:
    """Warm the Spark Connect server the settings name (EOSBATCH_SPARK_REMOTE) as `stack up` warms its own:
    `rounds` runs of a batch's read, parse and encoding paths over `records` records of the topic
    `eosbatch-engine-warm-up` on the settings' Kafka (created and filled when it holds fewer). Nothing else is
    written. For a server of your own, after each start (eosbatch.engine.warm_up)."""
    from eosbatch.engine import warm_up as engine_warm_up

    for option, value in (("--records", records), ("--rounds", rounds)):
        if value < 1:
            raise ConfigError(option, f"must be at least 1, got {value}")
    return engine_warm_up.warm(config.load(), records, rounds, log=log)


def topic_create(name: str, partitions: int = 1, replication_factor: int | None = None) -> topics.CreatedTopic:
    """Create a topic on the broker the settings name (EOSBATCH_KAFKA_BOOTSTRAP), with `replication_factor`
    replicas (None: the broker's default); the same topic existing is fine, one with other partitions an error
    naming both counts."""
    for option, value in (("--partitions", partitions), ("--replication-factor", replication_factor)):
        if value is not None and value < 1:
            raise ConfigError(option, f"must be at least 1, got {value}")
    return topics.create(config.load(), name, partitions, replication_factor)


def produce(topic: str, lines: Iterable[str], key_field: str | None = None, per_transaction: int = 1000,
            transactional_id: str | None = None) -> int:
    """JSON lines into `topic` in Kafka transactions, after checking every line (json_lines.BadLine names
    the first bad one, and nothing is produced); the number of records committed."""
    records = json_lines.parse(lines, key_field)
    if not records:
        return 0
    return json_lines.produce(config.load(), topic, records, per_transaction, transactional_id)


def pipelines() -> list[dict[str, Any]]:
    """The registered pipelines (EOSBATCH_PIPELINES and those registered by hand), by name."""
    return [{"name": p.name, "source_topics": list(p.source.topics),
             "sink": {"table": f"{p.sink.schema}.{p.sink.table}", "key": list(p.sink.key), "mode": p.sink.mode},
             "output_topic": p.output.topic if p.output is not None else None, "schedule": p.schedule}
            for _, p in sorted(registry.load().items())]


def check(pipeline: str) -> list[preflight.Check]:
    """The preflight of a pipeline (eosbatch.preflight), without running a batch."""
    return preflight.run(pipeline)


def run(pipeline: str, max_batches: int | None = None, log: Log = print, overlap: bool | None = None
        ) -> running.RunSummary:
    return running.run(context(pipeline, log), max_batches=max_batches, overlap=overlap)


def verify(pipeline: str, recompute: bool = True, log: Log = print, batch_id: int | None = None) -> Any:
    """The whole audit, or the cheap check of one finished batch (`batch_id`)."""
    from eosbatch.verify import audit, audit_batch

    if batch_id is not None:
        return audit_batch(context(pipeline, log), batch_id)
    return audit(context(pipeline, log), recompute=recompute)


def settle_publish(pipeline: str, batch_id: int, republish: bool, log: Log = print) -> store.Batch:
    """The way out of MarkerExpired: the operator looked at the output topic and says what is there."""
    ctx = context(pipeline, log)
    if republish:
        return steps.publish(ctx, batch_id, ignore_expired_marker=True)
    return steps.finalize(ctx, batch_id, None)


def lost_output(pipeline: str) -> list[Any]:
    """The ranges the pipeline's output holds and its ledger does not (eosbatch.protocol.lost); [] normally."""
    from eosbatch import adopt

    return adopt.lost(context(pipeline))


def adopt_published(pipeline: str, log: Log = print) -> store.Batch | None:
    """The lost range processed into the sink again and recorded as published, nothing produced (eosbatch.adopt)."""
    from eosbatch import adopt

    return adopt.adopt(context(pipeline, log))


def backfill(pipeline: str, ranges: list[str] | None = None, time_from: str | None = None,
             time_to: str | None = None, mode: str = "fill", publish: bool | None = None, dry_run: bool = False,
             log: Log = print, progress: Any = None) -> history.BackfillReport:
    return history.backfill(context(pipeline, log), ranges, time_from, time_to, mode, publish, dry_run, progress)


def replay(pipeline: str, batch_id: int, log: Log = print) -> history.ReplayReport:
    return history.replay(context(pipeline, log), batch_id)


def redrive(pipeline: str, everything: bool = False, error_like: str | None = None, ids: Iterable[int] = (),
            topic: str | None = None, partitions: Iterable[str] = (), limit: int | None = None,
            publish: bool = True, dry_run: bool = False, log: Log = print) -> redriving.RedriveReport:
    """Run chosen dead letters through the pipeline again, exactly once (`eosbatch dead-letters redrive`):
    every one (`everything`) or those matching every filter given, at most `limit`; `dry_run` lists them."""
    ctx = context(pipeline, log)
    chosen = redrive_rules.selection(everything, error_like, ids, topic, partitions, limit,
                                     source_topics=ctx.pipeline.source.topics)
    return redriving.redrive_dead_letters(ctx, chosen, dry_run=dry_run, publish=publish)


def compact(pipeline: str, older_than_days: float | None = None) -> cleanup.Compacted:
    """Merge the committed ranges and drop the range detail of published batches older than the given age
    (default: the setting EOSBATCH_COMPACT_AFTER_DAYS, as the compaction after every N commits uses)."""
    settings = config.load()
    if older_than_days is None:
        older_than_days = settings.compact_after_days
    if not older_than_days >= 0:
        raise ConfigError("--older-than-days", f"must be a number of days >= 0, got {older_than_days!r}")
    name = registry.get(pipeline).name
    with store.transaction(settings) as cur:
        return cleanup.compact(cur, name, older_than_days)


def abort(pipeline: str, batch_id: int | None = None, log: Log = print, dry_run: bool = False) -> list[int]:
    """Abort the batch, or every unfinished batch of the pipeline; a committed one is never aborted.
    `dry_run`: the batches that would be aborted, and nothing changed."""
    return steps.abort(context(pipeline, log), batch_id, reason="aborted by eosbatch abort", dry_run=dry_run)


def ranges(pipeline: str) -> list[history.PartitionCoverage]:
    return history.coverage(context(pipeline))


def status(pipeline_name: str, limit: int = 10) -> dict[str, Any]:
    """Recent batches, per partition next offset, last stable offset and lag, the source topics' IDs, any
    source change that stops the pipeline, the resets recorded, each lane's state (eosbatch.overview)."""
    return overview.pipeline_status(config.load(), registry.get(pipeline_name), limit)


def status_all() -> list[dict[str, Any]]:
    """Every registered pipeline at once: its lag, its last batch, its blocked or failing lanes and their errors."""
    return overview.every_pipeline(config.load(), registry.load())


def reset(pipeline_name: str, partitions: list[str] | None = None, topic: str | None = None, to: str = "",
          reason: str | None = None, log: Log = print, dry_run: bool = False) -> list[sources.Reset]:
    """The operator's way on after a source change: move partitions (`--partition orders:0 --to 1200`) or
    accept a recreated topic (`--topic orders --to earliest`), recorded in the ledger with what was skipped.

    It takes both lanes first (their epochs go up, unfinished batches are aborted, committed ones published),
    so no runner can commit ranges planned before the reset; then one transaction decides and records.

    `dry_run`: no lane is taken (the batches recovery would abort or publish are logged), and the same
    transaction decides and records the moves, then rolls back; the moves it returns are the ones it found."""
    from eosbatch.exceptions import ConfigError
    from eosbatch.ledger.exceptions import StaleEpoch

    settings = config.load()
    pipeline = registry.get(pipeline_name)
    if bool(partitions) == bool(topic):
        raise ConfigError("reset", "give --partition TOPIC:PARTITION (repeatable) or --topic TOPIC, not both")
    target = sources.parse_target(to)
    wanted = [sources.parse_partition(text) for text in partitions or []]
    for name in [tp.topic for tp in wanted] + ([topic] if topic else []):
        if name not in pipeline.source.topics:
            raise ConfigError("reset", f"{name!r} is not a source topic of {pipeline.name} "
                                       f"({', '.join(pipeline.source.topics)})")
    why = reason or "eosbatch reset"
    would = "would be " if dry_run else ""
    ctx = Context(settings, pipeline, log, telemetry.metrics(settings))
    epochs = {} if dry_run else {lane: steps.recover(ctx, lane) for lane in ("regular", "backfill")}
    topic_ids, bounds = offsets.source_state(settings, pipeline.source.topics)
    done: list[sources.Reset] = []
    with store.transaction(settings, dry_run=dry_run) as cur:
        for lane, epoch in epochs.items():
            lanes.hold_lane(cur, pipeline.name, lane, epoch)  # type: ignore[arg-type]
        busy = store.open_batches(cur, pipeline.name)
        if dry_run:
            for batch in busy:
                log(f"batch {batch.id}: {batch.state}, would be "
                    f"{'aborted' if recovery_action(batch.state) == 'abort' else 'published'} by the reset's recovery")
        elif busy:
            raise StaleEpoch(f"pipeline {pipeline.name}: batches {[b.id for b in busy]} are unfinished after "
                             "recovery (a runner is working); run the reset again when they are done")
        if topic:
            change = sources.plan_topic_reset(topic, positions.source_topics(cur, pipeline.name).get(topic),
                                              topic_ids[topic], positions.incarnations(cur, pipeline.name, lock=True),
                                              bounds, target)
            positions.apply_topic_reset(cur, pipeline.name, change, why)
            done.extend(change.resets)
            log(f"{pipeline.name}: topic {topic} {would}read as topic ID {change.topic_id}, incarnation "
                f"{change.incarnation}, from {', '.join(f'{tp} {n}' for tp, n in change.starts.items())}")
            for tp in change.dropped:
                log(f"{tp}: not in the new topic; {would}no longer read")
        for tp in wanted:
            where = positions.incarnations(cur, pipeline.name, lock=True)
            step = sources.plan_partition_reset(tp, where.get(tp), bounds.get(tp), target,
                                                positions.source_topics(cur, pipeline.name).get(tp.topic),
                                                topic_ids[tp.topic])
            positions.apply_reset(cur, pipeline.name, step, why)
            done.append(step)
    for step in done:
        log(f"{'would reset' if dry_run else 'reset'} {step}")
    return done
