"""Batch states, their transitions, and the recovery decisions (eosbatch.protocol.states / recovery)."""

from __future__ import annotations

import itertools

import pytest

from eosbatch.exceptions import TerminalError
from eosbatch.protocol.exceptions import IllegalTransition
from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.recovery import MarkerEntry, marked_batch, marker_metadata, publish_action, recovery_action
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


def _entries(offsets: dict, metadata: str = "") -> dict:
    return {tp: MarkerEntry(o, metadata) for tp, o in offsets.items()}


OURS = marker_metadata(7)


def test_marker_metadata_names_its_batch() -> None:
    assert marked_batch(marker_metadata(7)) == 7
    assert marked_batch("") is None and marked_batch("eosbatch batch x") is None and marked_batch("7") is None


def test_publish_action_produces_unless_a_marker_names_the_batch() -> None:
    for marker in [
        {},  # no marker at all: never published
        _entries({T0: 10, T1: None}),
        _entries({T0: 10, T1: 20}),  # at the ends, but no metadata: after a reset this can be another batch
        _entries({T0: 10, T1: 20}, marker_metadata(6)),  # the lane's previous batch
        _entries({T0: 10, T1: 20}, marker_metadata(70)),
        {T0: MarkerEntry(None, OURS)},  # metadata without an offset is no commit
    ]:
        assert publish_action(7, RANGES, marker) == "produce", marker


def test_publish_action_finalizes_only_when_the_marker_names_the_batch() -> None:
    assert publish_action(7, RANGES, _entries({T0: 10, T1: 20}, OURS)) == "finalize_only"
    # one partition named is proof enough: a transaction's offsets commit together
    mixed = {T0: MarkerEntry(10, OURS), T1: MarkerEntry(40, marker_metadata(8))}
    assert publish_action(7, RANGES, mixed) == "finalize_only"


def test_publish_action_legacy_batches_fall_back_to_offsets() -> None:
    """A batch committed before markers named batches: at or past every end (no metadata) means published."""
    assert publish_action(7, RANGES, _entries({T0: 10, T1: 20}), legacy=True) == "finalize_only"
    assert publish_action(7, RANGES, _entries({T0: 11, T1: 300}), legacy=True) == "finalize_only"
    for marker in [{}, _entries({T0: 10}), _entries({T0: 10, T1: 19}), _entries({T0: 10, T1: 5})]:
        assert publish_action(7, RANGES, marker, legacy=True) == "produce", marker


def test_publish_action_an_absent_marker_older_than_retention_is_for_the_operator() -> None:
    day = 24 * 3600.0
    assert publish_action(7, RANGES, {}, age_seconds=8 * day, retention_seconds=7 * day) == "marker_expired"
    assert publish_action(7, RANGES, _entries({T0: None, T1: None}), age_seconds=8 * day,
                          retention_seconds=7 * day) == "marker_expired"
    assert publish_action(7, RANGES, {}, age_seconds=6 * day, retention_seconds=7 * day) == "produce"
    # the previous batch's marker is still there, so the group did not expire: ours was never published
    assert publish_action(7, RANGES, _entries({T0: 5, T1: 10}, marker_metadata(6)), age_seconds=8 * day,
                          retention_seconds=7 * day) == "produce"
