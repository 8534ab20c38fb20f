"""Backfill and replay decisions (eosbatch.protocol.backfill) and the progress bar's arithmetic, without I/O."""

from __future__ import annotations

import io
import random

import pytest

from eosbatch.progress import Progress, format_duration, render
from eosbatch.protocol.backfill import (
    below,
    intersect,
    offset_moves,
    parse_range,
    plan_backfill,
    replay_decision,
)
from eosbatch.protocol.exceptions import InvalidRange
from eosbatch.protocol.ranges import OffsetRange, PartitionBounds, TopicPartition

pytestmark = pytest.mark.unit

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
BOUNDS = {A0: PartitionBounds(0, 1000), A1: PartitionBounds(100, 500)}


def R(tp: TopicPartition, start: int, end: int) -> OffsetRange:
    return OffsetRange(tp.topic, tp.partition, start, end)


def offsets(ranges) -> set[tuple[str, int, int]]:
    return {(r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)}


@pytest.mark.parametrize(("text", "expected"), [
    ("orders:0:0-100", R(TopicPartition("orders", 0), 0, 100)),
    (" my.topic-x_1:12:5-6 ", R(TopicPartition("my.topic-x_1", 12), 5, 6)),
])
def test_parse_range_reads_topic_partition_start_end(text, expected):
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", ["orders:0:100-100", "orders:0:200-100", "orders:0:1", "orders:x:1-2",
                                  "orders:0:-1-5", "orders:0:1-2\n3", ""])
def test_parse_range_refuses_malformed_or_empty_ranges(text):
    with pytest.raises(InvalidRange):
        parse_range(text)


def test_intersect_and_below_match_the_offset_set_model():
    rng = random.Random(5)
    for _ in range(300):
        a = [R(A0, s, s + rng.randint(1, 9)) for s in rng.sample(range(50), 4)]
        b = [R(A0, s, s + rng.randint(1, 9)) for s in rng.sample(range(50), 4)]
        assert offsets(intersect(a, b)) == offsets(a) & offsets(b)
        limit = rng.randint(0, 60)
        assert offsets(below(a, {A0: limit})) == {o for o in offsets(a) if o[2] < limit}


def test_fill_plans_only_holes_below_the_next_offset_and_names_the_rest():
    plan = plan_backfill([R(A0, 0, 1000)], BOUNDS, {A0: 800}, committed=[R(A0, 200, 300), R(A0, 500, 800)],
                         in_flight=[R(A0, 100, 150)], mode="fill", max_records=150)
    assert plan.regular == (R(A0, 800, 1000),)
    assert set(plan.skipped) == {R(A0, 200, 300), R(A0, 500, 800)}
    assert plan.in_flight == (R(A0, 100, 150),)
    work = [r for b in plan.batches for r in b]
    assert offsets(work) == offsets([R(A0, 0, 100), R(A0, 150, 200), R(A0, 300, 500)])
    assert all(sum(r.size for r in b) <= 150 for b in plan.batches)
    assert all(len({r.tp for r in b}) == len(b) for b in plan.batches), "one range per partition per batch"


def test_fill_asked_again_after_it_ran_plans_nothing():
    first = plan_backfill([R(A0, 0, 700), R(A1, 100, 400)], BOUNDS, {A0: 700, A1: 400}, [], [], "fill", 250)
    committed = [r for b in first.batches for r in b]
    again = plan_backfill([R(A0, 0, 700), R(A1, 100, 400)], BOUNDS, {A0: 700, A1: 400}, committed, [], "fill", 250)
    assert again.batches == () and again.offsets == 0


def test_reprocess_runs_committed_parts_only():
    plan = plan_backfill([R(A0, 0, 600)], BOUNDS, {A0: 600}, committed=[R(A0, 0, 100), R(A0, 300, 600)],
                         in_flight=[], mode="reprocess", max_records=1000)
    assert offsets(r for b in plan.batches for r in b) == offsets([R(A0, 0, 100), R(A0, 300, 600)])
    assert plan.skipped == (R(A0, 100, 300),)


