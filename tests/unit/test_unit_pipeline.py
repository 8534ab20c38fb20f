"""Pipeline definitions, their validation, the registry, and the sink's ordering columns."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any
from uuid import uuid4

import pytest

from eosbatch import registry
from eosbatch.config import PIPELINES
from eosbatch.exceptions import ConfigError, TerminalError
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import Column, KeyColumn, KeyColumns, position_columns, validate_columns
from eosbatch.pipeline import RESERVED_COLUMNS, KafkaOutput, KafkaSource, Pipeline, PostgresSink

pytestmark = pytest.mark.unit


def unique() -> str:
    return f"t_{uuid4().hex[:8]}"


def pipeline(**overrides: Any) -> Pipeline:
    """A valid pipeline with `overrides`, registered as a test builds them: at run time, by hand."""
    fields: dict[str, Any] = {
        "name": unique(),
        "source": KafkaSource(["orders"]),
        "transform": lambda df: df,
        "sink": PostgresSink("totals", key=["customer_id"]),
    }
    fields.update(overrides)
    built = Pipeline(**fields)
    registry.register(built)
    return built


def refused(build: Callable[[], object], field: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build()
    assert info.value.field == field, str(info.value)
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, TerminalError)
    return info.value


def test_a_valid_pipeline_is_built_normalized_and_registered() -> None:
    output = KafkaOutput("totals-out", "customer_id")
    p = pipeline(source=KafkaSource(["orders", "refunds"], max_records_per_batch=5), output=output)
    assert p.source.topics == ("orders", "refunds")
    assert p.sink.key == ("customer_id",)
    assert p.transactional_id == p.marker_group == f"eosbatch.{p.name}"
    assert registry.load([])[p.name] is p


def test_invalid_pipeline_name() -> None:
    for name in ("", "Upper", "1st", "with-dash", "a" * 49, 5, None):
        refused(lambda n=name: pipeline(name=n), "name")


def test_longest_valid_pipeline_name() -> None:
    name = "a" + uuid4().hex[:8] + "b" * 39
    assert pipeline(name=name).name == name


def test_invalid_source_topics() -> None:
    for topics, field in [
        ("orders", "source.topics"),  # a bare string is not a list of topics
        ([], "source.topics"),
        (["orders", "bad topic"], "source.topics[1]"),
        (["x" * 250], "source.topics[0]"),
        ([None], "source.topics[0]"),
    ]:
        refused(lambda t=topics: KafkaSource(t), field)


def test_invalid_source_settings() -> None:
    for value in (0, -1, "10", 1.5):
        refused(lambda v=value: KafkaSource(["orders"], max_records_per_batch=v),
                "source.max_records_per_batch")
    refused(lambda: KafkaSource(["orders"], starting_offsets="middle"), "source.starting_offsets")  # type: ignore
    refused(lambda: KafkaSource(["orders"], value_schema=""), "source.value_schema")


def test_sink_table_must_be_a_plain_identifier() -> None:
    for table in ('x"; drop table y; --', "two words", "1table", "t" * 64, ""):
        error = refused(lambda t=table: PostgresSink(t, key=["id"]), "sink.table")
        assert "not a valid SQL identifier" in str(error)
    assert PostgresSink("T_" + "t" * 61, key=["id"]).table == "T_" + "t" * 61  # 63 characters is the limit


def test_sink_schema_must_be_a_plain_identifier() -> None:
    refused(lambda: PostgresSink("t", key=["id"], schema="public; drop"), "sink.schema")


def test_invalid_sink_key() -> None:
    for key, field in [
        ("customer_id", "sink.key"),  # a bare string, not a list of columns
        ([], "sink.key"),
        (["id", "id"], "sink.key"),
        (["id", "bad col"], "sink.key[1]"),
        (["id", 'x") --'], "sink.key[1]"),
    ]:
        refused(lambda k=key: PostgresSink("t", key=k), field)


def test_reserved_columns_are_refused_everywhere() -> None:
    assert RESERVED_COLUMNS == {"_eosbatch_batch", "_eosbatch_writer"}
    for column in sorted(RESERVED_COLUMNS):
        error = refused(lambda c=column: PostgresSink("t", key=["id", c]), "sink.key[1]")
        assert "reserved" in str(error)
        refused(lambda c=column: PostgresSink("t", key=["id"], order_by=[c]), "sink.order_by[0]")
        refused(lambda c=column: PostgresSink(c, key=["id"]), "sink.table")
        refused(lambda c=column: KafkaOutput("out", c), "output.key")


def test_sink_mode_rules() -> None:
    refused(lambda: PostgresSink("t", key=["id"], mode="upsert"), "sink.mode")  # type: ignore[arg-type]
    refused(lambda: PostgresSink("t", key=["id"], mode="accumulate"), "sink.accumulate")
    refused(lambda: PostgresSink("t", key=["id"], accumulate=["n"]), "sink.accumulate")
    refused(lambda: PostgresSink("t", key=["id"], mode="accumulate", accumulate=["id", "n"]),
            "sink.accumulate")
    refused(lambda: PostgresSink("t", key=["id"], mode="accumulate", accumulate=["n"], order_by=["ts"]),
            "sink.order_by")
    sink = PostgresSink("t", key=["id"], mode="accumulate", accumulate=["n", "total"])
    assert sink.accumulate == ("n", "total")


def test_invalid_output() -> None:
    refused(lambda: KafkaOutput("bad topic!", "id"), "output.topic")
    refused(lambda: KafkaOutput("out", "bad key"), "output.key")
    error = refused(lambda: pipeline(output=KafkaOutput("orders", "customer_id")), "output.topic")
    assert "source" in str(error)


def test_pipeline_parts_must_have_the_right_types() -> None:
    refused(lambda: pipeline(source={"topics": ["orders"]}), "source")
    refused(lambda: pipeline(sink="totals"), "sink")
    refused(lambda: pipeline(output="totals-out"), "output")
    refused(lambda: pipeline(transform="select *"), "transform")


def test_a_trailing_newline_is_not_a_valid_name_identifier_or_topic() -> None:
    refused(lambda: pipeline(name=unique() + "\n"), "name")
    refused(lambda: PostgresSink("totals\n", key=["id"]), "sink.table")
    refused(lambda: KafkaSource(["orders\n"]), "source.topics[0]")


# --- registry -----------------------------------------------------------------------------------------------


def test_the_same_name_from_another_module_is_refused() -> None:
    name = unique()
    pipeline(name=name)

    def elsewhere(df: Any) -> Any:
        return df

    elsewhere.__module__ = "someone_else.pipelines"
    error = refused(lambda: pipeline(name=name, transform=elsewhere), "name")
    assert "defined twice" in str(error) and "someone_else.pipelines" in str(error)


def test_redefining_from_the_same_module_replaces_it() -> None:
    name = unique()
    pipeline(name=name)
    again = pipeline(name=name, sink=PostgresSink("other", key=["id"]))
    assert registry.load([])[name] is again


def test_get_finds_a_registered_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PIPELINES, raising=False)
    p = pipeline()
    assert registry.get(p.name) is p


def test_get_of_an_unknown_name_lists_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PIPELINES, raising=False)
    known = pipeline().name
    error = refused(lambda: registry.get("no_such_pipeline"), "pipeline")
    assert "'no_such_pipeline'" in str(error)
    assert known in str(error)


@pytest.fixture
def modules() -> Iterator[Callable[..., str]]:
    """Makes importable pipeline modules: `modules(name=value, ...)` -> the new module's name."""
    made: list[str] = []

    def module(**globals_: Any) -> str:
        name = f"eosbatch_test_{uuid4().hex[:8]}"
        made.append(name)
        sys.modules[name] = ModuleType(name)
        vars(sys.modules[name]).update(globals_)
        return name

    yield module
    for name in made:
        sys.modules.pop(name, None)


