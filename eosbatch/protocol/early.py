"""The early publish's verdict: after a batch's commit, may the Kafka transaction filled while it ran commit?

The early transaction holds records read from staging as the commit would write them. It may commit only
when this very call committed the batch, every record was produced, the outbox holds as many records as
were produced (the outbox holds a subset of them, so equal counts make them the same records), and the
commit took the sequence number the records' headers carry. Otherwise it is dropped and the batch is
published from its outbox, as always.
"""

from __future__ import annotations


def not_for_batch(enabled: bool, lane: str) -> str | None:
    """Why a staged batch is not published early whatever its sink (one phrase for the run's log), or None."""
    if not enabled:
        return "EOSBATCH_EARLY_PUBLISH is off"
    if lane != "regular":
        return "a backfill-lane batch: early publish is for the regular lane"
    return None


def drop_reason(committed_here: bool, produce_error: str | None, outbox_records: int | None,
                produced: int | None, commit_seq: int | None, expected_seq: int) -> str | None:
    """Why the early transaction must be dropped (aborted), or None when it may commit."""
    if not committed_here:
        return "the commit was another run's"
    if produce_error is not None:
        return f"producing failed ({produce_error})"
    if outbox_records != produced:
        return f"the outbox holds {outbox_records} records, {produced} were produced"
    if commit_seq != expected_seq:
        return f"the commit took sequence #{commit_seq}, not #{expected_seq}"
    return None


def kafka_commit_failed(error: object) -> str:
    """Why an early transaction whose Kafka commit failed is given up: publish settles it from the outbox."""
    return f"its Kafka commit failed ({error})"