@pytest.mark.parametrize(("request_", "message"), [
    ([R(A0, 0, 1001)], "past the last stable offset 1000"),
    ([R(A1, 50, 200)], "deleted by retention"),
    ([R(TopicPartition("a", 7), 0, 10)], "no such topic/partition"),
    ([R(A0, 10, 10)], "start must be below end"),
    ([R(A0, 0, 100), R(A0, 50, 150)], "overlaps"),
])
def test_bad_requests_name_the_partition_and_what_exists(request_, message):
    with pytest.raises(InvalidRange, match=message) as error:
        plan_backfill(request_, BOUNDS, {A0: 0, A1: 100}, [], [], "fill", 100)
    assert str(request_[-1].tp) in str(error.value)


def test_offset_moves_per_kind():
    expected = {A0: 500, A1: 200}
    assert offset_moves("regular", [R(A0, 500, 600)], expected) == ({A0: 600}, None)
    assert offset_moves("regular", [R(A0, 400, 500)], expected).problem  # behind: a duplicate run
    assert offset_moves("backfill", [R(A0, 0, 500), R(A1, 0, 100)], expected) == ({}, None)  # holes
    assert offset_moves("replay", [R(A0, 500, 700)], expected) == ({A0: 700}, None)  # the regular lane's last
    assert offset_moves("backfill", [R(A0, 450, 550)], expected).problem  # straddles the next offset
    assert offset_moves("reprocess", [R(A0, 450, 9999)], expected) == ({}, None)
    assert offset_moves("backfill", [R(TopicPartition("z", 0), 0, 1)], expected).problem


@pytest.mark.parametrize(("state", "committed", "in_flight", "action", "ranges"), [
    ("published", [], [], "nothing", ()),
    ("committed", [], [], "publish", ()),
    ("staged", [], [], "nothing", ()),
    ("aborted", [], [], "replay", (R(A0, 0, 100), R(A1, 100, 200))),
    ("aborted", [R(A0, 0, 100), R(A1, 100, 200)], [], "nothing", ()),          # superseded
    ("aborted", [R(A0, 0, 60)], [], "replay", (R(A0, 60, 100), R(A1, 100, 200))),  # partly superseded
    ("aborted", [], [R(A0, 0, 100)], "nothing", ()),                            # re-planned, in flight
])
def test_replay_decision_follows_design(state, committed, in_flight, action, ranges):
    decision = replay_decision(7, state, "regular", [R(A0, 0, 100), R(A1, 100, 200)], committed, in_flight)
    assert (decision.action, decision.ranges) == (action, ranges)
    assert "batch 7" in decision.reason


def test_progress_bar_text_and_silence_off_terminal():
    line = render(done=250, total=1000, records=200, elapsed=10.0, width=10)
    assert "[##........] 250/1,000 offsets" in line and "20 rec/s" in line and "ETA 0:30" in line
    assert "ETA ?" in render(0, 1000, 0, 0.0)
    assert format_duration(3725) == "1:02:05"
    quiet = io.StringIO()
    bar = Progress(100, stream=quiet)  # StringIO is not a terminal
    bar.advance(50, 40)
    bar.close()
    assert quiet.getvalue() == "" and bar.done == 50


def test_map_batches_one_instance_per_batch_when_they_fit() -> None:
    from eosbatch.protocol.backfill import map_batches

    batches = [(OffsetRange("t", 0, 0, 10),), (OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 0, 5))]
    mapped = map_batches(batches, 1024)
    assert [(m.first, m.last, m.of, m.ranges) for m in mapped] == [(1, 1, 2, batches[0]), (2, 2, 2, batches[1])]
    assert mapped[1].label() == "batch 2/2: t:0:10-20, t:1:0-5"
    assert map_batches([], 1024) == []


def test_map_batches_groups_consecutive_batches_beyond_max_map_length() -> None:
    from eosbatch.protocol.backfill import map_batches

    batches = [(OffsetRange("t", 0, i * 10, i * 10 + 10),) for i in range(7)]
    mapped = map_batches(batches, 3)
    assert [(m.first, m.last) for m in mapped] == [(1, 3), (4, 6), (7, 7)]
    assert mapped[0].ranges == (OffsetRange("t", 0, 0, 30),)  # merged: the instance plans them again
    assert mapped[0].label() == "batches 1-3/7: t:0:0-30"
    assert len(mapped[0].label(width=12)) == 12 and mapped[0].label(width=12).endswith("\u2026")
    with pytest.raises(InvalidRange):
        map_batches(batches, 0)