def test_building_or_replacing_a_pipeline_registers_nothing() -> None:
    built = Pipeline(unique(), KafkaSource(["orders"]), lambda df: df, PostgresSink("totals", key=["id"]))
    renamed = dataclasses.replace(built, name=unique())
    assert built.name not in registry.load([]) and renamed.name not in registry.load([])
    registry.register(built)
    dataclasses.replace(built, sink=PostgresSink("other", key=["id"]))  # the same name: once re-registered
    assert registry.load([])[built.name] is built


def test_a_module_s_globals_and_its_pipelines_list_are_found(modules: Callable[..., str]) -> None:
    looped = [Pipeline(unique(), KafkaSource([f"topic_{i}"]), lambda df: df, PostgresSink("t", key=["id"]))
              for i in range(3)]
    single = Pipeline(unique(), KafkaSource(["orders"]), lambda df: df, PostgresSink("t", key=["id"]))
    name = modules(single=single, PIPELINES=looped, helper=lambda: None, NOT_PIPELINES=[1, "x"])
    assert {p.name: p for p in [single, *looped]}.items() <= registry.load([name]).items()
    assert registry.load([modules(PIPELINES=tuple(looped))])[looped[0].name] is looped[0]  # a tuple too


def test_one_pipeline_imported_by_two_modules_is_one_pipeline(modules: Callable[..., str]) -> None:
    shared = Pipeline(unique(), KafkaSource(["orders"]), lambda df: df, PostgresSink("t", key=["id"]))
    first, second = modules(shared=shared), modules(imported=shared, PIPELINES=[shared])
    assert registry.load([first, second])[shared.name] is shared


