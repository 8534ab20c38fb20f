"""Range planning, merging, subtraction, splitting and request validation (eosbatch.protocol.ranges)."""

from __future__ import annotations

import random

import pytest

from eosbatch.exceptions import TerminalError
from eosbatch.protocol.exceptions import InvalidRange
from eosbatch.protocol.ranges import (
    OffsetRange,
    PartitionBounds,
    TopicPartition,
    after_in_flight,
    merge,
    plan_next,
    share_budget,
    split,
    subtract,
    summarize,
    validate_request,
)

pytestmark = pytest.mark.unit

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
TPS = [A0, A1, B0, TopicPartition("b", 3)]


def R(tp: TopicPartition, start: int, end: int) -> OffsetRange:
    return OffsetRange(tp.topic, tp.partition, start, end)


def offsets(ranges: list[OffsetRange]) -> set[tuple[str, int, int]]:
    """The brute-force model: a set of ranges as the set of offsets they hold."""
    return {(r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)}


def random_ranges(rng: random.Random, count: int, top: int = 40) -> list[OffsetRange]:
    out = []
    for _ in range(count):
        start = rng.randrange(top)
        out.append(R(rng.choice(TPS), start, start + rng.randint(1, 12)))
    return out


def assert_canonical(ranges: list[OffsetRange]) -> None:
    """Sorted, non-empty, and per partition neither overlapping nor adjacent."""
    assert ranges == sorted(ranges)
    for r in ranges:
        assert r.start < r.end, r
    for left, right in zip(ranges, ranges[1:], strict=False):
        if left.tp == right.tp:
            assert left.end < right.start, (left, right)


# --- share_budget -------------------------------------------------------------------------------------------


def test_share_budget_serves_small_lags_whole_and_shares_the_rest_equally() -> None:
    shares = share_budget({A0: 5, A1: 1000, B0: 1000}, 105)
    assert shares == {A0: 5, A1: 50, B0: 50}


def test_share_budget_gives_every_lag_when_the_budget_covers_all() -> None:
    assert share_budget({A0: 3, A1: 7}, 1000) == {A0: 3, A1: 7}


def test_share_budget_remainder_goes_one_each_and_total_is_exact() -> None:
    shares = share_budget({A0: 100, A1: 100, B0: 100}, 10)
    assert sorted(shares.values()) == [3, 3, 4]
    assert sum(shares.values()) == 10


def test_share_budget_omits_partitions_without_lag() -> None:
    assert share_budget({A0: 0, A1: 4}, 10) == {A1: 4}


def test_share_budget_refuses_a_non_positive_budget() -> None:
    for budget in (0, -5):
        with pytest.raises(ValueError, match="budget"):
            share_budget({A0: 10}, budget)


def test_share_budget_water_filling_properties_over_random_inputs() -> None:
    rng = random.Random(20240601)
    for _ in range(500):
        tps = [TopicPartition(f"t{i % 3}", i) for i in range(rng.randint(1, 8))]
        lags = {tp: rng.choice([0, rng.randint(1, 10), rng.randint(1, 5000)]) for tp in tps}
        budget = rng.randint(1, 6000)
        shares = share_budget(lags, budget)
        assert sum(shares.values()) == min(budget, sum(lags.values())), (lags, budget, shares)
        for tp, n in shares.items():
            assert 0 < n <= lags[tp], (lags, budget, shares)
        for tp, n in shares.items():
            if n < lags[tp]:  # cut short: then nobody may get more than one record above it (max-min fair)
                assert all(other <= n + 1 for other in shares.values()), (lags, budget, shares)
        for tp, lag in lags.items():
            if lag and tp not in shares:  # left out entirely only when the budget is smaller than the crowd
                assert all(n == 1 for n in shares.values()), (lags, budget, shares)


# --- plan_next ----------------------------------------------------------------------------------------------


def test_plan_next_starts_at_next_offsets_and_stops_at_the_lso() -> None:
    plan = plan_next({A0: 10, A1: 0}, {A0: PartitionBounds(0, 15), A1: PartitionBounds(0, 4)}, 1000)
    assert plan == [R(A0, 10, 15), R(A1, 0, 4)]


def test_plan_next_respects_max_records_across_partitions() -> None:
    plan = plan_next({A0: 0, A1: 100}, {A0: PartitionBounds(0, 1000), A1: PartitionBounds(0, 1000)}, 10)
    assert plan == [R(A0, 0, 5), R(A1, 100, 105)]


def test_plan_next_is_empty_when_caught_up() -> None:
    assert plan_next({A0: 15, A1: 4}, {A0: PartitionBounds(0, 15), A1: PartitionBounds(2, 4)}, 100) == []


def test_plan_next_leaves_out_partitions_without_lag() -> None:
    plan = plan_next({A0: 15, A1: 1}, {A0: PartitionBounds(0, 15), A1: PartitionBounds(0, 4)}, 100)
    assert plan == [R(A1, 1, 4)]


