"""Offset ranges: planning at the last stable offset, subtraction of committed coverage, splitting, merging.

A range is half-open, [start, end). Ranges hold gaps (transaction markers, aborted records), so the
number of records read from one is at most end - start, never exactly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from eosbatch.protocol.exceptions import InvalidRange


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}"


class OffsetRange(NamedTuple):
    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}:{self.start}-{self.end}"


class PartitionBounds(NamedTuple):
    """What Kafka holds for one partition: the log start offset and the last stable offset."""

    low: int
    stable: int


def share_budget(lags: Mapping[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """Split `budget` records over partitions by water-filling: small lags are served whole, the rest
    share what is left equally, so one busy partition cannot starve the others."""
    if budget <= 0:
        raise ValueError("budget must be positive")
    shares: dict[TopicPartition, int] = {}
    pending = sorted((lag, tp) for tp, lag in lags.items() if lag > 0)
    left = budget
    while pending:
        fair = left // len(pending)
        lag, tp = pending[0]
        if lag <= fair:
            shares[tp] = lag
            left -= lag
            pending.pop(0)
            continue
        extra = left - fair * len(pending)  # the remainder goes to the first partitions, one each
        for index, (_, tp) in enumerate(sorted(pending, key=lambda item: item[1])):
            shares[tp] = fair + (1 if index < extra else 0)
        break
    return {tp: n for tp, n in shares.items() if n > 0}


def plan_next(
    next_offsets: Mapping[TopicPartition, int],
    bounds: Mapping[TopicPartition, PartitionBounds],
    max_records: int,
) -> list[OffsetRange]:
    """The next regular batch: from each partition's next offset up to its last stable offset, at most
    `max_records` offsets in all. Never past the LSO: an open transaction inside a range would stall the read.

    A next offset below the log start (records deleted by retention) is a terminal error: silently
    skipping would lose data; the user decides (backfill from the new start, or move the offset)."""
    lags: dict[TopicPartition, int] = {}
    for tp, start in next_offsets.items():
        if tp not in bounds:
            raise InvalidRange(f"{tp}: the ledger tracks it but Kafka has no such partition")
        low, stable = bounds[tp]
        if start < low:
            raise InvalidRange(f"{tp}: next offset {start} was deleted by retention (log starts at {low})")
        lags[tp] = max(0, stable - start)
    shares = share_budget(lags, max_records) if any(lags.values()) else {}
    return sorted(OffsetRange(tp.topic, tp.partition, next_offsets[tp], next_offsets[tp] + n)
                  for tp, n in shares.items())


def after_in_flight(next_offsets: Mapping[TopicPartition, int], in_flight: Iterable[OffsetRange]
                    ) -> dict[TopicPartition, int]:
    """Where the next batch starts while earlier batches of the same runner are planned but not committed
    yet (an overlapped run): each partition's next offset moved past its in-flight ranges, taken in plan
    order, each starting where the one before ended. Nothing here is trusted: the commit's compare-and-set
    still refuses the new batch unless every earlier one committed and moved the ledger's offsets there."""
    starts = dict(next_offsets)
    for r in in_flight:
        if starts.get(r.tp) != r.start:
            raise InvalidRange(f"{r}: an in-flight range must start at the partition's next offset "
                               f"({starts.get(r.tp, 'untracked')})")
        starts[r.tp] = r.end
    return starts


def merge(ranges: Iterable[OffsetRange]) -> list[OffsetRange]:
    """Adjacent or overlapping ranges of one partition joined, sorted."""
    merged: list[OffsetRange] = []
    for r in sorted(ranges):
        last = merged[-1] if merged else None
        if last and last.tp == r.tp and r.start <= last.end:
            merged[-1] = last._replace(end=max(last.end, r.end))
        else:
            merged.append(r)
    return merged


def subtract(wanted: Iterable[OffsetRange], covered: Iterable[OffsetRange]) -> list[OffsetRange]:
    """The parts of `wanted` that no range of `covered` touches: the holes a backfill must fill."""
    by_tp: dict[TopicPartition, list[OffsetRange]] = defaultdict(list)
    for c in merge(covered):
        by_tp[c.tp].append(c)
    holes: list[OffsetRange] = []
    for w in merge(wanted):
        cursor = w.start
        for c in by_tp.get(w.tp, []):
            if c.end <= cursor or c.start >= w.end:
                continue
            if c.start > cursor:
                holes.append(w._replace(start=cursor, end=c.start))
            cursor = max(cursor, c.end)
        if cursor < w.end:
            holes.append(w._replace(start=cursor))
    return holes


def split(ranges: Iterable[OffsetRange], max_records: int) -> list[list[OffsetRange]]:
    """Group ranges into batches of at most `max_records` offsets each, cutting ranges where needed.

    Each batch takes from every partition that has work left, sharing the budget by water-filling as
    regular planning does: the connector reads one range per partition per batch (one Spark task each),
    so a batch spread over partitions runs in parallel, where one partition at a time would run serially."""
    if max_records <= 0:
        raise ValueError("max_records must be positive")
    queues: dict[TopicPartition, list[OffsetRange]] = defaultdict(list)
    for r in sorted(ranges):
        if r.size > 0:
            queues[r.tp].append(r)
    batches: list[list[OffsetRange]] = []
    while any(queues.values()):
        heads = {tp: q[0] for tp, q in queues.items() if q}
        shares = share_budget({tp: head.size for tp, head in heads.items()}, max_records)
        batch = []
        for tp in sorted(shares):
            head, take = heads[tp], shares[tp]
            batch.append(head._replace(end=head.start + take))
            if take == head.size:
                queues[tp].pop(0)
            else:
                queues[tp][0] = head._replace(start=head.start + take)
        batches.append(batch)
    return batches


def validate_request(ranges: Iterable[OffsetRange], bounds: Mapping[TopicPartition, PartitionBounds]) -> None:
    """Refuse a backfill request that names what does not exist; the error names the range that does."""
    seen: list[OffsetRange] = []
    for r in ranges:
        if r.start >= r.end:
            raise InvalidRange(f"{r}: start must be below end")
        if r.tp not in bounds:
            known = sorted({str(tp) for tp in bounds if tp.topic == r.topic})
            raise InvalidRange(f"{r}: no such topic/partition (known: {', '.join(known) or 'none of that topic'})")
        low, stable = bounds[r.tp]
        if r.start < low:
            raise InvalidRange(f"{r}: offsets below {low} were deleted by retention (available {low}-{stable})")
        if r.end > stable:
            raise InvalidRange(f"{r}: ends past the last stable offset {stable} (available {low}-{stable})")
        for other in seen:
            if other.tp == r.tp and other.start < r.end and r.start < other.end:
                raise InvalidRange(f"{r}: overlaps {other} in the same request")
        seen.append(r)


def summarize(ranges: Sequence[OffsetRange], shown: int = 6) -> str:
    """The ranges for a log line: each of them when there are at most `shown`, else their count, partitions and
    offsets per topic, with the first few (a 1,000-partition plan is one short line, not 30 KB)."""
    if len(ranges) <= shown:
        return ", ".join(map(str, ranges))
    by_topic: dict[str, list[OffsetRange]] = {}
    for offset_range in ranges:
        by_topic.setdefault(offset_range.topic, []).append(offset_range)
    topics = "; ".join(f"{topic}: {len({r.partition for r in found})} partitions, {sum(r.size for r in found)} "
                       f"offsets" for topic, found in sorted(by_topic.items()))
    first = ", ".join(map(str, ranges[:3]))
    return f"{len(ranges)} ranges ({topics}), from {first}, …"
