"""The commit's cheap bound on an output record's size is never below the exact size, whatever the row holds:
a row it let through unmeasured could be one Kafka refuses after COMMIT, blocking the lane for ever."""

from __future__ import annotations

import pytest
from psycopg2 import sql

from eosbatch.ledger import sinks, store

pytestmark = [pytest.mark.integration]

COLUMNS = {  # name -> type: each type eosbatch stages (spark.schema's closed set), names that need escaping; "r"
    # and "c" are also the aliases the commit gives its rows
    "k": "text", "plain": "text", 'quote"d\\name': "text", "ünï": "text", "n": "numeric", "d": "double precision",
    "r": "real", "c": "real", "i": "integer", "b": "bigint", "s": "smallint", "flag": "boolean", "ts": "timestamptz",
    "ts_ntz": "timestamp", "day": "date", "raw": "bytea",
}

ROWS = [
    # control characters (6 bytes each in JSON), quotes and backslashes (2), multibyte UTF-8, extreme numbers
    ("a\x01\x02\x1f", "\x1b" * 50, '"\\"' * 40, "é€😀" * 20, "-1e-300", "-Infinity", "NaN", "-0",
     -2147483648, -9223372036854775808, -32768, False, "-infinity", "294276-12-31 23:59:59.999999", "4713-01-01 BC",
     b"\\\x00\"\x7f" * 30),
    ("", "", "", "", "0", "0", "0", "1e-45", 0, 0, 0, True, "1970-01-01 00:00:00+00", "1970-01-01", "1970-01-01", b""),
    (None,) * len(COLUMNS),
    ("k" * 1000, "\t\n\r\b\f" * 200, "x" * 5000, "\u2028\u2029" * 10, "9" * 1000 + "." + "1" * 1000,
     "1.7976931348623157e308", "3.4e38", "-3.4e38", 2147483647, 9223372036854775807, 32767, True,
     "2024-02-29 12:34:56.789+05:45", "2024-02-29 12:34:56.789", "5874897-12-31", bytes(range(256))),
    # the longest text of each fixed-width type (sinks.TEXT_WIDTH), with nothing else to hide a short bound
    ("k", None, None, None, None, "-2.2250738585072014e-308", "-1.17549435e-38", "-1.17549435e-38", -2147483648,
     -9223372036854775808, -32768, False, None, None, None, None),
    ("k", None, None, None, None, "-Infinity", "-Infinity", "NaN", None, None, None, True, None, None, None, None),
]


def test_the_size_bound_is_never_below_the_exact_size(settings, unique) -> None:
    table = sql.Identifier("public", f"size_bound_{unique}")
    names = list(COLUMNS)
    exact = sql.SQL("octet_length(row_to_json(r.*)::text) + coalesce(octet_length(r.{}::text), 0)").format(
        sql.Identifier("k"))
    with store.transaction(settings) as cur:
        cur.execute("SET LOCAL TimeZone = 'Asia/Kathmandu'")  # a zone whose offset has minutes: longer JSON
        cur.execute(sql.SQL("CREATE TABLE {} ({})").format(table, sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in COLUMNS.items())))
        for row in ROWS:
            cur.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                table, sql.SQL(", ").join(map(sql.Identifier, names)),
                sql.SQL(", ").join(sql.Placeholder() * len(names))), row)
        typed = sinks.result_columns(cur, sql.SQL("SELECT * FROM {}").format(table), {})  # as the commit does
        assert {c.pg_type for c in typed} >= set(sinks.TEXT_WIDTH)  # every type with a fixed bound is here
        cur.execute(sql.SQL("SELECT {}, {} FROM {} r").format(sinks.json_size_bound(typed, "k"), exact, table))
        sizes = cur.fetchall()
        fixed = [c.name for c in typed if c.pg_type in sinks.TEXT_WIDTH]
        cur.execute(sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(
            sql.SQL("max(greatest(octet_length({c}::text), octet_length(to_json({c})::text)))").format(
                c=sql.Identifier(c)) for c in fixed), table))
        longest = dict(zip(fixed, cur.fetchone(), strict=True))
        cur.execute(sql.SQL("DROP TABLE {}").format(table))
    types = {c.name: c.pg_type for c in typed}
    assert all(n <= sinks.TEXT_WIDTH[types[c]] for c, n in longest.items()), longest  # each width is a bound
    assert len(sizes) == len(ROWS)
    for bound, size in sizes:
        assert bound >= size, (bound, size)
    assert any(size > 10_000 for _, size in sizes)  # the rows really are large and escaped


def test_the_bound_holds_with_a_composite_key_and_copied_headers(settings, unique) -> None:
    """The bound the commit checks first (rendering.record_fits' CASE) against the exact size of the record's
    value, composite key (the JSON of its columns) and copied headers, for the same rows."""
    from eosbatch import KafkaOutput
    from eosbatch.ledger.sinks import rendering

    table = sql.Identifier("public", f"size_bound_{unique}")
    names = list(COLUMNS)
    output = KafkaOutput("out", key=["plain", "n", "ts", "raw", "i", "day"],
                         headers={"h1": "k", "h2": "raw"})
    with store.transaction(settings) as cur:
        cur.execute("SET LOCAL TimeZone = 'Asia/Kathmandu'")
        cur.execute(sql.SQL("CREATE TABLE {} ({})").format(table, sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in COLUMNS.items())))
        for row in ROWS:
            cur.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                table, sql.SQL(", ").join(map(sql.Identifier, names)),
                sql.SQL(", ").join(sql.Placeholder() * len(names))), row)
        typed = sinks.result_columns(cur, sql.SQL("SELECT * FROM {}").format(table), {})
        bound = rendering.record_fits(typed, output).seq[1]  # CASE WHEN <bound> <= ...: the cheap bound
        cur.execute(sql.SQL("SELECT {}, {}, octet_length({}), octet_length(row_to_json(r.*)::text) "
                            "+ coalesce(octet_length(r.k), 0) + coalesce(octet_length(r.raw), 0) + 4 FROM {} r").format(
            bound, rendering.record_size(output), rendering.key(output, "r"), table))
        sizes = cur.fetchall()
        cur.execute(sql.SQL("DROP TABLE {}").format(table))
    for cheap, measured, key, exact in sizes:
        assert cheap >= measured >= key + exact, (cheap, measured, key, exact)  # exact: headers' names too
    assert any(key > 1_000 for _, _, key, _ in sizes)  # the keys really are large and escaped
