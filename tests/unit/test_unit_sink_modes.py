"""The append sink, evolving tables and batch info, without a database or Spark: the pipeline's validation
(naming the field), the SQL an append sink and an evolving table run (read as text), which batches publish
early, the Spark types stored as jsonb and arrays, and pgpq's encoding of them."""

from __future__ import annotations

import functools
from datetime import datetime

import pyarrow as pa
import pytest

from eosbatch import BatchInfo, KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.exceptions import ConfigError
from eosbatch.ledger import store
from eosbatch.ledger.sinks import Column, evolve, outbox, statements
from eosbatch.pipeline import APPEND_KEY, transform_arity
from eosbatch.protocol.ranges import OffsetRange
from tests.unit.test_unit_sink_sql import render, shape


def appending(output_key: str = "id") -> Pipeline:
    return Pipeline(name="p", source=KafkaSource(topics=["in"]), transform=lambda df: df,
                    sink=PostgresSink(table="t", mode="append", schema="s"),
                    output=KafkaOutput(topic="out", key=output_key))


COLUMNS = ["topic", "partition", "offset", "id", "v", "row_in_record"]


# ---------------------------------------------------------------- the pipeline

def test_an_append_sink_is_keyed_by_position_and_refuses_a_key_or_an_order() -> None:
    assert PostgresSink(table="t", mode="append").key == APPEND_KEY == ("topic", "partition", "offset",
                                                                        "row_in_record")
    assert PostgresSink(table="t", key=list(APPEND_KEY), mode="append").key == APPEND_KEY
    with pytest.raises(ConfigError, match=r"^sink\.key: an append sink is keyed by each row's source position"):
        PostgresSink(table="t", key=["id"], mode="append")
    with pytest.raises(ConfigError, match=r"^sink\.order_by: an append sink inserts every row"):
        PostgresSink(table="t", mode="append", order_by=["ts"])
    with pytest.raises(ConfigError, match=r"^sink\.accumulate: only for mode='accumulate'"):
        PostgresSink(table="t", mode="append", accumulate=["n"])
    with pytest.raises(ConfigError, match=r"^sink\.key: must name at least one column"):
        PostgresSink(table="t")  # replace and accumulate still need their key
    with pytest.raises(ConfigError, match=r"^sink\.mode: must be one of 'replace', 'accumulate', 'append'"):
        PostgresSink(table="t", key=["k"], mode="upsert")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^sink\.evolve: must be True or False"):
        PostgresSink(table="t", key=["k"], evolve="yes")  # type: ignore[arg-type]


def one(df): return df  # noqa: E704
def two(df, batch): return df  # noqa: E704
def optional(df, batch=None): return df  # noqa: E704
def three(df, batch, more): return df  # noqa: E704
def keyword(df, *, more): return df  # noqa: E704
def nothing(): return None  # noqa: E704


@pytest.mark.parametrize(("transform", "arity"), [
    (one, 1), (two, 2), (optional, 2), (lambda df: df, 1), (functools.partial(three, more=1), 2),
    (functools.partial(two, batch=None), 1),
])
def test_the_transform_s_arity_is_read_once_from_its_signature(transform, arity) -> None:
    assert transform_arity(transform) == arity


@pytest.mark.parametrize(("transform", "problem"), [
    (three, "requires 3 arguments"), (keyword, "also requires ['more']"), (nothing, "takes no DataFrame"),
    ("not a function", "must be a function"),
])
def test_a_bad_transform_signature_fails_when_the_pipeline_is_built(transform, problem) -> None:
    with pytest.raises(ConfigError, match=r"^transform: ") as refused:
        Pipeline(name="p", source=KafkaSource(topics=["in"]), transform=transform,
                 sink=PostgresSink(table="t", key=["k"]))
    assert problem in str(refused.value)


def test_a_transform_of_two_arguments_gets_the_batch_info_and_nothing_else() -> None:
    seen = []
    pipeline = Pipeline(name="p", source=KafkaSource(topics=["in"]), transform=lambda df, batch: seen.append(batch),
                        sink=PostgresSink(table="t", key=["k"]))
    info = BatchInfo(ranges=(("in", 0, 5, 9),))
    pipeline.transformed("df", info)  # type: ignore[arg-type]
    assert seen == [info] and info.ranges == (OffsetRange("in", 0, 5, 9),)
    assert [f for f in BatchInfo.__dataclass_fields__] == ["ranges"]
    with pytest.raises(AttributeError):
        info.ranges = ()  # type: ignore[misc]  # frozen


# ---------------------------------------------------------------- append's SQL

