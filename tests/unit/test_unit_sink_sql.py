"""The sink's SQL builders (eosbatch.ledger.sinks), read as the SQL text they return, without a database: the
upsert's conflict target and action per mode, the batch's latest row, the outbox queries' columns, the early
query's casts, and names that need quoting."""

from __future__ import annotations

import pytest
from psycopg2 import sql

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import (
    Column,
    KeyColumn,
    KeyColumns,
    SinkShape,
    dead_letters,
    modes,
    outbox,
    rendering,
    statements,
)
from eosbatch.ledger.sinks.tables import validate_columns


def render(composable: sql.Composable) -> str:
    """The text psycopg2 would send, for the composables the builders use (as_string needs a connection)."""
    if isinstance(composable, sql.Composed):
        return "".join(render(part) for part in composable.seq)
    if isinstance(composable, sql.SQL):
        return composable.string
    if isinstance(composable, sql.Identifier):
        return ".".join('"' + s.replace('"', '""') + '"' for s in composable.strings)
    if isinstance(composable, sql.Literal):
        value = composable.wrapped
        return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else str(value)
    if isinstance(composable, sql.Placeholder):
        return "%s" if composable.name is None else f"%({composable.name})s"
    raise TypeError(composable)


def pipeline(key=("k",), mode="replace", accumulate=(), order_by=(), output_key="k") -> Pipeline:
    return Pipeline(name="p", source=KafkaSource(topics=["in"]), transform=lambda df: df,
                    sink=PostgresSink(table="t", key=list(key), mode=mode, accumulate=list(accumulate),
                                      order_by=list(order_by), schema="s"),
                    output=KafkaOutput(topic="out", key=output_key))


ODD = 'we-ird"col'
POSITIONED = ["k", "v", ODD, "partition", "offset"]


def test_replace_upserts_on_the_key_setting_every_other_column_where_the_new_row_wins() -> None:
    text = render(statements.upsert(pipeline(), POSITIONED, POSITIONED, "regular"))
    assert text.startswith('INSERT INTO "s"."t" AS s ("k", "v", "we-ird""col", "partition", "offset") '
                           'SELECT "k", "v", "we-ird""col", "partition", "offset" FROM batch_rows ON CONFLICT ("k") ')
    assert ('DO UPDATE SET "v" = EXCLUDED."v", "we-ird""col" = EXCLUDED."we-ird""col", '
            '"partition" = EXCLUDED."partition", "offset" = EXCLUDED."offset" WHERE ') in text
    # a regular batch: another partition (a later commit) wins, or a higher offset of the same one
    assert text.endswith(' WHERE (NOT (s."partition" IS NOT DISTINCT FROM EXCLUDED."partition") '
                         'OR EXCLUDED."offset" > s."offset") '
                         'RETURNING s."k", s."v", s."we-ird""col", s."partition", s."offset"')


@pytest.mark.parametrize(("kind", "condition"), [
    ("backfill", '(s."partition" IS NOT DISTINCT FROM EXCLUDED."partition" AND EXCLUDED."offset" > s."offset")'),
    ("replay", '(s."partition" IS NOT DISTINCT FROM EXCLUDED."partition" AND EXCLUDED."offset" > s."offset")'),
    ("reprocess", '(s."partition" IS NOT DISTINCT FROM EXCLUDED."partition" AND EXCLUDED."offset" >= s."offset")'),
])
def test_history_only_beats_an_earlier_offset_of_the_same_partition(kind, condition) -> None:
    assert f" WHERE {condition} RETURNING " in render(statements.upsert(pipeline(), POSITIONED, POSITIONED, kind))


@pytest.mark.parametrize(("kind", "wins"), [("regular", "true"), ("reprocess", "true"), ("backfill", "false")])
def test_without_positions_the_lane_decides(kind, wins) -> None:
    assert f' WHERE {wins} RETURNING ' in render(statements.upsert(pipeline(), ["k", "v"], ["k", "v"], kind))


