"""Backfill and replay decisions, without I/O: what to run given what Kafka holds and what the ledger says.

The regular lane owns every offset at or past a partition's next offset; a backfill only ever fills holes
below it, so the two lanes cannot claim the same offset (PostgreSQL's exclusion constraint backs this up).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, NamedTuple

from eosbatch.protocol.exceptions import InvalidRange
from eosbatch.protocol.ranges import OffsetRange, PartitionBounds, TopicPartition, merge, split, subtract
from eosbatch.protocol.states import BatchKind, BatchState, claims_coverage

Mode = Literal["fill", "reprocess"]
MODES: tuple[Mode, ...] = ("fill", "reprocess")
ReplayAction = Literal["replay", "publish", "nothing"]

_RANGE = re.compile(r"(?P<topic>[A-Za-z0-9._-]+):(?P<partition>\d+):(?P<start>\d+)-(?P<end>\d+)")


def parse_range(text: str) -> OffsetRange:
    """`TOPIC:PARTITION:START-END` (END exclusive) as an OffsetRange."""
    found = _RANGE.fullmatch(text.strip())
    if found is None:
        raise InvalidRange(f"{text!r}: expected TOPIC:PARTITION:START-END, e.g. orders:0:0-1000 (END exclusive)")
    range_ = OffsetRange(found["topic"], int(found["partition"]), int(found["start"]), int(found["end"]))
    if range_.start >= range_.end:
        raise InvalidRange(f"{range_}: start must be below end")
    return range_


def intersect(ranges: Iterable[OffsetRange], other: Iterable[OffsetRange]) -> list[OffsetRange]:
    """The parts of `ranges` that `other` covers."""
    wanted = merge(ranges)
    return subtract(wanted, subtract(wanted, other))


def below(ranges: Iterable[OffsetRange], limits: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """`ranges` cut at each partition's limit (the regular lane's next offset): what a backfill may take."""
    kept = []
    for r in merge(ranges):
        end = min(r.end, limits.get(r.tp, r.end))
        if end > r.start:
            kept.append(r._replace(end=end))
    return kept


def size(ranges: Iterable[OffsetRange]) -> int:
    return sum(r.size for r in ranges)


class BackfillPlan(NamedTuple):
    """What a backfill request comes to. `batches` are the work; the rest is for the user to read."""

    mode: Mode
    requested: tuple[OffsetRange, ...]
    skipped: tuple[OffsetRange, ...]       # fill: already committed; reprocess: holes, left alone
    in_flight: tuple[OffsetRange, ...]     # being processed by unfinished batches
    regular: tuple[OffsetRange, ...]       # at or past the next offset: the regular runs will take them
    batches: tuple[tuple[OffsetRange, ...], ...]

    @property
    def offsets(self) -> int:
        return sum(size(b) for b in self.batches)


def plan_backfill(
    requested: Iterable[OffsetRange],
    bounds: Mapping[TopicPartition, PartitionBounds],
    next_offsets: Mapping[TopicPartition, int],
    committed: Iterable[OffsetRange],
    in_flight: Iterable[OffsetRange],
    mode: Mode,
    max_records: int,
) -> BackfillPlan:
    """Validate the request against Kafka's bounds, then: `fill` runs the holes below the next offsets
    (so asking twice plans nothing); `reprocess` re-runs what is committed (and nothing else)."""
    from eosbatch.protocol.ranges import validate_request

    requested = list(requested)
    validate_request(requested, bounds)
    if mode not in MODES:
        raise InvalidRange(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
    wanted = merge(requested)
    owned = below(wanted, next_offsets)
    regular = subtract(wanted, owned)
    committed, in_flight = merge(committed), merge(in_flight)
    if mode == "fill":
        skipped = intersect(owned, committed)
        busy = intersect(subtract(owned, committed), in_flight)
        work = subtract(owned, [*committed, *in_flight])
    else:
        work = intersect(owned, committed)
        busy = []
        skipped = subtract(owned, committed)
    return BackfillPlan(mode, tuple(wanted), tuple(skipped), tuple(busy), tuple(regular),
                        tuple(tuple(b) for b in split(work, max_records)))


class MappedBatch(NamedTuple):
    """One mapped task instance of a backfill DAG run: planned batches `first`..`last` (1-based) of `of`."""

    first: int
    last: int
    of: int
    ranges: tuple[OffsetRange, ...]

    def label(self, width: int = 200) -> str:
        """What the grid shows for the instance: which batches, and their ranges (shortened to `width`)."""
        which = f"batch {self.first}" if self.first == self.last else f"batches {self.first}-{self.last}"
        text = f"{which}/{self.of}: " + ", ".join(map(str, self.ranges))
        return text if len(text) <= width else text[:width - 1] + "\u2026"


def map_batches(batches: Sequence[Sequence[OffsetRange]], most: int) -> list[MappedBatch]:
    """A plan's batches as at most `most` mapped task instances (Airflow's [core] max_map_length): one per
    batch when they fit, else runs of consecutive batches whose ranges are merged (the instance plans them
    again, so they split the same way)."""
    if most < 1:
        raise InvalidRange(f"max_map_length must be at least 1, got {most}")
    total = len(batches)
    per = -(-total // most) if total else 1  # ceiling: how many planned batches each instance runs
    mapped = []
    for first in range(0, total, per):
        chunk = batches[first:first + per]
        mapped.append(MappedBatch(first + 1, first + len(chunk), total,
                                  tuple(merge(r for batch in chunk for r in batch))))
    return mapped


class OffsetMoves(NamedTuple):
    moves: dict[TopicPartition, int]   # the regular lane's next offsets that this batch's commit advances
    problem: str | None


def offset_moves(kind: BatchKind, ranges: Iterable[OffsetRange], expected: Mapping[TopicPartition, int]
                 ) -> OffsetMoves:
    """What a batch's commit does to the next offsets, or why it must not commit.

    A regular batch must start exactly at each next offset (compare-and-set). A backfill or replay range
    must end at or below it (a hole), or start exactly at it (a replay of the regular lane's last,
    aborted batch: it then advances the offset). A reprocess or redrive batch claims nothing and moves nothing."""
    moves: dict[TopicPartition, int] = {}
    if not claims_coverage(kind):
        return OffsetMoves(moves, None)
    for r in ranges:
        at = expected.get(r.tp)
        if at is None:
            return OffsetMoves({}, f"{r.tp} is not tracked by the ledger")
        if r.start == at:
            moves[r.tp] = r.end
        elif kind == "regular" or r.end > at:
            return OffsetMoves({}, f"{r} does not fit the ledger's next offset {at} for {r.tp}; "
                                   "another run committed first")
    return OffsetMoves(moves, None)


class ReplayDecision(NamedTuple):
    action: ReplayAction
    ranges: tuple[OffsetRange, ...]  # what a replay batch runs (empty unless action == "replay")
    reason: str


def replay_decision(batch_id: int, state: BatchState, kind: BatchKind, ranges: Iterable[OffsetRange],
                    committed: Iterable[OffsetRange], in_flight: Iterable[OffsetRange]) -> ReplayDecision:
    """docs/design.md's replay rule: aborted and uncovered -> replay those ranges; committed -> publish it;
    published, covered by later batches, or still in flight -> say so and change nothing."""
    ranges = merge(ranges)
    if state == "published":
        return ReplayDecision("nothing", (), f"batch {batch_id} is already published; nothing to replay")
    if state == "committed":
        return ReplayDecision("publish", (), f"batch {batch_id} is committed but not published; publishing it")
    if state in ("planned", "staged"):
        return ReplayDecision("nothing", (), f"batch {batch_id} is {state}: in flight, or its runner died and the "
                                             "next run's recovery aborts it (or `eosbatch abort`); replay it then")
    if kind == "reprocess":
        return ReplayDecision("nothing", (), f"batch {batch_id} was a reprocess; run the backfill with "
                                             "--mode reprocess again instead")
    if kind == "redrive":
        return ReplayDecision("nothing", (), f"batch {batch_id} was a redrive; its dead letters are still dead "
                                             "letters: run eosbatch dead-letters redrive again instead")
    left = subtract(ranges, committed)
    busy = intersect(left, in_flight)
    if busy:
        return ReplayDecision("nothing", (), f"batch {batch_id}: {', '.join(map(str, busy))} are being "
                                             "processed by an unfinished batch; nothing to replay now")
    if not left:
        return ReplayDecision("nothing", (), f"batch {batch_id} is aborted and later batches covered all its "
                                             "ranges; nothing to replay")
    if left == ranges:
        return ReplayDecision("replay", tuple(left), f"batch {batch_id} is aborted and uncovered; replaying "
                                                     f"{', '.join(map(str, left))}")
    return ReplayDecision("replay", tuple(left), f"batch {batch_id} is aborted and partly covered by later "
                                                 f"batches; replaying what is left: {', '.join(map(str, left))}")
