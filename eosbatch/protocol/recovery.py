"""Recovery decisions: given what the ledger and the marker say, what must happen to a batch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple

from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.states import BatchState

RecoveryAction = Literal["abort", "roll_forward", "none"]
PublishAction = Literal["produce", "finalize_only", "marker_expired"]


def recovery_action(state: BatchState) -> RecoveryAction:
    """Before the commit a batch can only be aborted; after it, only rolled forward."""
    if state in ("planned", "staged"):
        return "abort"
    if state == "committed":
        return "roll_forward"
    return "none"


class MarkerEntry(NamedTuple):
    """One partition's committed offset in a marker group, and the metadata committed with it."""
    offset: int | None
    metadata: str


_MARKER_PREFIX = "eosbatch batch "


def marker_metadata(batch_id: int) -> str:
    """What the publish transaction commits with the marker offsets: the batch it published."""
    return f"{_MARKER_PREFIX}{batch_id}"


def marked_batch(metadata: str) -> int | None:
    """The batch a marker entry names, or None (no metadata: written by an older eosbatch, or not ours)."""
    rest = metadata.removeprefix(_MARKER_PREFIX) if metadata.startswith(_MARKER_PREFIX) else ""
    return int(rest) if rest.isdigit() else None


def publish_action(batch_id: int, ranges: Iterable[OffsetRange], marker: Mapping[TopicPartition, MarkerEntry],
                   legacy: bool = False, age_seconds: float | None = None,
                   retention_seconds: float = 7 * 24 * 3600.0) -> PublishAction:
    """Read after init_transactions() (which settled any transaction an older publisher left open).

    A marker entry naming this batch proves its transaction committed (Kafka commits all of a transaction's
    offsets at once, and a later batch of the lane publishes only after this one), so produce nothing.
    An offset alone proves nothing: after a reset or in another lane the same offsets can mean another
    batch. Only a batch committed by an older eosbatch (`legacy`, markers without metadata) falls back to
    "at or past every range's end". No entry at all, on a batch committed longer ago than the group's offset
    retention, may be an expired marker: the operator decides."""
    ranges = list(ranges)
    entries = [marker.get(r.tp) for r in ranges]
    if any(e is not None and e.offset is not None and marked_batch(e.metadata) == batch_id for e in entries):
        return "finalize_only"
    if legacy and all(e is not None and e.offset is not None and not e.metadata and e.offset >= r.end
                      for e, r in zip(entries, ranges, strict=True)):
        return "finalize_only"
    absent = all(e is None or e.offset is None for e in entries)
    if absent and age_seconds is not None and age_seconds > retention_seconds:
        return "marker_expired"
    return "produce"
