"""`eosbatch check`: a preflight of one pipeline without running a batch. Each check is a plain value
(Check) made by a pure function from what was found, so the verdicts are tested without services; `run`
gathers what they need from the registry, Kafka and the ledger's database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from eosbatch import config, registry
from eosbatch.exceptions import EosbatchError
from eosbatch.kafka import topics
from eosbatch.ledger import connection, migrate, revisions
from eosbatch.ledger.sinks import catalog
from eosbatch.pipeline import Pipeline


class Check(NamedTuple):
    name: str
    ok: bool
    found: str

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAIL':<4}  {self.name}: {self.found}"


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


def sink_check(table: str, key: Sequence[str], exists: bool, unique_keys: Sequence[Sequence[str]]) -> Check:
    """The sink table, where it exists, has a unique index on exactly the key (the upsert needs one); a
    table that does not exist yet is made at the first batch."""
    name = f"sink table {table}"
    if not exists:
        return Check(name, True, "does not exist yet; the first batch creates it")
    if tuple(sorted(key)) in {tuple(sorted(k)) for k in unique_keys}:
        return Check(name, True, f"has a unique index on {list(key)}")
    return Check(name, False, f"has no unique index on exactly {list(key)}; an idempotent upsert needs one")


def failed(name: str, exc: EosbatchError) -> Check:
    """A check that could not look: its error, on one line."""
    return Check(name, False, " ".join(str(exc).split()))


def passed(checks: Sequence[Check]) -> bool:
    return all(check.ok for check in checks)


def run(pipeline_name: str) -> list[Check]:
    """Every check of the pipeline; after a pipeline that does not load, only that one."""
    try:
        pipeline = registry.get(pipeline_name)
    except EosbatchError as exc:
        return [pipeline_check(pipeline_name, " ".join(str(exc).split()))]
    settings = config.load()
    checks = [pipeline_check(pipeline.name, None), *_topic_checks(settings, pipeline)]
    try:
        checks.append(ledger_check(migrate.current(settings.database_url), revisions.head()))
    except EosbatchError as exc:
        checks.append(failed("ledger", exc))
    checks.append(_sink(settings, pipeline))
    return checks


def _topic_checks(settings: config.Settings, pipeline: Pipeline) -> list[Check]:
    wanted = [("source topic", t) for t in pipeline.source.topics]
    if pipeline.output is not None:
        wanted.append(("output topic", pipeline.output.topic))
    try:
        counts = topics.partition_counts(settings, [t for _, t in wanted])
    except EosbatchError as exc:
        return [failed("topics", exc)]
    return [topic_check(role, topic, counts[topic]) for role, topic in wanted]


def _sink(settings: config.Settings, pipeline: Pipeline) -> Check:
    table = f"{pipeline.sink.schema}.{pipeline.sink.table}"
    try:
        db: Any = connection.connect(settings, check_schema=False)
    except EosbatchError as exc:
        return failed(f"sink table {table}", exc)
    try:
        with db.cursor() as cur:
            shape = catalog.read(cur, pipeline)
    finally:
        db.close()
    return sink_check(table, pipeline.sink.key, shape.sink_exists, shape.unique_keys)
