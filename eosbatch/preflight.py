"""`eosbatch check`: a preflight of one pipeline without running a batch. Each check is a plain value
(Check) made by a pure function from what was found, so the verdicts are tested without services; `run`
gathers what they need from the registry, Kafka, the ledger's database and the Spark Connect server (which
analyses the transform over an empty frame: the output's schema, no Spark job)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from eosbatch import config, engine, registry
from eosbatch.context import Context
from eosbatch.exceptions import EosbatchError
from eosbatch.kafka import topics
from eosbatch.ledger import connection, migrate, revisions
from eosbatch.ledger.sinks import Column, catalog, fit, output_fit, validate_columns
from eosbatch.outputs import AvroValue
from eosbatch.pipeline import Pipeline

# What a batch does with its topics (README, "A secured Kafka"): read the source; publish to the output and
# read its max.message.bytes.
SOURCE_OPERATIONS = ("READ", "DESCRIBE")
OUTPUT_OPERATIONS = ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")


class Check(NamedTuple):
    name: str
    ok: bool
    found: str
    checked: bool = True  # False: could not be told here (`found` says why); it does not fail the preflight

    def line(self) -> str:
        return f"{'skip' if not self.checked else 'ok' if self.ok else 'FAIL':<4}  {self.name}: {self.found}"


def pipeline_check(name: str, problem: str | None) -> Check:
    """The pipeline is registered: its module (EOSBATCH_PIPELINES) imports and defines it."""
    return Check("pipeline", problem is None, problem or f"{name} is registered")


def topic_check(role: str, topic: str, partitions: int | None) -> Check:
    """`role` ("source topic", "output topic") exists; what it found names its partition count."""
    if partitions is None:
        return Check(f"{role} {topic}", False, f"does not exist; create it: eosbatch topic create {topic}")
    return Check(f"{role} {topic}", True, f"{partitions} partition(s)")


def ledger_check(current: str | None, head: str | None) -> Check:
    """The ledger is at the newest revision this eosbatch knows."""
    if current == head:
        return Check("ledger", True, f"at revision {head}")
    where = "has no ledger" if current is None else f"is at revision {current}"
    return Check("ledger", False, f"the database {where}, not {head}; run eosbatch db upgrade")


def transform_check(columns: Sequence[Column] | None, engine_kind: str) -> Check:
    """The transform's output schema, as a batch would stage it (None: the engine could not say)."""
    if columns is None:
        return Check("transform output", True, f"not checked: the {engine_kind} engine has no Spark session to "
                     "analyse it without starting an application (set EOSBATCH_SPARK_REMOTE)", checked=False)
    return Check("transform output", True, ", ".join(f"{c.name} {c.pg_type}" for c in columns))


def sink_check(table: str, key: Sequence[str], exists: bool, unique_keys: Sequence[Sequence[str]],
               misfits: Sequence[str] | None = None) -> Check:
    """The sink table, where it exists, has a unique index on exactly the key (the upsert needs one) and takes
    the transform's output (`misfits`: each problem, naming its column; None: the output is not known); a
    table that does not exist yet is made at the first batch, from the output's schema."""
    name = f"sink table {table}"
    if not exists:
        return Check(name, True, "does not exist yet; the first batch creates it")
    problems = list(misfits or ())
    if tuple(sorted(key)) not in {tuple(sorted(k)) for k in unique_keys}:
        problems.insert(0, f"has no unique index on exactly {list(key)}; an idempotent upsert needs one")
    if problems:
        return Check(name, False, "; ".join(problems))
    fits = "" if misfits is None else ", and its columns take the transform's output"
    return Check(name, True, f"has a unique index on {list(key)}{fits}")


def output_value_check(topic: str, problems: Sequence[str] | None) -> Check:
    """The output's Avro schema against the sink's columns (`problems`: one phrase each, naming its field; None:
    the transform's output is not known, and the sink does not exist yet)."""
    name = f"output value ({topic})"
    if problems is None:
        return Check(name, True, "not checked: the transform's output is not known", checked=False)
    if problems:
        return Check(name, False, "; ".join(problems))
    return Check(name, True, "each field of the Avro schema has a sink column that takes it")


def privileges_check(role: str, lacking: Sequence[str]) -> Check:
    """The database role may do what a batch does (fit.missing_privileges)."""
    if lacking:
        return Check("postgres privileges", False, f"role {role} lacks " + "; ".join(lacking))
    return Check("postgres privileges", True, f"role {role} has what a batch needs on the sink and the ledger")


