"""Pipeline definitions: pure values, validated when built so that a bad definition fails at import,
naming the field, long before a batch is planned."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from eosbatch.deletes import Deletes, check_deletes, check_deletes_output
from eosbatch.exceptions import ConfigError
from eosbatch.formats.base import KAFKA_COLUMNS as KAFKA_COLUMNS  # re-exported: where they always were
from eosbatch.formats.base import Format, Role
from eosbatch.formats.json_format import Json, check_ddl
from eosbatch.formats.json_format import ddl_field_names as ddl_field_names
from eosbatch.formats.plain import Bytes
from eosbatch.outputs import AvroValue, JsonValue, OutputValue, headers_map
from eosbatch.protocol.ranges import OffsetRange

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SinkMode = Literal["replace", "accumulate", "append"]
SINK_MODES = ("replace", "accumulate", "append")
# An append sink's key: each row's source position and its number among the rows the transform made of that
# record (eosbatch numbers them: spark/shaping.py). Not chosen by the pipeline.
APPEND_ROW_COLUMN = "row_in_record"
APPEND_KEY = ("topic", "partition", "offset", APPEND_ROW_COLUMN)
StartingOffsets = Literal["earliest", "latest"]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
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
    """Where a pipeline reads: topics, how much per batch, and how to parse keys and values.

    `value` and `key` are formats (eosbatch.formats: Json, Avro, String, Bytes; both Bytes by default, the raw
    bytes). `value_schema` (Spark DDL, e.g. "customer_id STRING NOT NULL, amount DOUBLE") is short for
    `value=Json(value_schema)`: each value is parsed as JSON before the transform. Records whose key or value
    does not parse (not JSON, a field of the wrong type, a missing NOT NULL field, undecodable Avro, an unknown
    schema id, text that is not UTF-8) go to the dead letters with the reason instead of failing the batch.
    """

    topics: Sequence[str]
    max_records_per_batch: int = 100_000
    value_schema: str | None = None
    starting_offsets: StartingOffsets = "earliest"
    value: Format | None = None  # None: Json(value_schema) if given, else Bytes()
    key: Format = Bytes()

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
        for role in ("value", "key"):
            given = getattr(self, role)
            if given is not None and not isinstance(given, Format):
                raise ConfigError(f"source.{role}", f"must be a format of eosbatch.formats (Json, Avro, String or "
                                                    f"Bytes), got {given!r}")
        if self.value_schema is not None:
            if self.value is not None:
                raise ConfigError("source.value_schema", "give value=Json(...) or value_schema=..., not both")
            object.__setattr__(self, "value", Json(check_ddl("source.value_schema", self.value_schema, "value")))
        else:
            object.__setattr__(self, "value", (self.value or Bytes()).checked("source.value", "value"))
        object.__setattr__(self, "key", self.key.checked("source.key", "key"))

    @property
    def formats(self) -> dict[Role, Format]:
        """The format of each role ("key", "value")."""
        assert self.value is not None, "set when built"
        return {"key": self.key, "value": self.value}


@dataclass(frozen=True)
class PostgresSink:
    """Where results land. `replace`: a later row for a key replaces the stored one; inside one batch the
    row with the highest `order_by` (or source position, when the transform keeps `partition`/`offset`)
    wins. `accumulate`: the `accumulate` columns add to the stored values (running totals). `append`: every
    row is inserted once, keyed by its source position (topic, partition, offset, row_in_record): no `key`.
    `evolve`: a column the transform adds is added to the sink (nullable), never dropped or narrowed
    (docs/sinks.md). `deletes` (a Deletes, replace sinks only): a tombstone deletes its key and publishes a
    tombstone (docs/deletes.md); without it a tombstone is a dead letter."""

    table: str
    key: Sequence[str] = ()
    mode: SinkMode = "replace"
    accumulate: Sequence[str] = ()
    order_by: Sequence[str] = ()
    schema: str = "public"
    evolve: bool = False
    deletes: Deletes | None = None

    def __post_init__(self) -> None:
        _identifier("sink.table", self.table)
        _identifier("sink.schema", self.schema)
        if self.mode not in SINK_MODES:
            raise ConfigError("sink.mode", f"must be one of {', '.join(map(repr, SINK_MODES))}, got {self.mode!r}")
        if not isinstance(self.evolve, bool):
            raise ConfigError("sink.evolve", f"must be True or False, got {self.evolve!r}")
        if self.mode == "append":
            key = _identifiers("sink.key", self.key, allow_empty=True)
            if key and key != APPEND_KEY:
                raise ConfigError("sink.key", f"an append sink is keyed by each row's source position "
                                              f"{list(APPEND_KEY)}; leave key out (got {list(key)})")
            object.__setattr__(self, "key", APPEND_KEY)
        else:
            object.__setattr__(self, "key", _identifiers("sink.key", self.key))
        object.__setattr__(self, "accumulate", _identifiers("sink.accumulate", self.accumulate, allow_empty=True))
        object.__setattr__(self, "order_by", _identifiers("sink.order_by", self.order_by, allow_empty=True))
        if self.mode == "accumulate":
            if not self.accumulate:
                raise ConfigError("sink.accumulate", "an accumulate sink must name the columns that add up")
            if self.order_by:
                raise ConfigError("sink.order_by", "an accumulate sink adds every row; there is nothing to order")
        elif self.accumulate:
            raise ConfigError("sink.accumulate", "only for mode='accumulate'")
        if self.mode == "append" and self.order_by:
            raise ConfigError("sink.order_by", "an append sink inserts every row; there is nothing to order")
        if overlap := set(self.key) & set(self.accumulate):
            raise ConfigError("sink.accumulate", f"key columns cannot be accumulated: {sorted(overlap)}")
        if self.deletes is not None:
            check_deletes(self.deletes, self.mode, self.order_by)


@dataclass(frozen=True)
class KafkaOutput:
    """Where results are published: one record per sink row (docs/output.md).

    `key`: a column (its text, as always), or a list of columns (a composite key: the JSON object of those
    columns, in that order). `value`: JsonValue() (the row as JSON, the default) or AvroValue(schema,
    schema_id) (the Confluent wire format). `headers`: output header name -> the sink column it is copied
    from (text or bytea; NULL: no such header on that record)."""

    topic: str
    key: str | Sequence[str]
    value: OutputValue = JsonValue()
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not _TOPIC.fullmatch(self.topic):
            raise ConfigError("output.topic", f"{self.topic!r} is not a valid Kafka topic name")
        if isinstance(self.key, str):
            _identifier("output.key", self.key)
        else:
            object.__setattr__(self, "key", _identifiers("output.key", self.key))
        if not isinstance(self.value, (JsonValue, AvroValue)):
            raise ConfigError("output.value", f"must be JsonValue() or AvroValue(...), got {self.value!r}")
        pairs = headers_map(self.headers)
        for name, column in pairs:
            if column in RESERVED_COLUMNS:
                raise ConfigError(f"output.headers[{name!r}]", f"{column!r} is reserved by eosbatch")
        object.__setattr__(self, "headers", dict(pairs))  # a copy (a plain dict: a pipeline pickles)

    def __hash__(self) -> int:
        return hash((self.topic, self.key_columns, self.value, tuple(self.headers.items())))

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The columns the key is made of."""
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)

    @property
    def composite(self) -> bool:
        """Whether the key is a JSON object of its columns (a list was given), not one column's text."""
        return not isinstance(self.key, str)


