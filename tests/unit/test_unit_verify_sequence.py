"""eosbatch verify's commit-order checks (eosbatch/verify_sequence.py), on plain values."""

from __future__ import annotations

from eosbatch.kafka.read_back import Record
from eosbatch.verify_sequence import attempt_problems, sequence_problems


def _record(batch: int, seq: int, attempt: bytes | None) -> Record:
    headers = {"eosbatch.pipeline": b"p", "eosbatch.batch": str(batch).encode(),
               "eosbatch.commit_seq": str(seq).encode(), "eosbatch.seq": b"1"}
    return Record(0, 0, None, b"{}", {**headers, **({"eosbatch.attempt": attempt} if attempt else {})})


def test_a_sound_sequence_passes() -> None:
    assert sequence_problems([(1, "regular", 1), (2, "backfill", 2), (4, "regular", 3)], 3) == []
    assert sequence_problems([], 0) == []


def test_a_hole_a_number_twice_a_counter_off_and_a_lane_going_back_are_named() -> None:
    assert "no committed batch holds: [2]" in " ".join(sequence_problems([(1, "regular", 1), (2, "regular", 3)], 3))
    assert "more than one batch: [1]" in " ".join(sequence_problems([(1, "regular", 1), (2, "backfill", 1)], 1))
    assert "counter is 5" in " ".join(sequence_problems([(1, "regular", 1)], 5))
    assert "lower number: [(1, 2)]" in " ".join(sequence_problems([(1, "regular", 2), (2, "regular", 1)], 2))
    assert sequence_problems([(1, "backfill", 2), (2, "regular", 1)], 2) == []  # two lanes: either order


def test_a_batch_from_two_attempts_or_renumbered_is_named() -> None:
    assert attempt_problems([_record(1, 1, b"t/a"), _record(1, 1, b"t/a"), _record(2, 2, None)], {"1": 1}) == []
    assert "more than one Kafka transaction: ['1']" in attempt_problems([_record(1, 1, b"t/a"),
                                                                        _record(1, 1, b"t/b")], {"1": 1})[0]
    assert "not the ledger's: ['1']" in attempt_problems([_record(1, 1, b"t/a")], {"1": 4})[0]