def test_append_inserts_every_staged_row_and_does_nothing_on_its_position() -> None:
    p = appending()
    rows, out = statements.batch_rows(p, COLUMNS)
    assert out == COLUMNS
    assert render(rows) == ('SELECT "topic", "partition", "offset", "id", "v", "row_in_record" FROM '
                            '"eosbatch"."stage_p" WHERE "_eosbatch_batch" = %(batch)s AND "_eosbatch_writer" = '
                            'ANY(%(writers)s)')
    text = render(statements.upsert(p, COLUMNS, out, "reprocess"))
    assert text.endswith('FROM batch_rows ON CONFLICT ("topic", "partition", "offset", "row_in_record") DO NOTHING '
                         'RETURNING s."topic", s."partition", s."offset", s."id", s."v", s."row_in_record"')
    # the outbox publishes what the insert returned: a replayed row, not inserted, is not published
    assert 'FROM "changed" c RETURNING 1' in render(statements.outbox_insert(p, out))
    # nothing is ambiguous: no window, no flag raising
    assert "refuse_row" not in render(statements.checked_rows(p, COLUMNS, frozenset()))


# ---------------------------------------------------------------- evolving tables

def test_evolve_adds_only_the_missing_columns_nullable_and_if_not_exists() -> None:
    columns = [Column("k", "text"), Column("detail", "jsonb"), Column("tags", "text[]"), Column("n", "integer")]
    s = shape(sink_types={"k": "text", "n": "bigint"})
    added = evolve.new_columns(s, columns)
    assert added == columns[1:3]
    assert render(evolve.add_columns(appending(), added)) == (
        'ALTER TABLE "s"."t" ADD COLUMN IF NOT EXISTS "detail" jsonb, ADD COLUMN IF NOT EXISTS "tags" text[]')
    assert evolve.new_columns(shape(sink_exists=False, sink_types={}), columns) == []  # created whole


def test_an_incompatible_column_names_it_and_both_types() -> None:
    error = evolve.incompatible(appending(), Column("n", "jsonb"), "integer")
    assert str(error).startswith("sink.evolve: column 'n' of s.t is integer, and the transform now returns jsonb")


def test_the_commit_refuses_a_batch_whose_column_left_the_sink() -> None:
    evolve.check_shape(appending(), shape(), ["k", "n2"])
    with pytest.raises(evolve.ShapeChanged, match=r"no longer has column\(s\) \['gone'\]"):
        evolve.check_shape(appending(), shape(), ["k", "gone"])


def batch(writers: dict) -> store.Batch:
    now = datetime(2026, 1, 1)
    return store.Batch(1, "p", "regular", "staged", 1, True, "g", None, writers, 1, None, 0, None, None, now, now,
                       None, None, None, None, ())


@pytest.mark.parametrize(("writers", "types", "why"), [
    ({"columns": ["k", "n2"], "evolved": ["n2"]}, {}, "it added column(s) ['n2'] to the sink"),
    ({"columns": ["k", "doc", "tags"]}, {"doc": "jsonb", "tags": "integer[]"},
     "its column(s) ['doc', 'tags'] are jsonb or arrays"),
    ({"columns": ["k", "n2"]}, {}, None),
])
def test_a_batch_that_changed_the_shape_or_has_jsonb_or_arrays_publishes_from_the_outbox(writers, types, why) -> None:
    s = shape(sink_types={"k": "text", "n2": "numeric(12,2)", **types})
    assert outbox.refusal(s, batch(writers)) == why


# ---------------------------------------------------------------- Spark types and their encoding

def test_structs_and_maps_are_jsonb_and_arrays_of_scalars_are_arrays() -> None:
    from pyspark.sql.types import ArrayType, DecimalType, IntegerType, MapType, StringType, StructField, StructType

    from eosbatch.spark.schema import pg_type

    struct = StructType([StructField("a", IntegerType())])
    assert [pg_type("c", t) for t in (struct, MapType(StringType(), IntegerType()), ArrayType(IntegerType()),
                                      ArrayType(DecimalType(10, 2)), ArrayType(StringType()), ArrayType(struct),
                                      ArrayType(ArrayType(IntegerType())))] == [
        "jsonb", "jsonb", "integer[]", "numeric(10,2)[]", "text[]", "jsonb", "jsonb"]


def test_jsonb_and_list_columns_encode_as_postgresql_expects() -> None:
    from eosbatch.spark.staging import binary_copy

    rows = pa.RecordBatch.from_pydict({"doc": pa.array(['{"a": 1}', None]),
                                       "tags": pa.array([["x", None], []], pa.list_(pa.string()))})
    as_jsonb, n = binary_copy(iter([rows]), 1, "w:1", jsonb=("doc",))
    as_text, _ = binary_copy(iter([rows]), 1, "w:1")
    assert n == 2
    # jsonb's binary form is its text after a version byte (1): one byte more than text, for the one value
    assert len(as_jsonb.getvalue()) == len(as_text.getvalue()) + 1
    assert b'\x01{"a": 1}' in as_jsonb.getvalue() and b'\x01{"a": 1}' not in as_text.getvalue()
