"""Recovery decisions: given what the ledger and the marker say, what must happen to a batch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.states import BatchState

RecoveryAction = Literal["abort", "roll_forward", "none"]
PublishAction = Literal["produce", "finalize_only"]


def recovery_action(state: BatchState) -> RecoveryAction:
    """Before the commit a batch can only be aborted; after it, only rolled forward."""
    if state in ("planned", "staged"):
        return "abort"
    if state == "committed":
        return "roll_forward"
    return "none"


def publish_action(ranges: Iterable[OffsetRange], marker: Mapping[TopicPartition, int | None]) -> PublishAction:
    """Read after init_transactions() (which settled any transaction an older publisher left open): the
    marker at or past every range's end means the output is already in Kafka, so produce nothing."""
    for r in ranges:
        committed = marker.get(r.tp)
        if committed is None or committed < r.end:
            return "produce"
    return "finalize_only"
