"""The check of the invariant "the ledger never falls behind the output; if it does, stop" (eosbatch.protocol.lost):
at every plan, before anything touches Kafka's transactions, and in `eosbatch verify`. One ledger query and one
OffsetFetch of the regular lane's marker group.

Only the regular lane can be checked: a backfill batch has a marker group of its own, deleted once the batch is
finalized, so a lost backfill batch leaves nothing in Kafka to compare with (docs/design.md, failure matrix)."""

from __future__ import annotations

from eosbatch.config import Settings
from eosbatch.kafka import marker
from eosbatch.ledger import positions, store
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.exceptions import LedgerBehindOutput
from eosbatch.protocol.lost import describe_lost, lost_ranges
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.protocol.recovery import marked_batch


def _ledger_ends(settings: Settings, pipeline: Pipeline) -> dict:  # type: ignore[type-arg]
    with store.transaction(settings) as cur:
        return positions.ledger_ends(cur, pipeline.name)


def lost_output(settings: Settings, pipeline: Pipeline) -> list[OffsetRange]:
    """The ranges Kafka's output holds (per the regular marker group) that the ledger does not; [] normally."""
    return lost_and_marked(settings, pipeline)[0]


def lost_and_marked(settings: Settings, pipeline: Pipeline) -> tuple[list[OffsetRange], set[int]]:
    """The lost ranges, and the batch ids the marker names on their partitions (the last lost batch's)."""
    ends = _ledger_ends(settings, pipeline)
    if not ends:
        return [], set()
    found = marker.read(settings, pipeline.marker_group, ends)
    lost = lost_ranges(found, ends)
    if lost:
        # The ledger was read before the marker: a batch committed and published in between (another runner)
        # would look lost. Read the ledger again, now after the marker: what is still behind is.
        lost = lost_ranges(found, _ledger_ends(settings, pipeline))
    named = {marked_batch(found[r.tp].metadata) for r in lost}
    return lost, {i for i in named if i is not None}


def check_not_behind(settings: Settings, pipeline: Pipeline) -> None:
    """LedgerBehindOutput (terminal), naming the lost ranges and the way out, when the ledger is behind."""
    lost = lost_output(settings, pipeline)
    if lost:
        raise LedgerBehindOutput(describe_lost(pipeline.name, pipeline.marker_group, lost), lost)