def kafka_permissions_check(wanted: Mapping[str, Sequence[str]], authorized: Mapping[str, frozenset[str]] | None
                            ) -> Check:
    """The broker lets this client do what a batch does with each topic (`wanted`: topic -> operations);
    `authorized`: what the broker reports (topics.authorized_operations), None when it has no authorizer."""
    name = "kafka permissions"
    if authorized is None:
        return Check(name, True, "not checked: broker has no authorizer", checked=False)
    lacking = [f"{op} on Topic {topic}" for topic, ops in wanted.items() if topic in authorized
               for op in ops if op not in authorized[topic]]
    if lacking:
        return Check(name, False, "the principal lacks " + ", ".join(lacking))
    told = [t for t in wanted if t in authorized]
    if not told:
        return Check(name, True, "not checked: the broker did not report the topics' operations", checked=False)
    allowed = "; ".join(f"{', '.join(wanted[t])} on {t}" for t in told)
    return Check(name, True, f"allowed: {allowed} (groups and transactional ids are not reported before use)")


def failed(name: str, exc: EosbatchError) -> Check:
    """A check that could not look: its error, on one line."""
    return Check(name, False, _one_line(exc))


def passed(checks: Sequence[Check]) -> bool:
    return all(check.ok for check in checks)


def _one_line(exc: EosbatchError) -> str:
    return " ".join(str(exc).split())


def run(pipeline_name: str) -> list[Check]:
    """Every check of the pipeline; after a pipeline that does not load, only that one."""
    try:
        pipeline = registry.get(pipeline_name)
    except EosbatchError as exc:
        return [pipeline_check(pipeline_name, _one_line(exc))]
    settings = config.load()
    checks = [pipeline_check(pipeline.name, None), *_topic_checks(settings, pipeline)]
    try:
        checks.append(ledger_check(migrate.current(settings.database_url), revisions.head()))
    except EosbatchError as exc:
        checks.append(failed("ledger", exc))
    columns = None
    try:
        columns = engine.output_columns(Context(settings, pipeline))
        if columns is not None:
            validate_columns(pipeline, columns)
        checks.append(transform_check(columns, engine.kind(settings)))
    except EosbatchError as exc:
        checks.append(failed("transform output", exc))
        columns = None
    return [*checks, *_database_checks(settings, pipeline, columns)]


def _topic_checks(settings: config.Settings, pipeline: Pipeline) -> list[Check]:
    wanted: dict[str, Sequence[str]] = {t: SOURCE_OPERATIONS for t in pipeline.source.topics}
    roles = [("source topic", t) for t in pipeline.source.topics]
    if pipeline.output is not None:
        wanted[pipeline.output.topic] = OUTPUT_OPERATIONS
        roles.append(("output topic", pipeline.output.topic))
    try:
        counts = topics.partition_counts(settings, list(wanted))
    except EosbatchError as exc:
        return [failed("topics", exc)]
    checks = [topic_check(role, topic, counts[topic]) for role, topic in roles]
    try:
        checks.append(kafka_permissions_check(wanted, topics.authorized_operations(settings, wanted)))
    except EosbatchError as exc:
        checks.append(failed("kafka permissions", exc))
    return checks


def _database_checks(settings: config.Settings, pipeline: Pipeline, columns: list[Column] | None) -> list[Check]:
    """The sink table (its key's index; its columns and types against the transform's `columns`) and the
    role's privileges, read in one transaction that changes nothing."""
    table = f"{pipeline.sink.schema}.{pipeline.sink.table}"
    try:
        db: Any = connection.connect(settings, check_schema=False)
    except EosbatchError as exc:
        return [failed(f"sink table {table}", exc), failed("postgres privileges", exc)]
    try:
        with db.cursor() as cur:
            shape = catalog.read(cur, pipeline)
            misfits = (fit.misfits(cur, pipeline, columns, shape.sink_types)
                       if columns is not None and shape.sink_exists else None)
            role, lacking = fit.missing_privileges(cur, pipeline, shape.sink_exists)
            value = None
            if pipeline.output is not None and isinstance(pipeline.output.value, AvroValue) and (
                    columns is not None or shape.sink_exists):
                value = output_fit.value_problems(cur, pipeline, shape, columns or [])
    finally:
        db.rollback()
        db.close()
    checks = [sink_check(table, pipeline.sink.key, shape.sink_exists, shape.unique_keys, misfits),
              privileges_check(role, lacking)]
    if pipeline.output is not None and isinstance(pipeline.output.value, AvroValue):
        checks.insert(1, output_value_check(pipeline.output.topic, value))
    return checks
