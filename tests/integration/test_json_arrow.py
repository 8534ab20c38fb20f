"""pyarrow's JSON parse (eosbatch.formats.json_arrow) against Spark's from_json, on the stack's Spark Connect
server: a corpus of awkward values, each among well-formed ones, parsed by a Json source with pyarrow (the
default) and without it (Json(arrow=False): from_json for every record) must give the same rows, record by
record: the same fields, the same errors, so the same dead letters with the same reasons. Values pyarrow takes
are checked to be taken (so the comparison is of the two parsers, not of from_json with itself)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pyarrow as pa
import pytest

from eosbatch.config import Settings
from eosbatch.formats import Json, json_arrow
from eosbatch.pipeline import KafkaSource
from tests.conftest import _unavailable

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA = "s STRING NOT NULL, d DOUBLE, i INT, l BIGINT, b BOOLEAN"
FIELDS = [("s", "string"), ("d", "double"), ("i", "int"), ("l", "bigint"), ("b", "boolean")]
BLOCK = 64  # each awkward value ends a block of well-formed ones: a run pyarrow may take whole

# Values pyarrow takes: whitespace of every kind, escapes, surrogate pairs, NaN and huge numbers, an integer
# in a DOUBLE, the extremes of INT and BIGINT, nested unknown fields, field names of another case.
TAKEN = [
    b'{ "s" : "x" ,\r\n\t"d" : 2 }', b'{\n  "s": "pretty",\n  "b": true\n}',
    b'{"s": "\\u0041\\ud83d\\ude00\\/\\n\\"\\\\"}', b'{"s": "nan", "d": NaN}', b'{"s": "big", "d": 9007199254740993}',
    b'{"s": "huge", "d": 1.7976931348623157e309}', b'{"s": "tiny", "d": 4.9e-325}', b'{"s": "neg", "d": -0.0, "i": -0}',
    b'{"s": "ext", "i": -2147483648, "l": 9223372036854775807}',
    b'{"s": "nest", "x": {"y": [1, {"z": null}], "w": "\\u00e9"}}', b'{"S": "case", "s": "lower"}', b'{"s": null}',
    b"{}", b'{"d": 1}', b'{"s": "\\u0000"}', b'{"s": "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}',
    b'{"s": "exp", "d": 1E2, "l": 0}', b'{"s": "frac", "d": 0.1000000000000000055511151231257827}',
    b'{"s": "inf", "d": Infinity}', b'{"s": "-inf", "d": -Infinity}',
]
# Values pyarrow leaves to from_json (refused, or not tried): each one's run is parsed by from_json.
LEFT = [
    b"", b"not json", b"[1, 2]", b" {}", b'{"s": "x"} ', b'{"s": 1}', b'{"s": true}', b'{"s": {"o": 1}}',
    b'{"s": "x", "d": "1.5"}', b'{"s": "x", "d": "NaN"}', b'{"s": "x", "i": 1.0}', b'{"s": "x", "i": 3000000000}',
    b'{"s": "x", "l": 9223372036854775808}', b'{"s": "x", "b": 1}', b'{"s": "x", "s": "y"}', b"{'s': 'x'}",
    b'{"s": "x", "i": 007}', b'{"s": "x",}', b'{"s": "a\tb"}', b'{"s": "\xff\xfe"}', b'{"s": "\\ud800"}',
    b'{"s": "x"}{"s": "y"}', b'{"s": "x"}\n{"s": "y"}', b'{"s": "x", "d": 1e400}',
    b'{"s": "x", "l": 1E2}', b'{"s": "x", "d": .5}',
]


@pytest.fixture
def spark(settings: Settings) -> Any:
    if not settings.spark_remote:
        _unavailable("needs the stack's Spark Connect server (EOSBATCH_SPARK_REMOTE)")
    from eosbatch.engine import connect

    return connect.session(settings)


def _well_formed(n: int) -> bytes:
    return json.dumps({"s": f"v-{n}", "d": n / 8, "i": n, "l": n * 10**10, "b": n % 3 == 0}).encode()


def _values() -> list[bytes | None]:
    values: list[bytes | None] = []
    for awkward in [*TAKEN, *LEFT, None]:
        values += [_well_formed(len(values) + k) for k in range(BLOCK - 1)] + [awkward]
    return values


def _records(spark: Any, values: list[bytes | None]) -> Any:
    """The values as the Kafka readers give records (partition 0, offsets in order)."""
    from eosbatch.spark.kafka_columns import KAFKA_COLUMNS

    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return spark.createDataFrame([(None, v, "awkward", 0, n, at, 0, None) for n, v in enumerate(values)],
                                 KAFKA_COLUMNS)


def test_the_values_meant_to_be_taken_are_taken_and_the_others_left() -> None:
    """pyarrow's side alone, block by block as the corpus lays them out."""
    values = _values()
    for start in range(0, len(values), BLOCK):
        block = values[start:start + BLOCK]
        parsed = json_arrow.parse(pa.array(block, pa.binary()), FIELDS, "_corrupt").to_pylist()
        awkward = block[-1]
        assert (parsed[-1] is not None) == (awkward in TAKEN), awkward


def test_pyarrow_and_from_json_give_the_same_rows_and_the_same_dead_letters(spark, capsys) -> None:

    from eosbatch.spark import reader

    records = _records(spark, _values())
    by: dict[bool, list[str]] = {}
    dead: dict[bool, list[tuple[int, str]]] = {}
    for arrow in (True, False):
        source = KafkaSource(topics=["awkward"], value=Json(SCHEMA, arrow=arrow))
        parsed = reader.parse(records, source)
        capsys.readouterr()
        parsed.explain()
        assert ("eosbatch_json" in capsys.readouterr().out) == arrow  # the Arrow UDF is in the plan, or not
        rows = parsed.drop("timestamp").orderBy("offset").collect()
        by[arrow] = [repr(tuple(r)) for r in rows]  # repr: NaN equals NaN
        dead[arrow] = [(r["offset"], r[reader.ERROR_COLUMN]) for r in rows if r[reader.ERROR_COLUMN] is not None]
    assert len(by[True]) == len(_values())
    assert by[True] == by[False]
    assert dead[True] == dead[False]
    reasons = {reason for _, reason in dead[True]}
    assert len(dead[True]) >= 10, dead[True]
    assert any("missing required field 's'" in r for r in reasons) and any("not a JSON object" in r for r in reasons)