def test_two_pipelines_with_one_name_in_two_modules_are_refused(modules: Callable[..., str]) -> None:
    name = unique()
    first = modules(p=Pipeline(name, KafkaSource(["orders"]), lambda df: df, PostgresSink("t", key=["id"])))
    second = modules(p=Pipeline(name, KafkaSource(["orders"]), lambda df: df, PostgresSink("u", key=["id"])))
    error = refused(lambda: registry.load([first, second]), "name")
    assert f"pipeline {name!r} is defined twice ({first} and {second})" in str(error)
    same = modules(a=Pipeline(name, KafkaSource(["a"]), lambda df: df, PostgresSink("t", key=["id"])),
                   PIPELINES=[Pipeline(name, KafkaSource(["b"]), lambda df: df, PostgresSink("t", key=["id"]))])
    refused(lambda: registry.load([same]), "name")  # two objects in one module too


def test_load_of_a_missing_module_names_the_variable() -> None:
    error = refused(lambda: registry.load(["eosbatch_no_such_module_here"]), PIPELINES)
    assert "eosbatch_no_such_module_here" in str(error)


def test_modules_are_read_from_the_variable() -> None:
    assert registry.modules({PIPELINES: " a.b , c,, "}) == ["a.b", "c"]
    assert registry.modules({}) == []


# --- the transform's output columns ---


@pytest.mark.parametrize(("names", "named"), [
    (["id", "n", "n"], "more than once"),
    (["id", "n" * 64], "longer than PostgreSQL's 63 bytes"),
    (["id", "é" * 32], "longer than PostgreSQL's 63 bytes"),  # 64 bytes in 32 characters
    (["id", "_eosbatch_seq"], "eosbatch's own"),
])
def test_output_columns_postgresql_would_cut_or_confuse_are_refused_naming_them(names, named) -> None:
    sink = pipeline(sink=PostgresSink("t", key=["id"]), output=None)
    with pytest.raises(SinkError, match=named) as info:
        validate_columns(sink, [Column(n, "text") for n in names])
    assert names[-1] in str(info.value)
    validate_columns(sink, [Column(n, "text") for n in ["id", "n", "m" * 63]])  # the longest name that fits


# --- position_columns ---------------------------------------------------------------------------------------


def test_position_columns_are_the_source_position_the_transform_kept() -> None:
    assert position_columns(["id", "offset", "n", "partition"]) == ("partition", "offset")
    assert position_columns(["topic", "id", "offset", "partition"]) == ("topic", "partition", "offset")


def test_position_columns_are_empty_without_both_partition_and_offset() -> None:
    assert position_columns(["id", "partition", "n"]) == ()
    assert position_columns(["id", "offset", "topic"]) == ()


@pytest.mark.parametrize(("ddl", "names"), [
    ("a INT, b DECIMAL(18,2) NOT NULL, `c d` STRING", ["a", "b", "c d"]),
    ("s STRUCT<x: INT, y: MAP<STRING, INT>>, t ARRAY<STRING>", ["s", "t"]),
])
def test_ddl_field_names_splits_only_top_level_commas(ddl, names):
    from eosbatch.pipeline import ddl_field_names

    assert ddl_field_names(ddl) == names


@pytest.mark.parametrize("field", ["key", "Offset", "headers", "_eosbatch_error"])
def test_value_schema_fields_may_not_collide_with_kafka_columns(field):
    from eosbatch import KafkaSource
    from eosbatch.exceptions import ConfigError

    with pytest.raises(ConfigError, match=f"source.value_schema: field\\(s\\) {field} collide"):
        KafkaSource(topics=["t"], value_schema=f"id STRING, {field} STRING")


def test_keys_compare_alike_only_with_every_column_of_the_same_type_and_collation() -> None:
    """The plain INSERT into an empty sink relies on staging's keys being the sink's: one row per key in the
    batch is then one row per key in the sink's unique index (sinks.insert_pays)."""
    text, c_text = KeyColumn("text", 100, False), KeyColumn("text", 950, True)
    number = KeyColumn("integer", 0, False)
    both = {"k": text, "n": number}
    assert KeyColumns(both, dict(both)).alike(("k", "n"))
    assert not KeyColumns(both, {"k": c_text, "n": number}).alike(("k", "n"))  # another collation
    assert not KeyColumns(both, {"k": text, "n": KeyColumn("bigint", 0, False)}).alike(("k", "n"))
    assert not KeyColumns({"k": text}, {"k": text}).alike(("k", "n"))  # a key column missing from both
    assert not KeyColumns(both, {}).alike(("k", "n"))  # no sink yet
    assert KeyColumns({"k": c_text, "n": number}, {}).bytewise == {"k"}
