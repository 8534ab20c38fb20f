"""The history checker (tests/history) catches each anomaly on a seeded history: a clean history of two batches
over one partition, then one thing broken in it at a time (issue 37, item 5)."""

from __future__ import annotations

import json

import pytest

from tests.history.checker import check
from tests.history.history import Batch, DeadLetter, History, Range, Record, Sink

T = "in"


def _record(batch: int, seq: int, offset: int, key: str, amount: int, attempt: str, source: int) -> Record:
    headers = {"eosbatch.pipeline": b"p", "eosbatch.batch": str(batch).encode(),
               "eosbatch.commit_seq": str(batch).encode(), "eosbatch.seq": str(seq).encode(),
               "eosbatch.attempt": attempt.encode(), "eosbatch.source_partition": b"0",
               "eosbatch.source_offset": str(source).encode()}
    return Record(0, offset, key.encode(), json.dumps({"k": key, "n": amount}).encode(), headers, "out")


def clean(mode: str = "replace") -> History:
    """Batch 1 covers in:0 [0, 10) and publishes a=1, b=2 (attempt x1, after an aborted attempt x0 of it);
    batch 2 covers [10, 20) and publishes a=3 (attempt x2); the sink holds what the output says."""
    batches = [Batch(1, "regular", "published", 1, True, 2, 2, (Range(T, 0, 0, 10),)),
               Batch(2, "regular", "published", 2, True, 1, 1, (Range(T, 0, 10, 20),)),
               Batch(3, "regular", "aborted", None, True, None, None, (Range(T, 0, 20, 30),))]
    aborted = [_record(1, 1, 0, "a", 1, "x0", 3), _record(1, 2, 1, "b", 2, "x0", 4)]
    output = [_record(1, 1, 3, "a", 1, "x1", 3), _record(1, 2, 4, "b", 2, "x1", 4),
              _record(2, 1, 6, "a", 3, "x2", 12)]
    rows = {"replace": [{"k": "a", "n": 3}, {"k": "b", "n": 2}], "accumulate": [{"k": "a", "n": 4}, {"k": "b", "n": 2}],
            "append": [{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "a", "n": 3}]}[mode]
    return History("p", batches, coverage=[(1, Range(T, 0, 0, 10)), (2, Range(T, 0, 10, 20))],
                   next_offsets={(T, 0): (0, 20)}, commit_counter=2, output=output, uncommitted=aborted + output,
                   dead_letters=[DeadLetter(1, T, 0, 5)], sink=Sink(mode, ("k",), rows, ("n",)))


def kinds(history: History) -> list[str]:
    return sorted({a.kind for a in check(history)})


@pytest.mark.parametrize("mode", ["replace", "accumulate", "append"])
def test_a_clean_history_has_no_anomaly(mode: str) -> None:
    assert check(clean(mode)) == []


def test_a_record_dropped_from_the_output_is_lost() -> None:
    history = clean()
    dropped = [history.output[0], history.output[2]]  # b=2, never read again: the sink holds it, the output not
    assert kinds(history._replace(output=dropped, uncommitted=history.uncommitted[:2] + dropped)) == \
        ["lost-output", "sink-output"]
    # still in the log read_uncommitted: a committed attempt's record that read_committed lost, Jepsen's lost write
    assert "aborted-read" in kinds(history._replace(output=dropped))


def test_a_sink_row_deleted_is_the_sink_differing_from_the_output() -> None:
    history = clean()
    assert kinds(history._replace(sink=history.sink._replace(rows=history.sink.rows[1:]))) == ["sink-output"]


def test_an_output_record_duplicated_is_a_duplicate() -> None:
    history = clean()
    copy = history.output[2]._replace(offset=7)
    assert kinds(history._replace(output=[*history.output, copy], uncommitted=[*history.uncommitted, copy])) == \
        ["duplicate-output"]


def test_a_source_record_published_by_two_batches_is_a_duplicate() -> None:
    history = clean()
    again = _record(2, 2, 7, "b", 2, "x2", 4)  # batch 2 published in:0@4, which batch 1 did
    history = history._replace(output=[*history.output, again], uncommitted=[*history.uncommitted, again],
                               batches=[history.batches[0], history.batches[1]._replace(outbox_records=2),
                                        history.batches[2]])
    assert kinds(history) == ["duplicate-output"]


def test_a_record_of_an_aborted_attempt_read_committed_is_an_aborted_read() -> None:
    history = clean()
    leaked = history.uncommitted[0]._replace(offset=2, headers={**history.uncommitted[0].headers,
                                                                 "eosbatch.seq": b"3"})
    history = history._replace(output=[*history.output, leaked], uncommitted=[*history.uncommitted, leaked],
                               batches=[history.batches[0]._replace(outbox_records=3), *history.batches[1:]])
    assert "aborted-read" in kinds(history)


