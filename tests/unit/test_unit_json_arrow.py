"""pyarrow's JSON parse (eosbatch.formats.json_arrow), without Spark: which schemas it takes, which values it
takes, and that a value it does not take comes back null (left to from_json) without moving any other value.
That what it takes equals from_json is tests/integration/test_json_arrow.py's, on the real server."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from eosbatch.formats import json_arrow

pytestmark = pytest.mark.unit

FIELDS = [("order_id", "string"), ("amount", "double"), ("n", "int"), ("big", "bigint"), ("ok", "boolean")]
CORRUPT = "_corrupt"


def good(i: int) -> bytes:
    return json.dumps({"order_id": f"o-{i}", "amount": i / 4, "n": i, "big": i * 10**12, "ok": i % 2 == 0,
                       "extra": {"nested": [1, {"x": None}]}}).encode()


def parsed(values: list[bytes | None]) -> list[dict | None]:
    return json_arrow.parse(pa.array(values, pa.binary()), FIELDS, CORRUPT).to_pylist()


def expected(i: int) -> dict:
    return {"order_id": f"o-{i}", "amount": i / 4, "n": i, "big": i * 10**12, "ok": i % 2 == 0, CORRUPT: None}


def test_only_schemas_of_types_converted_alike_are_eligible() -> None:
    assert json_arrow.eligible(FIELDS)
    for other in ("timestamp", "date", "decimal(18,2)", "float", "smallint", "array<string>", "struct<a:int>",
                  "map<string,int>", "binary"):
        assert not json_arrow.eligible([("a", "string"), ("b", other)]), other
    assert not json_arrow.eligible([])
    assert not json_arrow.eligible([("a", "string"), ("a", "int")])  # no duplicate names


def test_well_formed_values_are_parsed_in_order_with_the_corrupt_field_null() -> None:
    assert parsed([good(i) for i in range(100)]) == [expected(i) for i in range(100)]


def test_missing_and_null_fields_are_null_and_unknown_fields_are_ignored() -> None:
    values = [b'{"order_id": "a"}', b'{"order_id": null, "amount": 1}', b"{}", b'{"ORDER_ID": "case"}'] * 10
    rows = parsed(values)
    assert rows[0] == {"order_id": "a", "amount": None, "n": None, "big": None, "ok": None, CORRUPT: None}
    assert rows[1] == {"order_id": None, "amount": 1.0, "n": None, "big": None, "ok": None, CORRUPT: None}
    assert rows[2] == rows[3] == {name: None for name, _ in FIELDS} | {CORRUPT: None}


# Refusals pyarrow names the row of: only that value is left.
NAMED = [b'{"order_id": 1}', b'{"amount": "1.5"}', b'{"ok": 1}', b'{"order_id": "x", "order_id": "y"}',
         b"{'order_id': 'x'}", b'{"n": 007}', b'{"order_id": "x",}', b'{"order_id": "a\tb"}',
         b'{"order_id": "\\ud800"}', b'{"order_id": {"nested": 1}}', b'{"amount": 1e400}']
# Not tried (not an object from first to last byte): only that value is left.
UNTRIED = [None, b"", b"not json", b"[1, 2]", b" {}", b"{} "]
# Refusals without a row (a conversion, another count of rows, invalid UTF-8): the rest of the batch is left.
UNNAMED = [b'{"n": 1.0}', b'{"n": 3000000000}', b'{"big": 9223372036854775808}',
           b'{"order_id": "x"}\n{"order_id": "y"}', b'{"order_id": "x"}{"order_id": "y"}']


@pytest.mark.parametrize("bad", NAMED + UNTRIED)
def test_a_value_pyarrow_refuses_by_row_or_does_not_try_is_null_and_only_it(bad: bytes | None) -> None:
    values: list[bytes | None] = [good(i) for i in range(200)]
    values[77] = bad
    rows = parsed(values)
    assert rows[77] is None
    assert all(rows[i] == expected(i) for i in range(200) if i != 77)


@pytest.mark.parametrize("bad", UNNAMED)
def test_a_refusal_without_its_row_leaves_the_rest_of_the_batch(bad: bytes) -> None:
    values: list[bytes | None] = [good(i) for i in range(200)]
    values[77] = bad
    rows = parsed(values)
    assert all(row is None for row in rows)  # one attempt from the first value: nothing before it is taken


def test_after_a_refusal_by_row_the_values_after_it_are_tried_again() -> None:
    values: list[bytes | None] = [good(i) for i in range(300)]
    values[10] = b'{"order_id": 1}'
    values[150] = b'{"n": 1.5}'  # no row: the attempt from 11 on is refused, and all of it left
    rows = parsed(values)
    assert [i for i, row in enumerate(rows) if row is None] == list(range(10, 300))
    values[150] = good(150)
    assert [i for i, row in enumerate(parsed(values)) if row is None] == [10]


def test_invalid_utf8_leaves_only_its_value() -> None:
    values: list[bytes | None] = [good(i) for i in range(100)]
    values[40] = b'{"order_id": "\xff"}'
    rows = parsed(values)
    assert [i for i, row in enumerate(rows) if row is None] == [40]
    assert all(rows[i] == expected(i) for i in range(100) if i != 40)


def test_stretches_between_invalid_utf8_are_bounded_too() -> None:
    values: list[bytes | None] = [b'{"order_id": "\xff"}' if i % 2 else good(i) for i in range(200)]
    rows = parsed(values)
    taken = [i for i, row in enumerate(rows) if row is not None]
    assert taken == list(range(0, 2 * json_arrow.ATTEMPTS, 2))  # the first ATTEMPTS stretches, then from_json


def test_the_attempts_are_bounded_for_input_malformed_throughout() -> None:
    values: list[bytes | None] = [b'{"order_id": 1}'] * 5_000
    values[4_999] = good(4_999)
    rows = parsed(values)
    assert all(row is None for row in rows)  # past ATTEMPTS, the rest (the good one too) is from_json's


def test_values_pyarrow_takes_as_from_json_reads_them() -> None:
    """Whitespace (line breaks too), escapes and surrogate pairs, NaN, an integer in a DOUBLE field;
    that from_json reads them the same is the integration test's to show."""
    values = [b'{ "order_id" : "x" ,\r"amount" : 2 }', b'{"order_id": "\\u0041\\ud83d\\ude00\\/\\n"}',
              b'{"amount": NaN}', b'{"amount": 9007199254740993}', b'{"n": -0, "big": -9223372036854775808}',
              b'{\n  "order_id": "pretty",\n  "ok": true\n}']
    rows = parsed(values * 10)
    assert rows[0]["order_id"] == "x" and rows[0]["amount"] == 2.0
    assert rows[1]["order_id"] == "A\U0001F600/\n"
    assert rows[2]["amount"] != rows[2]["amount"]  # NaN
    assert rows[3]["amount"] == 9007199254740992.0
    assert rows[4]["n"] == 0 and rows[4]["big"] == -(2**63)
    assert rows[5]["order_id"] == "pretty" and rows[5]["ok"] is True


def test_malformed_values_in_a_large_batch_leave_only_themselves() -> None:
    values: list[bytes | None] = [good(i) for i in range(10_000)]
    for i in range(5, 10_000, 1_000):
        values[i] = b'{"order_id": 5}'
    rows = parsed(values)
    assert [i for i, row in enumerate(rows) if row is None] == list(range(5, 10_000, 1_000))


def test_a_batch_of_nothing_pyarrow_takes_is_all_null() -> None:
    assert parsed([None, b"x", b"[]"]) == [None, None, None]
    assert parsed([]) == []


def test_runs_of_large_binary_are_parsed_too() -> None:
    values = pa.array([good(i) for i in range(50)], pa.large_binary())
    assert json_arrow.parse(values, FIELDS, CORRUPT).to_pylist() == [expected(i) for i in range(50)]