def test_plan_next_refuses_a_next_offset_deleted_by_retention_naming_the_partition() -> None:
    with pytest.raises(InvalidRange, match=r"a:1: next offset 3 .*log starts at 7") as info:
        plan_next({A0: 0, A1: 3}, {A0: PartitionBounds(0, 10), A1: PartitionBounds(7, 10)}, 100)
    assert isinstance(info.value, TerminalError)


def test_plan_next_refuses_an_unknown_partition_naming_it() -> None:
    with pytest.raises(InvalidRange, match=r"b:0"):
        plan_next({A0: 0, B0: 0}, {A0: PartitionBounds(0, 10)}, 100)


def test_plan_next_never_plans_past_the_lso_over_random_inputs() -> None:
    rng = random.Random(7)
    for _ in range(300):
        tps = rng.sample(TPS, rng.randint(1, len(TPS)))
        bounds, next_offsets = {}, {}
        for tp in tps:
            low = rng.randint(0, 50)
            stable = low + rng.randint(0, 200)
            bounds[tp] = PartitionBounds(low, stable)
            next_offsets[tp] = rng.randint(low, stable)
        max_records = rng.randint(1, 300)
        plan = plan_next(next_offsets, bounds, max_records)
        assert plan == sorted(plan)
        assert len({r.tp for r in plan}) == len(plan)
        for r in plan:
            assert r.start == next_offsets[r.tp]
            assert r.start < r.end <= bounds[r.tp].stable
        lag = sum(b.stable - next_offsets[tp] for tp, b in bounds.items())
        assert sum(r.size for r in plan) == min(max_records, lag)


# --- merge --------------------------------------------------------------------------------------------------


def test_merge_joins_adjacent_and_overlapping_ranges_of_one_partition_only() -> None:
    merged = merge([R(A0, 5, 10), R(A1, 10, 12), R(A0, 0, 5), R(A0, 8, 20), R(A0, 30, 31)])
    assert merged == [R(A0, 0, 20), R(A0, 30, 31), R(A1, 10, 12)]


def test_merge_keeps_a_contained_range_inside() -> None:
    assert merge([R(A0, 0, 100), R(A0, 10, 20)]) == [R(A0, 0, 100)]


def test_merge_random_property_against_offset_sets() -> None:
    rng = random.Random(11)
    for _ in range(300):
        ranges = random_ranges(rng, rng.randint(0, 10))
        merged = merge(ranges)
        assert offsets(merged) == offsets(ranges)
        assert_canonical(merged)


# --- subtract -----------------------------------------------------------------------------------------------


def test_subtract_leaves_the_holes() -> None:
    wanted = [R(A0, 0, 100)]
    covered = [R(A0, 10, 20), R(A0, 50, 60), R(A1, 0, 100)]
    assert subtract(wanted, covered) == [R(A0, 0, 10), R(A0, 20, 50), R(A0, 60, 100)]


def test_subtract_of_fully_covered_is_empty_and_of_nothing_is_everything() -> None:
    assert subtract([R(A0, 10, 20)], [R(A0, 0, 15), R(A0, 15, 30)]) == []
    assert subtract([R(A0, 10, 20), R(A0, 15, 25)], []) == [R(A0, 10, 25)]


def test_subtract_ignores_coverage_of_other_partitions_and_topics() -> None:
    assert subtract([R(A0, 0, 10)], [R(A1, 0, 10), R(TopicPartition("b", 0), 0, 10)]) == [R(A0, 0, 10)]


def test_subtract_asking_twice_gives_nothing() -> None:
    wanted = [R(A0, 0, 100), R(B0, 5, 9)]
    covered = [R(A0, 10, 20), R(A0, 90, 200)]
    holes = subtract(wanted, covered)
    assert holes  # the first request does have work
    assert subtract(wanted, covered + holes) == []


def test_subtract_random_property_against_a_set_of_offsets_model() -> None:
    rng = random.Random(1234)
    for _ in range(500):
        wanted = random_ranges(rng, rng.randint(0, 6))
        covered = random_ranges(rng, rng.randint(0, 6))
        holes = subtract(wanted, covered)
        assert offsets(holes) == offsets(wanted) - offsets(covered), (wanted, covered, holes)
        assert_canonical(holes)
        assert subtract(wanted, covered + holes) == []


# --- split --------------------------------------------------------------------------------------------------


def test_split_cuts_ranges_at_the_batch_size_and_spreads_each_batch_over_partitions() -> None:
    batches = split([R(A0, 0, 25), R(A1, 0, 3)], 10)
    assert batches == [[R(A0, 0, 7), R(A1, 0, 3)], [R(A0, 7, 17)], [R(A0, 17, 25)]]
    assert split([R(A0, 0, 100), R(A1, 0, 100), R(B0, 0, 100)], 30)[0] == [R(A0, 0, 10), R(A1, 0, 10),
                                                                              R(B0, 0, 10)]


def test_split_of_nothing_is_no_batches() -> None:
    assert split([], 10) == []


def test_split_refuses_a_non_positive_size() -> None:
    for max_records in (0, -1):
        with pytest.raises(ValueError, match="max_records"):
            split([R(A0, 0, 5)], max_records)