def test_order_by_wins_first_and_a_null_never_beats_a_value() -> None:
    text = render(statements.upsert(pipeline(order_by=["ts"]), ["k", "ts", "v"], ["k", "ts", "v"], "regular"))
    assert (' WHERE ((s."ts" IS NULL AND EXCLUDED."ts" IS NOT NULL) OR EXCLUDED."ts" > s."ts" '
            'OR (s."ts" IS NOT DISTINCT FROM EXCLUDED."ts" AND true)) RETURNING ') in text


def test_a_key_only_sink_does_nothing_on_conflict() -> None:
    assert ' ON CONFLICT ("k") DO NOTHING RETURNING s."k"' in render(
        statements.upsert(pipeline(), ["k"], ["k"], "regular"))


def test_accumulate_adds_the_batch_sums_to_the_stored_values() -> None:
    acc = pipeline(key=["k", "j"], mode="accumulate", accumulate=["n", "m"])
    rows, out = statements.batch_rows(acc, ["k", "j", "n", "m"])
    assert out == ["k", "j", "n", "m"]
    assert render(rows) == ('SELECT "k", "j", sum("n") AS "n", sum("m") AS "m" FROM "eosbatch"."stage_p" '
                            'WHERE "_eosbatch_batch" = %(batch)s AND "_eosbatch_writer" = ANY(%(writers)s) '
                            'GROUP BY "k", "j"')
    text = render(statements.upsert(acc, out, out, "backfill"))
    assert text.endswith(' ON CONFLICT ("k", "j") DO UPDATE SET "n" = COALESCE(s."n", 0) + COALESCE(EXCLUDED."n", 0), '
                         '"m" = COALESCE(s."m", 0) + COALESCE(EXCLUDED."m", 0) RETURNING s."k", s."j", s."n", s."m"')
    # every row adds: nothing is ambiguous, and the outbox publishes the deltas, not the stored sums
    flagged, _ = statements.batch_rows(acc, out, flagged=True)
    assert ', (false) AS "_eosbatch_ambiguous" FROM ' in render(flagged)
    assert render(statements.checked_rows(acc, out, frozenset())) == render(rows)
    assert ' FROM "batch_rows" c RETURNING 1' in render(statements.outbox_insert(acc, out))


def test_the_latest_row_of_a_key_is_first_in_distinct_on_order_with_a_total_tie_break() -> None:
    ordered = pipeline(key=["k", "j"], order_by=["ts", "ver"])
    columns = ["k", "j", "ts", "ver", "z", ODD, "a", "partition", "offset"]
    rows, out = statements.batch_rows(ordered, columns, bytewise=frozenset({"k"}))
    assert out == columns
    assert render(rows) == (
        'SELECT DISTINCT ON ("k" COLLATE "C", "j") "k", "j", "ts", "ver", "z", "we-ird""col", "a", "partition", '
        '"offset" FROM "eosbatch"."stage_p" WHERE "_eosbatch_batch" = %(batch)s AND "_eosbatch_writer" = '
        'ANY(%(writers)s) ORDER BY "k" COLLATE "C", "j", "ts" DESC NULLS LAST, "ver" DESC NULLS LAST, '
        '"offset" DESC, "a" DESC NULLS LAST, "partition" DESC NULLS LAST, "we-ird""col" DESC NULLS LAST, '
        '"z" DESC NULLS LAST, ctid')
    # order_by orders every key: nothing to flag, and the rows are checked for nothing
    assert render(statements.checked_rows(ordered, columns, frozenset({"k"}))) == render(rows)


