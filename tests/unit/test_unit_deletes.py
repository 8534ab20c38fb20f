"""Deletes (docs/deletes.md), without a database or Spark: the configuration refused where it cannot order a
tombstone, the commit's SQL (read as text: tests/unit/test_unit_sink_sql.py's render), the outbox and early
queries of a batch with tombstones, and the verifier's comparisons."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from eosbatch import Deletes, KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.exceptions import ConfigError
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import (
    Column,
    KeyColumn,
    KeyColumns,
    SinkShape,
    dead_letters,
    deletes,
    latest,
    markers,
    outbox,
    rendering,
    statements,
)
from eosbatch.spark import recompute
from eosbatch.verify import _last_per_source, _same
from tests.unit.test_unit_sink_sql import render

pytestmark = pytest.mark.unit


def deleting(order_by=(), output_key="k", **options) -> Pipeline:
    return Pipeline(name="p", source=KafkaSource(topics=["in"]), transform=lambda df: df,
                    sink=PostgresSink(table="t", key=["k"], order_by=list(order_by), schema="s",
                                      deletes=Deletes(**options)),
                    output=KafkaOutput(topic="out", key=output_key))


def refused(field: str, build) -> str:  # noqa: ANN001
    with pytest.raises(ConfigError) as info:
        build()
    assert info.value.field == field, str(info.value)
    return str(info.value)


def test_deletes_are_refused_where_a_tombstone_cannot_be_ordered_or_published() -> None:
    assert "only a replace sink deletes" in refused("sink.deletes", lambda: PostgresSink(
        "t", key=["k"], mode="accumulate", accumulate=["n"], deletes=Deletes()))
    message = refused("sink.deletes.order_header", lambda: PostgresSink("t", key=["k"], order_by=["v"],
                                                                        deletes=Deletes()))
    assert "order_header" in message and "order_from_timestamp" in message
    refused("sink.deletes.order_header", lambda: PostgresSink("t", key=["k"], deletes=Deletes(order_header="v")))
    refused("sink.deletes.order_from_timestamp", lambda: PostgresSink(
        "t", key=["k"], deletes=Deletes(order_from_timestamp=True)))
    refused("sink.deletes.order_header", lambda: Deletes(order_header="v", order_from_timestamp=True))
    refused("sink.deletes.order_header", lambda: Deletes(order_header=""))
    refused("sink.deletes", lambda: PostgresSink("t", key=["k"], order_by=["a", "b"],
                                                 deletes=Deletes(order_from_timestamp=True)))
    refused("sink.deletes", lambda: PostgresSink("t", key=["k"], deletes=True))  # type: ignore[arg-type]
    refused("output.key", lambda: deleting(output_key="v"))  # a tombstone carries only the key
    assert deleting(["v"], order_header="version").sink.deletes == Deletes(order_header="version")


def test_without_order_by_the_transform_must_keep_the_source_position() -> None:
    with pytest.raises(SinkError, match="keep `partition` and `offset`"):
        markers.check_columns(deleting(), [Column("k", "text"), Column("v", "text")])
    markers.check_columns(deleting(), [Column("k", "text"), Column("partition", "integer"), Column("offset", "bigint")])
    markers.check_columns(deleting(["v"], order_from_timestamp=True), [Column("k", "text"), Column("v", "bigint")])


COLUMNS = ["k", "v", "partition", "offset"]


def test_a_marker_keeps_the_order_value_then_the_source_position() -> None:
    assert deletes.marker_columns(deleting(), COLUMNS) == ["partition", "offset"]
    assert deletes.marker_columns(deleting(["v"], order_header="h"), COLUMNS) == ["v", "partition", "offset"]
    assert deletes.marker_columns(deleting(["v"], order_header="h"), ["k", "v"]) == ["v"]


def test_the_latest_row_rule_is_one_rule_for_any_pair() -> None:
    p = deleting(["v"], order_header="h")
    assert render(latest.new_row_wins(p, COLUMNS, "regular")) == render(
        latest.new_row_wins(p, COLUMNS, "regular", stored="s", new="EXCLUDED"))
    assert render(latest.new_row_wins(p, COLUMNS, "backfill", stored="d", new="b")) == (
        '((d."v" IS NULL AND b."v" IS NOT NULL) OR b."v" > d."v" OR (d."v" IS NOT DISTINCT FROM b."v" AND '
        '(d."partition" IS NOT DISTINCT FROM b."partition" AND b."offset" > d."offset")))')


def test_rows_older_than_their_keys_marker_are_not_written() -> None:
    assert render(deletes.rows_to_write(deleting(), COLUMNS, COLUMNS, "regular")) == (
        'SELECT b."k", b."v", b."partition", b."offset" FROM fitting b WHERE NOT b."_eosbatch_deleted" AND NOT '
        'EXISTS (SELECT FROM "eosbatch"."deleted_p" d WHERE d."k" = b."k" AND NOT (NOT (d."partition" IS NOT '
        'DISTINCT FROM b."partition") OR b."offset" > d."offset"))')


def test_a_tombstone_deletes_the_stored_row_it_beats_returning_it_with_its_own_position() -> None:
    assert render(deletes.removed(deleting(), COLUMNS, COLUMNS, "replay")) == (
        'DELETE FROM "s"."t" AS s USING fitting b WHERE b."_eosbatch_deleted" AND s."k" = b."k" AND '
        '(s."partition" IS NOT DISTINCT FROM b."partition" AND b."offset" > s."offset") '
        'RETURNING s."k", s."v", b."partition", b."offset"')


def test_a_tombstone_no_stored_row_beats_records_or_advances_its_keys_marker() -> None:
    text = render(deletes.marked(deleting(["v"], order_from_timestamp=True), ["k", "v"], "regular"))
    assert text == (
        'INSERT INTO "eosbatch"."deleted_p" AS d ("k", "v", "_eosbatch_batch") SELECT b."k", b."v", %(batch)s '
        'FROM fitting b WHERE b."_eosbatch_deleted" AND NOT EXISTS (SELECT FROM "s"."t" s WHERE s."k" = b."k" '
        'AND NOT ((s."v" IS NULL AND b."v" IS NOT NULL) OR b."v" > s."v" OR (s."v" IS NOT DISTINCT FROM b."v" '
        'AND true))) ON CONFLICT ("k") DO UPDATE SET "v" = EXCLUDED."v", "_eosbatch_batch" = '
        'EXCLUDED."_eosbatch_batch" WHERE ((d."v" IS NULL AND EXCLUDED."v" IS NOT NULL) OR EXCLUDED."v" > d."v" '
        'OR (d."v" IS NOT DISTINCT FROM EXCLUDED."v" AND true)) RETURNING 1')
    assert render(deletes.unmarked(deleting())) == (
        'DELETE FROM "eosbatch"."deleted_p" d USING changed c WHERE d."k" = c."k" RETURNING 1')


def test_the_outbox_takes_stored_rows_and_deleted_ones_flagged() -> None:
    assert render(deletes.outbox_insert(deleting(), ["k", "v"])) == (
        'INSERT INTO "eosbatch"."outbox_p" ("_eosbatch_batch", "_eosbatch_seq", "k", "v", "_eosbatch_deleted") '
        'SELECT %(batch)s, row_number() OVER (), c."k", c."v", c."_eosbatch_deleted" FROM (SELECT "k", "v", false '
        'AS "_eosbatch_deleted" FROM changed UNION ALL SELECT "k", "v", true FROM removed) c RETURNING 1')


def test_the_statement_runs_every_write_and_counts_deleted_rows_as_sink_rows() -> None:
    p = deleting()
    assert p.output is not None
    checked = statements.checked_rows(p, deletes.staged(COLUMNS), frozenset())
    assert ', "_eosbatch_deleted" DESC NULLS LAST, ' in render(checked)  # a tie goes to the tombstone
    text = render(deletes.move(p, COLUMNS, COLUMNS, "regular", checked, rendering.record_fits(
        [Column("k", "text")], p.output), statements.upsert(p, COLUMNS, COLUMNS, "regular"),
        deletes.outbox_insert(p, COLUMNS), statements.key_text(p)))
    assert text.startswith("WITH all_rows AS (SELECT ")
    assert ' fitting AS (SELECT r.* FROM all_rows r WHERE CASE WHEN r."_eosbatch_deleted" OR CASE WHEN ' in text
    for cte in ("batch_rows AS (SELECT b.", "changed AS (INSERT INTO", "removed AS (DELETE FROM",
                "marked AS (INSERT INTO", "unmarked AS (DELETE FROM", "outboxed AS (INSERT INTO"):
        assert cte in text
    assert text.endswith(" SELECT (SELECT count(*) FROM changed) + (SELECT count(*) FROM removed), "
                         "(SELECT count(*) FROM outboxed)")


def test_publish_sends_a_null_value_for_a_deleted_row() -> None:
    text = render(outbox.outbox_query(deleting(), ["k", "v", "partition", "offset", "_eosbatch_deleted"]))
    assert text.startswith('SELECT q."_eosbatch_seq"::text, "r"."k"::text, NULL, "q"."partition"::text, '
                           '"q"."offset"::text, CASE WHEN "q"."_eosbatch_deleted" THEN NULL ELSE '
                           'row_to_json(r.*)::text END FROM ')
    assert 'CROSS JOIN LATERAL (SELECT q."k", q."v", q."partition", q."offset") r ' in text  # not the flag


def test_early_records_of_a_batch_staged_with_tombstones_skip_rows_a_marker_holds_back() -> None:
    p = deleting()
    key = KeyColumn("text", 100, False)
    shape = SinkShape(True, {"k": "text", "v": "text", "partition": "integer", "offset": "bigint"}, (("k",),),
                      False, KeyColumns({"k": key}, {"k": key}), False, {}, {})
    text = render(outbox.early_query(p, shape, COLUMNS, deleting=True))
    assert 'CASE WHEN "c"."_eosbatch_deleted" THEN NULL ELSE row_to_json(r.*)::text END' in text
    assert text.endswith(' WHERE c."_eosbatch_deleted" OR NOT EXISTS (SELECT FROM "eosbatch"."deleted_p" d WHERE '
                         'd."k" = c."k" AND NOT (NOT (d."partition" IS NOT DISTINCT FROM c."partition") OR '
                         'c."offset" > d."offset"))')
    assert "_eosbatch_deleted" not in render(outbox.early_query(p, shape, COLUMNS))


def test_verify_keeps_each_partitions_last_row_or_tombstone_and_compares_instants() -> None:
    rows = [{"partition": 0, "offset": 3, "x": 1}, {"partition": 0, "offset": 7, "x": 2},
            {"partition": 1, "offset": 1, "x": 3}]
    assert sorted(r["x"] for r in _last_per_source(rows)) == [2, 3]
    zoned = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    spark_collected = zoned.astimezone().replace(tzinfo=None)  # naive, the driver's local time
    assert _same(zoned) == _same("2026-01-02T03:04:05+00:00") == _same(recompute._plain(spark_collected))


def test_a_record_over_the_limit_goes_to_the_dead_letters_beside_the_deletes() -> None:
    p = deleting()
    assert p.output is not None
    fits = rendering.record_fits([Column("k", "text")], p.output)
    rows, _ = statements.batch_rows(p, deletes.staged(COLUMNS), flagged=True)
    text = render(deletes.move_with_too_big(
        p, COLUMNS, COLUMNS, "regular", rows, fits, dead_letters.too_big(p, p.output, COLUMNS,
                                                                         rendering.record_size(p.output), fits),
        statements.upsert(p, COLUMNS, COLUMNS, "regular"), deletes.outbox_insert(p, COLUMNS)))
    assert ' fitting AS (SELECT r.* FROM all_rows r WHERE r."_eosbatch_deleted" OR CASE WHEN ' in text
    assert " too_big AS (INSERT INTO eosbatch.dead_letters " in text and " removed AS (DELETE FROM " in text
    assert text.endswith('(SELECT count(*) FROM too_big), (SELECT count(*) FROM all_rows WHERE "_eosbatch_ambiguous")')