Transform = Callable[..., "DataFrame"]


@dataclass(frozen=True)
class BatchInfo:
    """What a transform of two arguments, `transform(df, batch)`, learns about its batch: the offset ranges it
    reads, and nothing else (no batch id, kind or settings: output that depended on them would change on a
    replay, and `eosbatch verify` recomputes the sink passing the same ranges)."""

    ranges: tuple[OffsetRange, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranges", tuple(OffsetRange(*r) for r in self.ranges))


def transform_arity(transform: object) -> int:
    """1 for `transform(df)`, 2 for `transform(df, batch)` (a BatchInfo); ConfigError("transform") otherwise.
    Read once, when the pipeline is built, from the function's signature."""
    if not callable(transform):
        raise ConfigError("transform", "must be a function DataFrame -> DataFrame")
    try:
        signature = inspect.signature(transform)
    except (TypeError, ValueError):  # a builtin without a signature: called with the DataFrame only
        return 1
    parameters = list(signature.parameters.values())
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if keyword_only := [p.name for p in parameters if p.kind == p.KEYWORD_ONLY and p.default is p.empty]:
        raise ConfigError("transform", f"takes (df) or (df, batch); {signature} also requires {keyword_only}")
    if len(required) > 2:
        raise ConfigError("transform", f"takes (df) or (df, batch); {signature} requires {len(required)} arguments")
    if not positional and not any(p.kind == p.VAR_POSITIONAL for p in parameters):
        raise ConfigError("transform", f"takes (df) or (df, batch); {signature} takes no DataFrame")
    return 2 if len(positional) >= 2 else 1


# How many micro-batches one scheduled DAG run may process, at most, unless a pipeline says otherwise; and
# the most it may say (each batch is a TaskGroup of its own in the DAG).
BATCHES_PER_RUN = 4
MOST_BATCHES_PER_RUN = 50
DAG_SHAPES = ("steps", "compact")  # AirflowOptions.shape: a task per step, or plan -> process -> commit_and_publish
# AirflowOptions.trigger: runs on the pipeline's `schedule` (or only when triggered), or when its source has new
# committed records (an Asset watched by a trigger in the triggerer: eosbatch.orchestration.arrivals).
DAG_TRIGGERS = ("schedule", "data")
DATA_POLL_SECONDS = 1.0
DATA_POLL_RANGE = (0.1, 3600.0)
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
    holds the pipeline's lane lease from its first plan to its last batch. `shape`: each micro-batch as the
    tasks plan -> process -> commit -> publish -> finalize (and `done`), "steps", or, "compact", as plan ->
    process -> commit_and_publish (early publish: commit, publish and finalize in one task), for small
    frequent batches where Airflow's start of each task costs more than the work (docs/airflow-dags.md).
    `trigger`: "schedule", runs on the pipeline's `schedule`; "data", a run whenever the source's last stable
    offsets pass the ledger's next offsets (the DAG is scheduled on a watched Asset; the pipeline's `schedule`
    must then be None), checked every `data_poll_seconds` by Airflow's triggerer.
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
    shape: str = "steps"
    trigger: str = "schedule"
    data_poll_seconds: float = DATA_POLL_SECONDS

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
        if self.shape not in DAG_SHAPES:
            raise ConfigError("airflow.shape", f"must be one of {', '.join(DAG_SHAPES)}, got {self.shape!r}")
        if self.trigger not in DAG_TRIGGERS:
            raise ConfigError("airflow.trigger", f"must be one of {', '.join(DAG_TRIGGERS)}, got {self.trigger!r}")
        low, high = DATA_POLL_RANGE
        poll = self.data_poll_seconds
        if not isinstance(poll, (int, float)) or isinstance(poll, bool) or not low <= poll <= high:
            raise ConfigError("airflow.data_poll_seconds", f"must be a number of seconds from {low:g} to {high:g}, "
                                                           f"got {poll!r}")
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
        if self.airflow.trigger == "data" and self.schedule is not None:
            raise ConfigError("schedule", f"must be None with airflow.trigger='data' (runs start when data arrives), "
                                          f"got {self.schedule!r}")
        object.__setattr__(self, "_transform_arity", transform_arity(self.transform))
        if self.output is not None and self.output.topic in self.source.topics:
            raise ConfigError("output.topic", "must differ from the source topics (a pipeline cannot read itself)")
        if self.output is not None and self.sink.deletes is not None:
            check_deletes_output(self.sink.key, self.output.key_columns, self.output.value, self.output.headers)

    def transformed(self, df: DataFrame, batch: BatchInfo) -> DataFrame:
        """The transform applied to `df`, given `batch` when it takes a second argument."""
        if getattr(self, "_transform_arity", 1) == 2:
            return self.transform(df, batch)
        return self.transform(df)

    @property
    def transactional_id(self) -> str:
        return f"eosbatch.{self.name}"

    @property
    def marker_group(self) -> str:
        return f"eosbatch.{self.name}"
