"""Redriving dead letters, the pure parts: the request as a Selection (eosbatch.protocol.redrive), the batch's
ranges, which dead letters hold an input record, the SQL that chooses them and marks them
(eosbatch.ledger.redrive), the redrive kind's rules, and the CLI's flags."""

from __future__ import annotations

import pytest

from eosbatch import cli_parser
from eosbatch.ledger import redrive as ledger
from eosbatch.protocol.backfill import offset_moves, replay_decision
from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.redrive import (
    DEFAULT_LIMIT,
    DeadLetter,
    InvalidSelection,
    Selection,
    redrivable,
    selection,
    spans,
)
from eosbatch.protocol.states import claims_coverage, lane
from tests.unit.test_unit_sink_sql import render


def test_selection_reads_every_filter_and_combines_them():
    chosen = selection(error_like="missing%", ids=[7, 3, 7], topic="in", partitions=["in:1", "in:0", "in:1"],
                       limit=50, source_topics=["in"])
    assert chosen == Selection(False, "missing%", (3, 7), "in", (("in", 0), ("in", 1)), 50)
    assert selection(everything=True) == Selection(everything=True, limit=DEFAULT_LIMIT)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "say which dead letters to redrive"),
    ({"everything": True, "topic": "in"}, "--all takes no filter"),
    ({"everything": True, "limit": 0}, "--limit must be at least 1"),
    ({"ids": [0]}, "--ids: dead letter ids are positive"),
    ({"topic": "other"}, "'other' is not a source topic"),
    ({"partitions": ["in"]}, "expected TOPIC:PARTITION"),
    ({"partitions": ["other:0"]}, "'other' is not a source topic"),
    ({"error_like": " "}, "an empty pattern"),
])
def test_selection_refuses_a_request_that_says_nothing_or_too_much(kwargs, message):
    with pytest.raises(InvalidSelection, match=message):
        selection(source_topics=["in"], **kwargs)


def test_a_batch_spans_its_dead_letters_per_partition():
    letters = [DeadLetter(1, "in", 0, 40, "e"), DeadLetter(2, "in", 1, 3, "e"), DeadLetter(3, "in", 0, 7, "e")]
    assert spans(letters) == [OffsetRange("in", 0, 7, 41), OffsetRange("in", 1, 3, 4)]


def test_only_dead_letters_holding_an_input_record_are_redrivable():
    assert redrivable(DeadLetter(1, "in", 0, 5, "missing required field 'n'"))
    assert not redrivable(DeadLetter(2, "in", 0, 5, "output record of 2000000 bytes exceeds the output topic's"))
    assert not redrivable(DeadLetter(3, "out", -1, -7000001, "output record of ..."))  # an aggregate's row


def test_the_choice_has_a_condition_per_filter_and_only_unredriven_current_records():
    everything = render(ledger.choose(Selection(everything=True)))
    assert "d.redriven_by IS NULL" in everything and "o.incarnation = d.incarnation" in everything
    assert "NOT starts_with(d.error, %(oversize)s)" in everything and "ORDER BY d.id LIMIT %(limit)s" in everything
    assert "LIKE" not in everything and "ANY" not in everything
    filtered = render(ledger.choose(Selection(error_like="x%", ids=(1,), topic="in", partitions=(("in", 0),))))
    for condition in ("d.error LIKE %(error_like)s", "d.id = ANY(%(ids)s)", "d.topic = %(topic)s",
                      "d.topic || ':' || d.partition = ANY(%(partitions)s)"):
        assert condition in filtered
    params = ledger.choose_params(Selection(partitions=(("in", 0),)), "p", after=12, limit=5)
    assert (params["partitions"], params["after"], params["limit"]) == (["in:0"], 12, 5)


def test_the_read_gives_the_reader_columns_and_the_mark_skips_records_recorded_again():
    read = render(ledger.read_input())
    assert [name for name, _ in ledger.RECORD_COLUMNS] == ["key", "value", "topic", "partition", "offset",
                                                           "timestamp", "timestampType"]
    assert 'd.timestamp_type AS "timestampType"' in read and "r.dead_letter_id %% %(slices)s = %(slice)s" in read
    assert "d.batch_id <> %(batch)s" in ledger.MARK and "d.redriven_by IS NULL" in ledger.MARK


def test_a_redrive_batch_is_in_the_backfill_lane_claims_nothing_moves_nothing():
    assert lane("redrive") == "backfill" and not claims_coverage("redrive")
    ranges = [OffsetRange("in", 0, 3, 9)]
    assert offset_moves("redrive", ranges, {TopicPartition("in", 0): 100}) == ({}, None)
    decided = replay_decision(5, "aborted", "redrive", ranges, [], [])
    assert decided.action == "nothing" and "dead-letters redrive" in decided.reason


def test_the_cli_flags_parse():
    args = cli_parser.parser().parse_args(["dead-letters", "redrive", "p", "--ids", "3,4", "--ids", "9",
                                           "--partition", "in:0", "--error-like", "x%", "--limit", "5",
                                           "--no-publish", "--dry-run", "--json"])
    assert (args.ids, args.partitions, args.error_like, args.limit, args.publish, args.dry_run, args.yes) == \
        ([3, 4, 9], ["in:0"], "x%", 5, False, True, False)
    with pytest.raises(SystemExit):
        cli_parser.parser().parse_args(["dead-letters", "redrive", "p", "--ids", "x"])
