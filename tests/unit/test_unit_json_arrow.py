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


@pytest.mark.parametrize("bad", [
    None, b"", b"not json", b"[1, 2]", b" {}", b"{} ", b'{"order_id": 1}', b'{"amount": "1.5"}', b'{"n": 1.0}',
    b'{"n": 3000000000}', b'{"big": 9223372036854775808}', b'{"ok": 1}', b'{"order_id": "x", "order_id": "y"}',
    b"{'order_id': 'x'}", b'{"n": 007}', b'{"order_id": "x",}', b'{"order_id": "a\tb"}', b'{"order_id": "\xff"}',
    b'{"order_id": "\\ud800"}', b'{"order_id": "x"}\n{"order_id": "y"}', b'{"order_id": "x"}{"order_id": "y"}',
    b'{"order_id": {"nested": 1}}', b'{"amount": 1e400}',
])
def test_a_value_pyarrow_refuses_is_null_and_moves_nothing_else(bad: bytes | None) -> None:
    """One refused value among 200 good ones: it is null (from_json's), and so are at most SMALLEST values
    around it (the run it fell in); every other value is parsed, in its place."""
    values: list[bytes | None] = [good(i) for i in range(200)]
    values[77] = bad
    rows = parsed(values)
    assert rows[77] is None
    left = [i for i, row in enumerate(rows) if row is None]
    assert len(left) <= json_arrow.SMALLEST
    assert all(rows[i] == expected(i) for i in range(200) if i not in left)


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


def test_one_malformed_value_in_a_large_batch_leaves_only_its_run() -> None:
    values: list[bytes | None] = [good(i) for i in range(10_000)]
    values[5_000] = b'{"order_id": 5}'
    rows = parsed(values)
    left = [i for i, row in enumerate(rows) if row is None]
    assert 5_000 in left and len(left) <= json_arrow.SMALLEST


def test_a_batch_of_nothing_pyarrow_takes_is_all_null() -> None:
    assert parsed([None, b"x", b"[]"]) == [None, None, None]
    assert parsed([]) == []


def test_runs_of_large_binary_are_parsed_too() -> None:
    values = pa.array([good(i) for i in range(50)], pa.large_binary())
    assert json_arrow.parse(values, FIELDS, CORRUPT).to_pylist() == [expected(i) for i in range(50)]
