"""Pipeline definitions: pure values, validated when built so that a bad definition fails at import,
naming the field, long before a batch is planned."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from eosbatch.exceptions import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SinkMode = Literal["replace", "accumulate"]
StartingOffsets = Literal["earliest", "latest"]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# The columns every record already has before its value's fields are added (and eosbatch's own).
KAFKA_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers")


def ddl_field_names(ddl: str) -> list[str]:
    """The top-level field names of a Spark DDL schema ("a INT, b DECIMAL(18,2), c STRUCT<x: INT>")."""
    names, depth, piece = [], 0, ""
    for char in ddl + ",":
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        if char == "," and depth == 0:
            text = piece.strip()
            if text.startswith("`"):
                names.append(text[1:text.index("`", 1)])
            elif text:
                names.append(text.split()[0].rstrip(":"))
            piece = ""
        else:
            piece += char
    return names
# Columns eosbatch adds to staging tables; a sink may not use them.
RESERVED_COLUMNS = frozenset({"_eosbatch_batch", "_eosbatch_writer"})


def _identifier(field_name: str, value: object) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ConfigError(field_name, f"{value!r} is not a valid SQL identifier (letters, digits, _; max 63)")
    if value in RESERVED_COLUMNS:
        raise ConfigError(field_name, f"{value!r} is reserved by eosbatch")
    return value


def _identifiers(field_name: str, values: object, allow_empty: bool = False) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ConfigError(field_name, f"must be a list of column names, got {values!r}")
    if not values and not allow_empty:
        raise ConfigError(field_name, "must name at least one column")
    names = tuple(_identifier(f"{field_name}[{i}]", v) for i, v in enumerate(values))
    if len(set(names)) != len(names):
        raise ConfigError(field_name, f"repeats a column: {list(names)}")
    return names


@dataclass(frozen=True)
class KafkaSource:
    """Where a pipeline reads: topics, how much per batch, and how to parse values.

    `value_schema` (Spark DDL, e.g. "customer_id STRING NOT NULL, amount DOUBLE") makes eosbatch parse
    each value as JSON before the transform: records that are not JSON, have a field of the wrong type,
    or lack a NOT NULL field go to the dead letters instead of failing the batch.
    """

    topics: Sequence[str]
    max_records_per_batch: int = 100_000
    value_schema: str | None = None
    starting_offsets: StartingOffsets = "earliest"

    def __post_init__(self) -> None:
        if isinstance(self.topics, str) or not self.topics:
            raise ConfigError("source.topics", "must be a non-empty list of topic names")
        for i, topic in enumerate(self.topics):
            if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
                raise ConfigError(f"source.topics[{i}]", f"{topic!r} is not a valid Kafka topic name")
        object.__setattr__(self, "topics", tuple(self.topics))
        if (not isinstance(self.max_records_per_batch, int) or isinstance(self.max_records_per_batch, bool)
                or self.max_records_per_batch <= 0):
            raise ConfigError("source.max_records_per_batch", f"must be a positive int, got "
                                                              f"{self.max_records_per_batch!r}")
        if self.starting_offsets not in ("earliest", "latest"):
            raise ConfigError("source.starting_offsets", f"must be 'earliest' or 'latest', got "
                                                         f"{self.starting_offsets!r}")
        if self.value_schema is not None and (not isinstance(self.value_schema, str) or not self.value_schema):
            raise ConfigError("source.value_schema", "must be a Spark DDL string such as 'id STRING, n INT'")
        if self.value_schema is not None:
            taken = {c.lower() for c in KAFKA_COLUMNS} | {"_eosbatch_error"}
            clashes = [n for n in ddl_field_names(self.value_schema) if n.lower() in taken]
            if clashes:
                raise ConfigError("source.value_schema", f"field(s) {', '.join(clashes)} collide with the record's "
                                  f"Kafka columns ({', '.join(KAFKA_COLUMNS)}); parse such values in the transform")


@dataclass(frozen=True)
class Deletes:
    """A replace sink's deletes (docs/deletes.md): a tombstone (a record whose value is null) deletes its key
    from the sink, publishes a tombstone on the output topic, and leaves a deleted marker so an older row
    cannot bring the key back. The tombstone's sink key comes from the record's parsed `key`.

    Without `sink.order_by` a tombstone is ordered by its source position, as rows are. With it, the
    tombstone's order value comes from the record header `order_header` (its text, cast to the order_by
    column's type) or, with `order_from_timestamp`, from the record's timestamp; one of them is required."""

    order_header: str | None = None
    order_from_timestamp: bool = False

    def __post_init__(self) -> None:
        if self.order_header is not None and (not isinstance(self.order_header, str) or not self.order_header):
            raise ConfigError("sink.deletes.order_header", f"must be a header name or None, got {self.order_header!r}")
        if not isinstance(self.order_from_timestamp, bool):
            raise ConfigError("sink.deletes.order_from_timestamp",
                              f"must be True or False, got {self.order_from_timestamp!r}")
        if self.order_header is not None and self.order_from_timestamp:
            raise ConfigError("sink.deletes.order_header", "name a header or set order_from_timestamp, not both")


@dataclass(frozen=True)
class PostgresSink:
    """Where results land. `replace`: a later row for a key replaces the stored one; inside one batch the
    row with the highest `order_by` (or source position, when the transform keeps `partition`/`offset`)
    wins. `accumulate`: the `accumulate` columns add to the stored values (running totals). `deletes` (a
    Deletes, replace sinks only): a tombstone deletes its key and publishes a tombstone (docs/deletes.md);
    without it a tombstone is a dead letter."""

    table: str
    key: Sequence[str]
    mode: SinkMode = "replace"
    accumulate: Sequence[str] = ()
    order_by: Sequence[str] = ()
    schema: str = "public"
    deletes: Deletes | None = None

    def __post_init__(self) -> None:
        _identifier("sink.table", self.table)
        _identifier("sink.schema", self.schema)
        object.__setattr__(self, "key", _identifiers("sink.key", self.key))
        object.__setattr__(self, "accumulate", _identifiers("sink.accumulate", self.accumulate, allow_empty=True))
        object.__setattr__(self, "order_by", _identifiers("sink.order_by", self.order_by, allow_empty=True))
        if self.mode not in ("replace", "accumulate"):
            raise ConfigError("sink.mode", f"must be 'replace' or 'accumulate', got {self.mode!r}")
        if self.mode == "accumulate":
            if not self.accumulate:
                raise ConfigError("sink.accumulate", "an accumulate sink must name the columns that add up")
            if self.order_by:
                raise ConfigError("sink.order_by", "an accumulate sink adds every row; there is nothing to order")
        elif self.accumulate:
            raise ConfigError("sink.accumulate", "only for mode='accumulate'")
        if overlap := set(self.key) & set(self.accumulate):
            raise ConfigError("sink.accumulate", f"key columns cannot be accumulated: {sorted(overlap)}")
        if self.deletes is not None:
            self._check_deletes(self.deletes)

    def _check_deletes(self, deletes: object) -> None:
        if not isinstance(deletes, Deletes):
            raise ConfigError("sink.deletes", f"must be a Deletes or None, got {type(deletes).__name__}")
        if self.mode != "replace":
            raise ConfigError("sink.deletes", f"only a replace sink deletes; this one is {self.mode!r}")
        ordered = deletes.order_header is not None or deletes.order_from_timestamp
        if self.order_by and not ordered:
            raise ConfigError("sink.deletes.order_header", f"sink.order_by {list(self.order_by)} orders rows, "
                              "so a tombstone needs an order value: name the header that carries it "
                              "(order_header) or set order_from_timestamp=True")
        if self.order_by and len(self.order_by) > 1:
            raise ConfigError("sink.deletes", f"a tombstone carries one order value; sink.order_by has "
                              f"{len(self.order_by)} columns")
        if not self.order_by and ordered:
            raise ConfigError("sink.deletes.order_header" if deletes.order_header is not None else
                              "sink.deletes.order_from_timestamp", "without sink.order_by a tombstone is ordered "
                              "by its source position; there is no order value to set")


@dataclass(frozen=True)
class KafkaOutput:
    """Where results are published: one record per sink row, keyed by `key`, the row as JSON."""

    topic: str
    key: str

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not _TOPIC.fullmatch(self.topic):
            raise ConfigError("output.topic", f"{self.topic!r} is not a valid Kafka topic name")
        _identifier("output.key", self.key)


Transform = Callable[["DataFrame"], "DataFrame"]

# How many micro-batches one scheduled DAG run may process, at most, unless a pipeline says otherwise; and
# the most it may say (each batch is a TaskGroup of its own in the DAG).
BATCHES_PER_RUN = 4
MOST_BATCHES_PER_RUN = 50
_CALLBACKS = ("on_failure_callback", "on_success_callback", "on_retry_callback")


def _callbacks(field_name: str, value: object) -> object:
    """None, one callable, or a list of callables (as Airflow takes them); a list becomes a tuple."""
    if value is None or callable(value):
        return value
    if isinstance(value, (list, tuple)) and value and all(callable(v) for v in value):
        return tuple(value)
    raise ConfigError(field_name, f"must be a function of the task's context, or a list of them, got {value!r}")


def _optional_name(field_name: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(field_name, f"must be a non-empty string or None, got {value!r}")


@dataclass(frozen=True)
class AirflowOptions:
    """How Airflow runs a pipeline's DAGs (eosbatch.orchestration.dags): a plain value, validated when built.

    `batches_per_run`: the most micro-batches one run of the micro-batch DAG processes, one after another,
    each planned when its turn comes; a run that finds nothing new ends there. `owner`, `retries`,
    `retry_delay`, `pool`, `queue` and the three callbacks become the `default_args` of the pipeline's three
    DAGs; `retries` and `retry_delay`, when set, replace eosbatch's own (3 retries, 10 s apart) on every task
    (terminal errors never retry). `tags` are added to eosbatch's. `max_active_runs` can only be 1: a run
    holds the pipeline's lane lease from its first plan to its last batch.
    """

    batches_per_run: int = BATCHES_PER_RUN
    owner: str = "eosbatch"
    retries: int | None = None
    retry_delay: timedelta | None = None
    pool: str | None = None
    queue: str | None = None
    on_failure_callback: Any = None
    on_success_callback: Any = None
    on_retry_callback: Any = None
    tags: Sequence[str] = ()
    max_active_runs: int = 1

    def __post_init__(self) -> None:
        cap = self.batches_per_run
        if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= MOST_BATCHES_PER_RUN:
            raise ConfigError("airflow.batches_per_run", f"must be an int from 1 to {MOST_BATCHES_PER_RUN}, "
                                                         f"got {cap!r}")
        if not isinstance(self.owner, str) or not self.owner.strip():
            raise ConfigError("airflow.owner", f"must be a non-empty string, got {self.owner!r}")
        if self.retries is not None and (not isinstance(self.retries, int) or isinstance(self.retries, bool)
                                         or self.retries < 0):
            raise ConfigError("airflow.retries", f"must be an int >= 0 or None, got {self.retries!r}")
        if self.retry_delay is not None and (not isinstance(self.retry_delay, timedelta)
                                             or self.retry_delay < timedelta(0)):
            raise ConfigError("airflow.retry_delay", f"must be a timedelta >= 0 or None, got {self.retry_delay!r}")
        _optional_name("airflow.pool", self.pool)
        _optional_name("airflow.queue", self.queue)
        for name in _CALLBACKS:
            object.__setattr__(self, name, _callbacks(f"airflow.{name}", getattr(self, name)))
        if isinstance(self.tags, str) or not isinstance(self.tags, Sequence):
            raise ConfigError("airflow.tags", f"must be a list of strings, got {self.tags!r}")
        for i, tag in enumerate(self.tags):
            if not isinstance(tag, str) or not tag.strip() or len(tag) > 100:
                raise ConfigError(f"airflow.tags[{i}]", f"must be a non-empty string of at most 100 characters, "
                                                        f"got {tag!r}")
        object.__setattr__(self, "tags", tuple(self.tags))
        if self.max_active_runs != 1 or isinstance(self.max_active_runs, bool):
            raise ConfigError("airflow.max_active_runs", f"must be 1, got {self.max_active_runs!r}: a run holds the "
                                                         "pipeline's lane lease, so two runs at once would only "
                                                         "wait for each other (or fail with LaneBusy)")

    def default_args(self) -> dict[str, Any]:
        """The Airflow `default_args` these options set (None: Airflow's or eosbatch's own)."""
        args: dict[str, Any] = {"owner": self.owner}
        for name in ("retries", "retry_delay", "pool", "queue", *_CALLBACKS):
            value = getattr(self, name)
            if value is not None:
                args[name] = list(value) if isinstance(value, tuple) else value
        return args


@dataclass(frozen=True)
class Pipeline:
    """One pipeline: a plain value. Building it registers nothing: eosbatch.registry finds it among the
    globals (or the `PIPELINES` list) of a module named in EOSBATCH_PIPELINES. `schedule` is its micro-batch
    DAG's schedule; `airflow` how Airflow runs its DAGs (AirflowOptions, docs/airflow-dags.md)."""

    name: str
    source: KafkaSource
    transform: Transform
    sink: PostgresSink
    output: KafkaOutput | None = None
    schedule: str | None = None
    airflow: AirflowOptions = AirflowOptions()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError("name", f"{self.name!r} must be lowercase letters, digits and _ (max 48), "
                                      "starting with a letter")
        for name, value, kind in (("source", self.source, KafkaSource), ("sink", self.sink, PostgresSink)):
            if not isinstance(value, kind):
                raise ConfigError(name, f"must be a {kind.__name__}, got {type(value).__name__}")
        if self.output is not None and not isinstance(self.output, KafkaOutput):
            raise ConfigError("output", f"must be a KafkaOutput or None, got {type(self.output).__name__}")
        if not isinstance(self.airflow, AirflowOptions):
            raise ConfigError("airflow", f"must be an AirflowOptions, got {type(self.airflow).__name__}")
        if not callable(self.transform):
            raise ConfigError("transform", "must be a function DataFrame -> DataFrame")
        if self.output is not None and self.output.topic in self.source.topics:
            raise ConfigError("output.topic", "must differ from the source topics (a pipeline cannot read itself)")
        if self.output is not None and self.sink.deletes is not None:
            keys = [self.output.key] if isinstance(self.output.key, str) else list(self.output.key)
            if outside := [k for k in keys if k not in self.sink.key]:
                raise ConfigError("output.key", f"with sink.deletes the output key must be sink.key column(s): a "
                                  f"tombstone carries only the key, and {outside} is not one")

    @property
    def transactional_id(self) -> str:
        return f"eosbatch.{self.name}"

    @property
    def marker_group(self) -> str:
        return f"eosbatch.{self.name}"
