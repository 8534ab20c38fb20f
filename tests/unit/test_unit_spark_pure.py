"""The pure parts of the Spark side: COPY text encoding of staging rows and the connector's offset options."""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from eosbatch.exceptions import EosbatchError
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.spark.reader import offsets_json
from eosbatch.spark.staging import _text

pytestmark = pytest.mark.unit

ESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def decode(field: str) -> str | None:
    """PostgreSQL's reading of one COPY text field (for the escapes _text writes)."""
    if field == "\\N":
        return None
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\":
            out.append(ESCAPES[field[i + 1]])
            i += 2
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def test_text_scalars() -> None:
    assert _text(None) == "\\N"
    assert (_text(True), _text(False)) == ("t", "f")  # bool before int: never 1/0
    assert (_text(0), _text(-17), _text(1.5), _text(Decimal("10.50"))) == ("0", "-17", "1.5", "10.50")
    assert _text(date(2024, 2, 29)) == "2024-02-29"
    assert _text(datetime(2024, 1, 2, 3, 4, 5, 600, tzinfo=UTC)) == "2024-01-02T03:04:05.000600+00:00"


def test_text_escapes_separators_and_backslashes() -> None:
    assert _text("plain text") == "plain text"
    assert _text("a\tb\nc\rd") == "a\\tb\\nc\\rd"
    assert _text("C:\\dir") == "C:\\\\dir"
    assert _text("\\N") == "\\\\N"  # the string \N is not NULL
    assert _text("\\t") == "\\\\t"  # a backslash then t stays two characters


def test_text_bytes_as_escaped_bytea_hex() -> None:
    assert _text(b"\x00\xffA") == "\\\\x00ff41"
    assert _text(bytearray(b"\x10")) == "\\\\x10"
    assert decode(_text(b"\x00\xff")) == "\\x00ff"  # what bytea's input function then reads as hex


def test_text_round_trips_random_strings_and_never_emits_raw_separators() -> None:
    rng = random.Random(5)
    alphabet = "ab\\\t\n\rN x\u00e9"
    for _ in range(500):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        encoded = _text(value)
        assert not set(encoded) & {"\t", "\n", "\r"}, repr(value)
        assert decode(encoded) == value, repr(value)


def test_offsets_json_builds_assign_starting_and_ending_offsets() -> None:
    ranges = [OffsetRange("orders", 0, 10, 20), OffsetRange("orders", 2, 0, 5),
              OffsetRange("refunds", 1, 7, 9)]
    assign, starts, ends = offsets_json(ranges)
    assert json.loads(assign) == {"orders": [0, 2], "refunds": [1]}
    assert json.loads(starts) == {"orders": {"0": 10, "2": 0}, "refunds": {"1": 7}}
    assert json.loads(ends) == {"orders": {"0": 20, "2": 5}, "refunds": {"1": 9}}


def test_offsets_json_of_nothing() -> None:
    assert offsets_json([]) == ("{}", "{}", "{}")


def test_offsets_json_refuses_two_ranges_of_one_partition() -> None:
    with pytest.raises((ValueError, EosbatchError)):
        offsets_json([OffsetRange("orders", 0, 0, 40), OffsetRange("orders", 0, 60, 100)])