def test_split_random_property_batches_bounded_and_cover_exactly_the_input() -> None:
    rng = random.Random(99)
    for _ in range(300):
        ranges = merge(random_ranges(rng, rng.randint(0, 8), top=200))
        max_records = rng.randint(1, 40)
        batches = split(ranges, max_records)
        for batch in batches:
            assert batch
            assert sum(r.size for r in batch) <= max_records
            assert all(r.start < r.end for r in batch)
        ends = {(r.tp, r.end) for r in ranges}
        for batch in batches:
            assert len({r.tp for r in batch}) == len(batch)  # one range per partition per batch
            if sum(r.size for r in batch) < max_records:  # short only when it took each range it touched
                assert all((r.tp, r.end) in ends for r in batch)  # to that range's end
        flat = [r for batch in batches for r in batch]
        assert sum(r.size for r in flat) == sum(r.size for r in ranges)
        assert merge(flat) == ranges


def test_split_never_puts_two_ranges_of_one_partition_in_a_batch() -> None:
    holes = subtract([R(A0, 0, 100)], [R(A0, 40, 60)])
    for batch in split(holes, 1000):
        assert len({r.tp for r in batch}) == len(batch), batch


# --- validate_request ---------------------------------------------------------------------------------------

BOUNDS = {A0: PartitionBounds(10, 50), A1: PartitionBounds(0, 30)}


def test_validate_request_accepts_available_and_adjacent_ranges() -> None:
    assert validate_request([R(A0, 10, 20), R(A0, 20, 50), R(A1, 0, 30)], BOUNDS) is None


def test_validate_request_refuses_start_not_below_end() -> None:
    for start, end in ((20, 20), (30, 20)):
        with pytest.raises(InvalidRange, match=rf"a:0:{start}-{end}: start must be below end"):
            validate_request([R(A0, start, end)], BOUNDS)


def test_validate_request_refuses_an_unknown_partition_naming_the_known_ones() -> None:
    with pytest.raises(InvalidRange, match=r"a:7:0-5: no such topic/partition \(known: a:0, a:1\)"):
        validate_request([R(TopicPartition("a", 7), 0, 5)], BOUNDS)


def test_validate_request_refuses_an_unknown_topic() -> None:
    with pytest.raises(InvalidRange, match=r"zz:0:0-5: no such topic/partition .*none of that topic"):
        validate_request([R(TopicPartition("zz", 0), 0, 5)], BOUNDS)


def test_validate_request_refuses_offsets_below_the_log_start_naming_what_is_available() -> None:
    with pytest.raises(InvalidRange, match=r"a:0:5-20: .*below 10 .*available 10-50"):
        validate_request([R(A0, 5, 20)], BOUNDS)


def test_validate_request_refuses_offsets_past_the_lso_naming_what_is_available() -> None:
    with pytest.raises(InvalidRange, match=r"a:1:10-31: .*last stable offset 30 .*available 0-30"):
        validate_request([R(A1, 10, 31)], BOUNDS)


def test_validate_request_refuses_overlapping_ranges_in_one_request_naming_both() -> None:
    with pytest.raises(InvalidRange, match=r"a:0:19-30: overlaps a:0:10-20"):
        validate_request([R(A0, 10, 20), R(A1, 19, 30), R(A0, 19, 30)], BOUNDS)


def test_after_in_flight_starts_past_the_runners_batches_not_yet_committed() -> None:
    ledger = {TopicPartition("t", 0): 100, TopicPartition("t", 1): 50, TopicPartition("t", 2): 7}
    in_flight = [OffsetRange("t", 0, 100, 150), OffsetRange("t", 1, 50, 60),   # batch N-1
                 OffsetRange("t", 0, 150, 170)]                                # batch N: partition 1 caught up
    assert after_in_flight(ledger, in_flight) == {TopicPartition("t", 0): 170, TopicPartition("t", 1): 60,
                                                  TopicPartition("t", 2): 7}
    assert after_in_flight(ledger, []) == ledger


@pytest.mark.parametrize("stray", [OffsetRange("t", 0, 90, 120),    # behind the ledger: already committed
                                   OffsetRange("t", 0, 120, 130),   # a hole before it
                                   OffsetRange("u", 0, 0, 10)])     # a partition the ledger does not track
def test_after_in_flight_refuses_ranges_that_do_not_continue_the_ledger(stray: OffsetRange) -> None:
    with pytest.raises(InvalidRange, match=str(stray)):
        after_in_flight({TopicPartition("t", 0): 100}, [stray])


def test_a_plan_of_a_few_ranges_is_logged_range_by_range():
    assert summarize([OffsetRange("a", 0, 5, 9), OffsetRange("a", 1, 0, 3)]) == "a:0:5-9, a:1:0-3"


def test_a_plan_of_a_thousand_partitions_is_one_short_line():
    plan = [OffsetRange("orders", p, 100, 120) for p in range(1000)] + [OffsetRange("refunds", 0, 0, 7)]
    line = summarize(plan)
    assert line == ("1001 ranges (orders: 1000 partitions, 20000 offsets; refunds: 1 partitions, 7 offsets), "
                    "from orders:0:100-120, orders:1:100-120, orders:2:100-120, …")
    assert len(line) < 200