def test_a_key_nothing_orders_is_flagged_on_the_distinct_on_sort_and_refused_in_the_statement() -> None:
    rows, _ = statements.batch_rows(pipeline(), POSITIONED, flagged=True)
    text = render(rows)
    assert ', (min("partition") OVER w <> max("partition") OVER w) AS "_eosbatch_ambiguous" FROM ' in text
    assert text.endswith(' WINDOW w AS (PARTITION BY "k" ORDER BY "k", "offset" DESC, "partition" DESC NULLS LAST, '
                         '"v" DESC NULLS LAST, "we-ird""col" DESC NULLS LAST, ctid ROWS BETWEEN UNBOUNDED '
                         'PRECEDING AND UNBOUNDED FOLLOWING) ORDER BY "k", "offset" DESC, "partition" DESC NULLS '
                         'LAST, "v" DESC NULLS LAST, "we-ird""col" DESC NULLS LAST, ctid')
    bare, _ = statements.batch_rows(pipeline(), ["k", "v"], flagged=True)
    assert ', (count(*) OVER w > 1) AS "_eosbatch_ambiguous" FROM ' in render(bare)
    checked = render(statements.checked_rows(pipeline(), ["k", "v"], frozenset()))
    assert checked.startswith('SELECT r."k", r."v" FROM (SELECT DISTINCT ON ("k") ')
    assert checked.endswith(') r WHERE CASE WHEN r."_eosbatch_ambiguous" THEN eosbatch.refuse_row(%(ambiguous)s, '
                            "'a key nothing orders', concat_ws(', ', r.\"k\"::text)) ELSE true END")


def test_a_replace_sink_publishes_the_rows_it_stored() -> None:
    assert render(statements.outbox_insert(pipeline(), ["k", ODD])) == (
        'INSERT INTO "eosbatch"."outbox_p" ("_eosbatch_batch", "_eosbatch_seq", "k", "we-ird""col") '
        'SELECT %(batch)s, row_number() OVER (), c."k", c."we-ird""col" FROM "changed" c RETURNING 1')


def test_outbox_queries_select_seq_key_the_source_and_the_value_in_that_order() -> None:
    assert render(outbox.outbox_query(pipeline(output_key="v"), POSITIONED)) == (
        'SELECT q."_eosbatch_seq"::text, "r"."v"::text, NULL, "q"."partition"::text, '
        '"q"."offset"::text, row_to_json("r".*)::text FROM "eosbatch"."outbox_p" q CROSS JOIN LATERAL (SELECT q."k", '
        'q."v", q."we-ird""col", q."partition", q."offset") r WHERE q."_eosbatch_batch" = %s')
    with_topic = render(outbox.outbox_query(pipeline(), ["k", "topic", "partition", "offset"]))
    assert with_topic.startswith('SELECT q."_eosbatch_seq"::text, "r"."k"::text, '
                                 '"q"."topic"::text, "q"."partition"::text, "q"."offset"::text, '
                                 'row_to_json("r".*)::text FROM ')
    assert ', NULL, NULL, NULL, row_to_json("r".*)::text FROM ' in render(
        outbox.outbox_query(pipeline(), ["k", "v"]))
    assert render(outbox.json_outbox_query()) == (
        "SELECT seq::text, key, source_topic, source_partition::text, source_offset::text, value "
        "FROM eosbatch.outbox WHERE batch_id = %s")


def shape(key_type: str = "text", sink_types: dict[str, str] | None = None, **changes) -> SinkShape:
    key = {"k": KeyColumn(key_type, 100 if key_type == "text" else 0, False)}
    values = {"sink_exists": True, "sink_types": sink_types or {"k": key_type, "n2": "numeric(12,2)",
                                                                "partition": "integer", "offset": "bigint"},
              "unique_keys": (("k",),), "rewrites_rows": False, "keys": KeyColumns(key, dict(key)),
              "nondeterministic_key": False, "stage_types": {}, "outbox_types": {}}
    return SinkShape(**{**values, **changes})


def test_the_early_query_casts_to_the_sink_s_types_with_their_typmods() -> None:
    query = outbox.early_query(pipeline(), shape(), ["k", "n2", "partition", "offset"])
    assert query is not None
    text = render(query)
    assert text.startswith('SELECT (row_number() OVER ())::text, "r"."k"::text, NULL, '
                           '"r"."partition"::text, "r"."offset"::text, row_to_json("r".*)::text '
                           'FROM (SELECT DISTINCT ON ("k") ')
    assert text.endswith(') c CROSS JOIN LATERAL (SELECT CAST(c."k" AS text) AS "k", CAST(c."n2" AS numeric(12,2)) '
                         'AS "n2", CAST(c."partition" AS integer) AS "partition", CAST(c."offset" AS bigint) AS '
                         '"offset") r')


