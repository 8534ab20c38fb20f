"""Source changes, decided without I/O (eosbatch.protocol.sources): where new partitions start, when a
source topic changed under the pipeline, what a reset does, and holes vs declared gaps."""

from __future__ import annotations

import pytest

from eosbatch.exceptions import TerminalError
from eosbatch.protocol.exceptions import InvalidRange, ProtocolError
from eosbatch.protocol.ranges import OffsetRange, PartitionBounds, TopicPartition
from eosbatch.protocol.sources import (
    Incarnation,
    Reset,
    SourceTopic,
    check_sources,
    coverage_problems,
    parse_partition,
    parse_target,
    plan_partition_reset,
    plan_topic_reset,
    starting_offsets,
)

pytestmark = pytest.mark.unit

O0, O1, O2, O3 = (TopicPartition("orders", p) for p in range(4))
X0 = TopicPartition("other", 0)
B = PartitionBounds


# ---------------------------------------------------------------- starting offsets

def test_latest_applies_to_the_partitions_a_topic_has_when_the_pipeline_starts_reading_it():
    bounds = {O0: B(0, 100), O1: B(5, 80)}
    assert starting_offsets("latest", bounds, []) == {O0: 100, O1: 80}
    assert starting_offsets("earliest", bounds, []) == {O0: 0, O1: 5}


def test_partitions_added_later_start_at_their_log_start_whatever_starting_offsets_says():
    bounds = {O0: B(0, 100), O1: B(0, 80), O2: B(0, 60), O3: B(3, 40)}
    known = [O0, O1]
    assert starting_offsets("latest", bounds, known) == {O2: 0, O3: 3}
    assert starting_offsets("earliest", bounds, known) == {O2: 0, O3: 3}


def test_a_topic_new_to_the_pipeline_starts_as_configured():
    bounds = {O0: B(0, 100), O2: B(0, 7), X0: B(2, 50)}
    assert starting_offsets("latest", bounds, [O0]) == {O2: 0, X0: 50}


# ---------------------------------------------------------------- the check at every plan

def test_same_topic_id_and_sane_offsets_pass_and_unknown_ids_are_adopted():
    check = check_sources({"orders": SourceTopic("ID-A", 0), "other": SourceTopic(None, 0)},
                          {"orders": "ID-A", "other": "ID-X", "fresh": "ID-F"},
                          {O0: 50, O1: 100, X0: 7}, {O0: B(0, 60), O1: B(0, 100), X0: B(0, 9)})
    assert check.problems == ()
    assert check.adopt == {"other": "ID-X", "fresh": "ID-F"}


def test_a_new_topic_id_stops_the_pipeline_even_when_the_log_end_is_above_the_next_offset():
    check = check_sources({"orders": SourceTopic("ID-A", 0)}, {"orders": "ID-B"}, {O0: 50, O1: 40},
                          {O0: B(0, 350), O1: B(0, 200)})
    assert [p.kind for p in check.problems] == ["new_topic_id"]
    text = check.problems[0].describe("pipe")
    assert "'orders'" in text and "ID-A" in text and "ID-B" in text and "orders:0 50" in text
    assert "eosbatch reset pipe --topic orders --to earliest" in text
    assert check.adopt == {}


def test_retention_past_the_next_offset_names_partition_offsets_and_the_reset():
    check = check_sources({"orders": SourceTopic("ID-A", 0)}, {"orders": "ID-A"}, {O0: 50, O1: 10},
                          {O0: B(0, 60), O1: B(30, 90)})
    [problem] = check.problems
    assert (problem.kind, problem.partition, problem.next_offset, problem.low) == ("retention", 1, 10, 30)
    assert "orders:1: next offset 10" in problem.describe("pipe")
    assert "eosbatch reset pipe --partition orders:1 --to 30" in problem.describe("pipe")


def test_a_log_end_below_the_next_offset_stops_the_pipeline():
    check = check_sources({"orders": SourceTopic("ID-A", 0)}, {"orders": "ID-A"}, {O0: 50}, {O0: B(0, 20)})
    [problem] = check.problems
    assert problem.kind == "log_end_below"
    assert "ends at 20, below the next offset 50" in problem.describe("pipe")
    assert "--partition orders:0 --to 20" in problem.describe("pipe")


def test_a_tracked_partition_that_kafka_lacks_is_a_problem():
    check = check_sources({"orders": SourceTopic("ID-A", 0)}, {"orders": "ID-A"}, {O0: 5, O1: 5}, {O0: B(0, 9)})
    assert [(p.kind, p.partition) for p in check.problems] == [("partition_missing", 1)]


# ---------------------------------------------------------------- resets

def test_parse_target_and_partition():
    assert parse_target("earliest") == "earliest" and parse_target(" Latest ") == "latest"
    assert parse_target("1200") == 1200
    assert parse_partition("orders:3") == O3
    assert parse_partition("a:b:1") == TopicPartition("a:b", 1)
    for bad in ("-1", "soon"):
        with pytest.raises(InvalidRange):
            parse_target(bad)
    for bad in ("orders", "orders:x", ":1"):
        with pytest.raises(InvalidRange):
            parse_partition(bad)


def test_a_forward_reset_declares_the_skipped_offsets():
    reset = plan_partition_reset(O0, Incarnation(0, 10), B(30, 90), "earliest", SourceTopic("ID-A", 0), "ID-A")
    assert reset == Reset("orders", 0, 0, 10, 0, 30, "ID-A", "ID-A")
    assert reset.skipped == OffsetRange("orders", 0, 10, 30)
    assert plan_partition_reset(O0, Incarnation(2, 10), B(0, 90), 50, SourceTopic("ID-A", 2), "ID-A").skipped == \
        OffsetRange("orders", 0, 10, 50)


