"""Batch states, their transitions, and the recovery decisions (eosbatch.protocol.states / recovery)."""

from __future__ import annotations

import itertools

import pytest

from eosbatch.exceptions import TerminalError
from eosbatch.protocol.exceptions import IllegalTransition
from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.recovery import publish_action, recovery_action
from eosbatch.protocol.states import ABORTABLE, STATES, TRANSITIONS, can_transition, check_transition

pytestmark = pytest.mark.unit

ALLOWED = {
    ("planned", "staged"),
    ("staged", "committed"),
    ("committed", "published"),
    ("planned", "aborted"),
    ("staged", "aborted"),
}


def test_the_states_are_exactly_the_five_of_the_protocol() -> None:
    assert set(STATES) == {"planned", "staged", "committed", "published", "aborted"}
    assert set(TRANSITIONS) == set(STATES)


def test_transition_table() -> None:
    for state, target in itertools.product(STATES, repeat=2):
        assert can_transition(state, target) is ((state, target) in ALLOWED), (state, target)


@pytest.mark.parametrize("state", ["published", "aborted"])
def test_final_states_have_no_way_out(state: str) -> None:
    assert TRANSITIONS[state] == frozenset()  # type: ignore[index]


def test_committed_can_never_become_aborted() -> None:
    with pytest.raises(IllegalTransition, match=r"batch 42 is committed; it cannot become aborted") as info:
        check_transition(42, "committed", "aborted")
    assert isinstance(info.value, TerminalError)


def test_check_transition_refuses_skips_and_resurrections() -> None:
    for state, target in [("planned", "committed"), ("staged", "published"), ("published", "committed"),
                          ("aborted", "planned"), ("published", "aborted")]:
        with pytest.raises(IllegalTransition, match=rf"batch 7 is {state}; it cannot become {target}"):
            check_transition(7, state, target)  # type: ignore[arg-type]


def test_check_transition_allows_the_protocol_steps() -> None:
    for state, target in sorted(ALLOWED):
        assert check_transition(1, state, target) is None  # type: ignore[arg-type]


def test_recovery_action_per_state() -> None:
    expected = {"planned": "abort", "staged": "abort", "committed": "roll_forward",
                "published": "none", "aborted": "none"}
    assert {state: recovery_action(state) for state in STATES} == expected


def test_recovery_aborts_exactly_the_abortable_states() -> None:
    assert {s for s in STATES if recovery_action(s) == "abort"} == set(ABORTABLE)
    assert all(can_transition(s, "aborted") for s in ABORTABLE)


T0, T1 = TopicPartition("in", 0), TopicPartition("in", 1)
RANGES = [OffsetRange("in", 0, 0, 10), OffsetRange("in", 1, 5, 20)]


def test_publish_action_produces_unless_every_marker_reaches_the_end() -> None:
    for marker in [
        {},  # no marker at all: never published
        {T0: 10},  # one partition's marker missing
        {T0: 10, T1: None},  # a partition without a committed offset
        {T0: 10, T1: 19},  # one partition below its range end
        {T0: 9, T1: 20},
        {T0: 10, T1: 5},  # at the range start: an older batch's marker
    ]:
        assert publish_action(RANGES, marker) == "produce", marker


def test_publish_action_finalizes_only_when_all_markers_are_at_or_past_the_end() -> None:
    assert publish_action(RANGES, {T0: 10, T1: 20}) == "finalize_only"
    assert publish_action(RANGES, {T0: 11, T1: 300, TopicPartition("other", 0): 0}) == "finalize_only"