@pytest.mark.parametrize("why", ["accumulate", "numeric key", "unlike keys", "nondeterministic", "trigger",
                                 "missing column", "no sink"])
def test_no_early_query_where_the_stored_rows_may_differ(why) -> None:
    p, s, columns = pipeline(), shape(), ["k", "n2"]
    if why == "accumulate":
        p = pipeline(mode="accumulate", accumulate=["n2"])
    elif why == "numeric key":
        s = shape("numeric", {"k": "numeric", "n2": "numeric"})
    elif why == "unlike keys":
        s = shape(keys=KeyColumns({"k": KeyColumn("text", 100, False)}, {"k": KeyColumn("character varying", 100,
                                                                                          False)}))
    elif why == "nondeterministic":
        s = shape(nondeterministic_key=True)
    elif why == "trigger":
        s = shape(rewrites_rows=True)
    elif why == "missing column":
        columns = ["k", "n2", "extra"]
    else:
        s = shape(sink_exists=False, sink_types={})
    assert outbox.early_query(p, s, columns) is None
    assert outbox.not_exact(p, s, columns) == NOT_EARLY[why]  # the run's one log line says why


NOT_EARLY = {
    "accumulate": "its accumulate sink publishes what the commit computes from the stored rows",
    "numeric key": "the sink's key type(s) ['numeric'] may store an equal value in other bytes",
    "unlike keys": "the sink's key columns differ from the batch's in type",
    "nondeterministic": "the sink's key has a nondeterministic collation",
    "trigger": "the sink has triggers, rules, partitions or children that may change the row it stores",
    "missing column": "the sink has no column(s) ['extra']",
    "no sink": "the sink table does not exist yet"}


def test_an_early_query_has_no_reason_against_it() -> None:
    assert outbox.not_exact(pipeline(), shape(), ["k", "n2"]) is None
    assert outbox.not_exact(pipeline(), shape(), []) == "the batch staged no columns"


def test_a_record_too_big_is_a_dead_letter_against_its_source_or_the_output_topic() -> None:
    size, fits = rendering.record_size(KafkaOutput("out", "k")), sql.SQL("FITS")
    positioned = render(dead_letters.too_big(pipeline(), KafkaOutput("out", "k"), POSITIONED, size, fits))
    assert "SELECT %(pipeline)s, %(batch)s, 'in', r.\"partition\", COALESCE((SELECT br.incarnation " in positioned
    assert positioned.endswith('FROM (SELECT "k", "v", "we-ird""col", "partition", "offset" FROM all_rows) r WHERE '
                               'NOT FITS ON CONFLICT (pipeline, topic, partition, incarnation, "offset") DO UPDATE SET '
                               'batch_id = EXCLUDED.batch_id, error = EXCLUDED.error, redriven_by = NULL RETURNING 1')
    aggregate = render(dead_letters.too_big(pipeline(), KafkaOutput("out", "k"), ["k", "v"], size, fits))
    assert "%(batch)s, 'out', -1, 0, -(%(batch)s::bigint * 1000000 + row_number() OVER ())," in aggregate


def test_the_size_bound_counts_fixed_widths_once_and_measures_the_rest() -> None:
    bound = render(rendering.json_size_bound([Column("k", "bigint"), Column("v", "text")], "k"))
    # 2 + (6*1 + 10 + 6*20) + (6*1 + 10 + 0); the key a bigint: its longest text
    assert bound == '(154 + 6 * (coalesce(octet_length(r."v"::text), 0)) + 20)'


def test_the_mode_is_chosen_once_and_checks_its_own_columns() -> None:
    assert isinstance(modes.mode_of(pipeline()), modes.Replace)
    acc = pipeline(mode="accumulate", accumulate=["n"])
    assert isinstance(modes.mode_of(acc), modes.Accumulate)
    with pytest.raises(SinkError, match=r"accumulate sink takes only key and accumulated columns; .*\['v'\]"):
        validate_columns(acc, [Column("k", "text"), Column("n", "bigint"), Column("v", "text")])
    validate_columns(pipeline(), [Column("k", "text"), Column("v", "text")])
