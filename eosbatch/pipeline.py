"""Pipeline definitions: pure values, validated when built so that a bad definition fails at import,
naming the field, long before a batch is planned."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
class PostgresSink:
    """Where results land. `replace`: a later row for a key replaces the stored one; inside one batch the
    row with the highest `order_by` (or source position, when the transform keeps `partition`/`offset`)
    wins. `accumulate`: the `accumulate` columns add to the stored values (running totals)."""

    table: str
    key: Sequence[str]
    mode: SinkMode = "replace"
    accumulate: Sequence[str] = ()
    order_by: Sequence[str] = ()
    schema: str = "public"

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


@dataclass(frozen=True)
class Pipeline:
    """One pipeline: a plain value. Building it registers nothing: eosbatch.registry finds it among the
    globals (or the `PIPELINES` list) of a module named in EOSBATCH_PIPELINES."""

    name: str
    source: KafkaSource
    transform: Transform
    sink: PostgresSink
    output: KafkaOutput | None = None
    schedule: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError("name", f"{self.name!r} must be lowercase letters, digits and _ (max 48), "
                                      "starting with a letter")
        for name, value, kind in (("source", self.source, KafkaSource), ("sink", self.sink, PostgresSink)):
            if not isinstance(value, kind):
                raise ConfigError(name, f"must be a {kind.__name__}, got {type(value).__name__}")
        if self.output is not None and not isinstance(self.output, KafkaOutput):
            raise ConfigError("output", f"must be a KafkaOutput or None, got {type(self.output).__name__}")
        if not callable(self.transform):
            raise ConfigError("transform", "must be a function DataFrame -> DataFrame")
        if self.output is not None and self.output.topic in self.source.topics:
            raise ConfigError("output.topic", "must differ from the source topics (a pipeline cannot read itself)")

    @property
    def transactional_id(self) -> str:
        return f"eosbatch.{self.name}"

    @property
    def marker_group(self) -> str:
        return f"eosbatch.{self.name}"