def test_a_batch_visible_from_two_attempts_is_an_aborted_read() -> None:
    history = clean()
    other = history.output[1]._replace(headers={**history.output[1].headers, "eosbatch.attempt": b"x9"})
    history = history._replace(output=[history.output[0], other, history.output[2]])
    assert kinds(history) == ["aborted-read"]


def test_the_output_of_an_aborted_batch_is_an_unknown_batch() -> None:
    history = clean()
    stray = _record(3, 1, 8, "c", 9, "x3", 21)
    assert "unknown-batch" in kinds(history._replace(output=[*history.output, stray],
                                                     uncommitted=[*history.uncommitted, stray]))


def test_a_hole_in_the_commit_sequence_is_a_gap() -> None:
    history = clean()
    moved = history.batches[1]._replace(commit_seq=4)
    found = kinds(history._replace(batches=[history.batches[0], moved, history.batches[2]], commit_counter=4))
    assert "commit-seq-gap" in found


def test_a_commit_sequence_going_back_is_a_regression() -> None:
    history = clean()
    swapped = [history.batches[0]._replace(commit_seq=2), history.batches[1]._replace(commit_seq=1),
               history.batches[2]]
    assert "commit-seq-regression" in kinds(history._replace(batches=swapped))
    assert kinds(history._replace(commit_counter=1)) == ["commit-seq-regression"]  # the counter behind
    twice = [history.batches[0], history.batches[1]._replace(commit_seq=1), history.batches[2]]
    assert "commit-seq-regression" in kinds(history._replace(batches=twice, commit_counter=1))


def test_overlapping_coverage_is_caught() -> None:
    history = clean()
    widened = [history.batches[0], history.batches[1]._replace(ranges=(Range(T, 0, 8, 20),)), history.batches[2]]
    assert kinds(history._replace(batches=widened)) == ["overlap"]
    assert "overlap" in kinds(history._replace(coverage=[*history.coverage, (3, Range(T, 0, 5, 6))]))


def test_a_hole_in_the_coverage_is_lost_input() -> None:
    history = clean()
    assert kinds(history._replace(coverage=history.coverage[1:], batches=history.batches[1:])) != []
    holed = [(1, Range(T, 0, 0, 9)), (2, Range(T, 0, 10, 20))]
    shrunk = [history.batches[0]._replace(ranges=(Range(T, 0, 0, 9),)), *history.batches[1:]]
    assert kinds(history._replace(coverage=holed, batches=shrunk)) == ["lost-input"]
    assert kinds(history._replace(next_offsets={(T, 0): (0, 25)})) == ["lost-input"]  # next offset past coverage
    declared = history._replace(coverage=holed, batches=shrunk, declared=[Range(T, 0, 9, 10)])
    assert check(declared) == []  # an operator's declared skip is not a loss


def test_input_never_read_is_lost_when_caught_up() -> None:
    history = clean()._replace(inputs=[Record(0, 25, None, b"{}", {}, T)])
    assert check(history) == []
    assert [a.kind for a in check(history, caught_up=True)] == ["lost-input"]


def test_duplicate_effects_in_the_sink() -> None:
    totals = clean("accumulate")
    doubled = totals._replace(sink=totals.sink._replace(rows=[{"k": "a", "n": 7}, {"k": "b", "n": 2}]))
    assert kinds(doubled) == ["duplicate-effect"]  # a's delta 3 applied twice
    events = clean("append")
    again = events._replace(sink=events.sink._replace(rows=[*events.sink.rows, {"k": "a", "n": 3}]))
    assert kinds(again) == ["duplicate-effect"]
    dead = totals._replace(dead_letters=[*totals.dead_letters, DeadLetter(2, T, 0, 5)])
    assert kinds(dead) == ["duplicate-effect"]


def test_an_open_transaction_is_unsettled_and_skips_what_it_hides() -> None:
    assert kinds(clean()._replace(unsettled="partition 0 stable to 3 of 9")) == ["unsettled"]


def test_tombstones_delete_the_key_in_the_replace_sink() -> None:
    history = clean()
    tombstone = history.output[1]._replace(offset=9, value=None,
                                           headers={**history.output[1].headers, "eosbatch.batch": b"2",
                                                    "eosbatch.commit_seq": b"2", "eosbatch.seq": b"2",
                                                    "eosbatch.attempt": b"x2", "eosbatch.source_offset": b"13"})
    history = history._replace(output=[*history.output, tombstone],
                               batches=[history.batches[0], history.batches[1]._replace(outbox_records=2),
                                        history.batches[2]])
    assert kinds(history) == ["sink-output"]  # the sink still holds b
    assert check(history._replace(sink=history.sink._replace(rows=[{"k": "a", "n": 3}]))) == []