def test_a_reset_outside_what_kafka_holds_or_to_where_it_is_is_refused():
    topic = SourceTopic("ID-A", 0)
    with pytest.raises(InvalidRange, match="outside what Kafka holds"):
        plan_partition_reset(O0, Incarnation(0, 10), B(30, 90), 20, topic, "ID-A")
    with pytest.raises(InvalidRange, match="outside"):
        plan_partition_reset(O0, Incarnation(0, 10), B(30, 90), 91, topic, "ID-A")
    with pytest.raises(ProtocolError, match="already"):
        plan_partition_reset(O0, Incarnation(0, 30), B(30, 90), "earliest", topic, "ID-A")
    with pytest.raises(InvalidRange, match="does not read"):
        plan_partition_reset(O2, None, B(0, 9), 0, topic, "ID-A")


def test_moving_back_over_committed_records_is_refused():
    with pytest.raises(ProtocolError, match="process them twice"):
        plan_partition_reset(O0, Incarnation(0, 50), B(0, 90), 0, SourceTopic("ID-A", 0), "ID-A")


def test_moving_back_where_the_log_went_back_starts_a_new_incarnation():
    reset = plan_partition_reset(O0, Incarnation(0, 50), B(0, 20), 20, SourceTopic("ID-A", 3), "ID-A")
    assert (reset.from_incarnation, reset.from_offset, reset.to_incarnation, reset.to_offset) == (0, 50, 4, 20)
    assert reset.skipped is None


def test_a_partition_reset_of_a_recreated_topic_asks_to_accept_the_topic_first():
    with pytest.raises(ProtocolError, match="--topic orders"):
        plan_partition_reset(O0, Incarnation(0, 50), B(0, 400), 0, SourceTopic("ID-A", 0), "ID-B")


def test_accepting_a_recreated_topic_starts_a_new_incarnation_for_every_partition():
    where = {O0: Incarnation(0, 50), O1: Incarnation(1, 40), O2: Incarnation(0, 9), X0: Incarnation(0, 3)}
    change = plan_topic_reset("orders", SourceTopic("ID-A", 1), "ID-B", where,
                              {O0: B(0, 300), O1: B(2, 200), X0: B(0, 3)}, "earliest")
    assert (change.topic_id, change.incarnation) == ("ID-B", 2)
    assert change.starts == {O0: 0, O1: 2}
    assert [(r.partition, r.from_incarnation, r.from_offset, r.to_incarnation, r.from_topic_id, r.to_topic_id)
            for r in change.resets] == [(0, 0, 50, 2, "ID-A", "ID-B"), (1, 1, 40, 2, "ID-A", "ID-B"),
                                        (2, 0, 9, 2, "ID-A", "ID-B")]
    assert change.dropped == (O2,)
    latest = plan_topic_reset("orders", SourceTopic("ID-A", 1), "ID-B", where, {O0: B(0, 300), O1: B(2, 200)},
                              "latest")
    assert latest.starts == {O0: 300, O1: 200}


def test_accepting_a_topic_whose_id_did_not_change_or_at_an_offset_is_refused():
    with pytest.raises(ProtocolError, match="still has topic ID"):
        plan_topic_reset("orders", SourceTopic("ID-A", 0), "ID-A", {O0: Incarnation(0, 5)}, {O0: B(0, 9)}, "earliest")
    with pytest.raises(InvalidRange, match="earliest or latest"):
        plan_topic_reset("orders", SourceTopic("ID-A", 0), "ID-B", {O0: Incarnation(0, 5)}, {O0: B(0, 9)}, 3)


def test_source_errors_are_terminal():
    assert issubclass(ProtocolError, TerminalError)
    from eosbatch.protocol.exceptions import SourceChanged

    assert issubclass(SourceChanged, TerminalError)


# ---------------------------------------------------------------- holes vs declared gaps

def R(start: int, end: int, partition: int = 0) -> OffsetRange:
    return OffsetRange("orders", partition, start, end)


def test_contiguous_coverage_up_to_the_next_offset_has_no_problem():
    assert coverage_problems([(0, R(0, 10)), (0, R(10, 25))], {O0: Incarnation(0, 25)}, []) == {}


def test_a_hole_is_reported_and_a_declared_gap_is_not():
    covered = [(0, R(0, 10)), (0, R(30, 40))]
    assert coverage_problems(covered, {O0: Incarnation(0, 40)}, []) == {"orders:0": [R(0, 10), R(30, 40)]}
    skip = Reset("orders", 0, 0, 10, 0, 30, "ID-A", "ID-A")
    assert coverage_problems(covered, {O0: Incarnation(0, 40)}, [skip]) == {}


def test_each_incarnation_is_checked_up_to_where_the_pipeline_left_it():
    moved = Reset("orders", 0, 0, 50, 1, 0, "ID-A", "ID-B")
    covered = [(0, R(0, 50)), (1, R(0, 20))]
    assert coverage_problems(covered, {O0: Incarnation(1, 20)}, [moved]) == {}
    # the old incarnation ending short of where the reset left it is a hole, named with its incarnation
    short = [(0, R(0, 40)), (1, R(0, 20))]
    assert coverage_problems(short, {O0: Incarnation(1, 20)}, [moved]) == {"orders:0#0": [R(0, 40)]}
    # the new incarnation short of the next offset
    assert coverage_problems([(0, R(0, 50)), (1, R(0, 10))], {O0: Incarnation(1, 20)}, [moved]) == \
        {"orders:0": [R(0, 10)]}
