"""Source changes, decided without I/O: where new partitions start, when a source topic changed under the
pipeline (a new topic ID, retention past the next offset, a log that ends below it), what an operator's
reset does, and which coverage is a hole and which a declared gap.

Offsets order records only within one *incarnation* of a partition: one topic ID, and a log that never
went back. A topic deleted and recreated starts again at offset 0 and may even have a log end above the
ledger's next offset, so offsets alone cannot tell it from the old topic: the topic ID (KIP-516) can.
Nothing here ever moves a next offset by itself: every jump is a reset that an operator asked for and the
ledger records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple

from eosbatch.protocol.exceptions import InvalidRange, ProtocolError
from eosbatch.protocol.ranges import OffsetRange, PartitionBounds, TopicPartition, merge

StartingOffsets = Literal["earliest", "latest"]
Target = int | Literal["earliest", "latest"]
ProblemKind = Literal["new_topic_id", "retention", "log_end_below", "partition_missing"]


class Incarnation(NamedTuple):
    """Where the ledger reads one partition: in which incarnation, from which offset."""

    incarnation: int
    next_offset: int


class SourceTopic(NamedTuple):
    """What the ledger knows of one source topic: the topic ID it reads (None: recorded before eosbatch
    knew IDs) and the newest incarnation number it gave out (numbers are never reused)."""

    topic_id: str | None
    incarnation: int


# ---------------------------------------------------------------- where partitions start

def starting_offsets(first: StartingOffsets, bounds: Mapping[TopicPartition, PartitionBounds],
                     known: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Where the regular lane starts on the partitions it does not track yet.

    `latest` means "from now on" for the partitions that existed when the pipeline started reading a topic
    (it tracks none of that topic's partitions yet). A partition added to a topic later holds only records
    written after the pipeline started, so it is read from its log start: starting it at its last stable
    offset would skip, silently, whatever was written to it before the next plan."""
    known = set(known)
    tracked_topics = {tp.topic for tp in known}
    return {tp: (b.stable if first == "latest" and tp.topic not in tracked_topics else b.low)
            for tp, b in sorted(bounds.items()) if tp not in known}


# ---------------------------------------------------------------- the check at every plan

class SourceProblem(NamedTuple):
    kind: ProblemKind
    topic: str
    partition: int | None = None
    next_offset: int | None = None
    low: int | None = None
    stable: int | None = None
    recorded_id: str | None = None
    current_id: str | None = None
    read_to: str | None = None      # a recreated topic: the next offset of every partition read before

    def describe(self, pipeline: str) -> str:
        """What happened, with the offsets, and the command that goes on (never run automatically)."""
        tp = f"{self.topic}:{self.partition}"
        if self.kind == "new_topic_id":
            return (f"source topic {self.topic!r} was deleted and recreated: its topic ID is {self.current_id}, "
                    f"the ledger reads {self.recorded_id} (next offsets {self.read_to}); its offsets "
                    f"start again, so they say nothing about what was read. To read the new topic: eosbatch reset "
                    f"{pipeline} --topic {self.topic} --to earliest (or latest); the reset records that the old "
                    "topic's records past the next offsets were never read")
        if self.kind == "retention":
            return (f"{tp}: next offset {self.next_offset} was deleted by retention (the log starts at {self.low}): "
                    f"offsets {self.next_offset}-{self.low} are gone unread. To go on: eosbatch reset {pipeline} "
                    f"--partition {tp} --to {self.low} (records {self.next_offset}-{self.low} as a declared gap)")
        if self.kind == "log_end_below":
            return (f"{tp}: the log ends at {self.stable}, below the next offset {self.next_offset}: records the "
                    f"pipeline read are gone from Kafka (truncated log, or a topic recreated with the same ID) and "
                    f"offsets {self.stable}-{self.next_offset} will be given to new records. To go on: eosbatch reset "
                    f"{pipeline} --partition {tp} --to {self.stable} (starts a new incarnation of the partition)")
        return (f"{tp}: the ledger reads this partition but Kafka has no such partition, and the topic ID "
                f"{self.current_id} did not change; check the cluster (a recreated topic: eosbatch reset {pipeline} "
                f"--topic {self.topic} --to earliest)")


class SourceCheck(NamedTuple):
    problems: tuple[SourceProblem, ...]
    adopt: dict[str, str]   # topics whose ID the ledger records now (new to the pipeline, or never recorded)


def check_sources(recorded: Mapping[str, SourceTopic], current_ids: Mapping[str, str],
                  next_offsets: Mapping[TopicPartition, int], bounds: Mapping[TopicPartition, PartitionBounds]
                  ) -> SourceCheck:
    """Compare what the ledger reads with what Kafka holds now, topic by topic.

    A topic ID other than the recorded one makes the offsets meaningless, so the offsets of that topic are
    not compared. Otherwise, per tracked partition: next offset below the log start (retention deleted
    unread records), last stable offset below the next offset (the log went back), or no such partition."""
    problems: list[SourceProblem] = []
    adopt: dict[str, str] = {}
    for topic, current in sorted(current_ids.items()):
        known = recorded.get(topic)
        if known is not None and known.topic_id is not None and known.topic_id != current:
            nexts = sorted((tp.partition, n) for tp, n in next_offsets.items() if tp.topic == topic)
            problems.append(SourceProblem("new_topic_id", topic, recorded_id=known.topic_id, current_id=current,
                                          read_to=", ".join(f"{topic}:{p} {n}" for p, n in nexts) or "none"))
            continue
        if known is None or known.topic_id is None:
            adopt[topic] = current
        for tp, next_offset in sorted(next_offsets.items()):
            if tp.topic != topic:
                continue
            bound = bounds.get(tp)
            if bound is None:
                problems.append(SourceProblem("partition_missing", topic, tp.partition, next_offset,
                                              current_id=current))
            elif next_offset < bound.low:
                problems.append(SourceProblem("retention", topic, tp.partition, next_offset, bound.low, bound.stable))
            elif bound.stable < next_offset:
                problems.append(SourceProblem("log_end_below", topic, tp.partition, next_offset, bound.low,
                                              bound.stable))
    return SourceCheck(tuple(problems), adopt)


def describe_problems(problems: Iterable[SourceProblem], pipeline: str) -> str:
    return "; ".join(p.describe(pipeline) for p in problems)


# ---------------------------------------------------------------- resets

class Reset(NamedTuple):
    """One partition moved by an operator: from where the ledger read it to where it reads it now."""

    topic: str
    partition: int
    from_incarnation: int
    from_offset: int
    to_incarnation: int
    to_offset: int
    from_topic_id: str | None
    to_topic_id: str | None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def skipped(self) -> OffsetRange | None:
        """Within one incarnation, the offsets declared unread; across incarnations, none that offsets can name
        (the old incarnation's records past `from_offset` are unknowable once its topic is gone)."""
        if self.to_incarnation == self.from_incarnation and self.to_offset > self.from_offset:
            return OffsetRange(self.topic, self.partition, self.from_offset, self.to_offset)
        return None

    def __str__(self) -> str:
        if self.skipped is not None:
            return f"{self.tp}: skipped {self.from_offset}-{self.to_offset} (incarnation {self.from_incarnation})"
        ids = f", topic ID {self.from_topic_id} -> {self.to_topic_id}" if self.from_topic_id != self.to_topic_id else ""
        return (f"{self.tp}: incarnation {self.from_incarnation} left at offset {self.from_offset}, "
                f"incarnation {self.to_incarnation} read from {self.to_offset}{ids}")


class TopicReset(NamedTuple):
    """A new incarnation of a whole topic (its new topic ID accepted)."""

    topic: str
    topic_id: str
    incarnation: int
    starts: dict[TopicPartition, int]      # every partition of the new topic: where it is read from
    resets: tuple[Reset, ...]              # the partitions the ledger read: recorded
    dropped: tuple[TopicPartition, ...]    # read before, absent from the new topic: no longer tracked


def parse_target(text: str) -> Target:
    value = text.strip().lower()
    if value in ("earliest", "latest"):
        return value  # type: ignore[return-value]
    try:
        offset = int(value)
    except ValueError:
        raise InvalidRange(f"--to {text!r}: give an offset, earliest or latest") from None
    if offset < 0:
        raise InvalidRange(f"--to {text!r}: an offset is not negative")
    return offset


def parse_partition(text: str) -> TopicPartition:
    topic, sep, partition = text.strip().rpartition(":")
    if not sep or not topic or not partition.isdigit():
        raise InvalidRange(f"--partition {text!r}: expected TOPIC:PARTITION, e.g. orders:0")
    return TopicPartition(topic, int(partition))


def resolve_target(target: Target, bound: PartitionBounds) -> int:
    if target == "earliest":
        return bound.low
    if target == "latest":
        return bound.stable
    return target


def plan_partition_reset(tp: TopicPartition, where: Incarnation | None, bound: PartitionBounds | None,
                         target: Target, topic: SourceTopic | None, current_id: str) -> Reset:
    """Move one partition's next offset, as an operator asked.

    Forward within the incarnation: the offsets in between are declared skipped. Backward only when the log
    itself went back (its last stable offset is below the next offset): the offsets from there on will hold
    new records, so they start a new incarnation. Any other move back would read committed records again."""
    if where is None:
        raise InvalidRange(f"{tp}: the pipeline does not read this partition yet; nothing to reset")
    if topic is not None and topic.topic_id is not None and topic.topic_id != current_id:
        raise ProtocolError(f"{tp}: topic {tp.topic!r} was recreated (topic ID {topic.topic_id} -> {current_id}); "
                            f"accept the new topic first: eosbatch reset PIPELINE --topic {tp.topic} --to earliest")
    if bound is None:
        raise InvalidRange(f"{tp}: Kafka has no such partition")
    to = resolve_target(target, bound)
    if not bound.low <= to <= bound.stable:
        raise InvalidRange(f"{tp}: --to {to} is outside what Kafka holds (log start {bound.low}, last stable "
                           f"offset {bound.stable})")
    if to == where.next_offset:
        raise ProtocolError(f"{tp}: the next offset is {to} already; nothing to reset")
    topic_id = current_id
    if to > where.next_offset:
        return Reset(tp.topic, tp.partition, where.incarnation, where.next_offset, where.incarnation, to,
                     topic_id, topic_id)
    if bound.stable >= where.next_offset:
        raise ProtocolError(f"{tp}: offsets {to}-{where.next_offset} are committed already; moving back would "
                            "process them twice (to re-run them into a replace sink: eosbatch backfill --mode "
                            "reprocess)")
    counter = topic.incarnation if topic is not None else where.incarnation
    return Reset(tp.topic, tp.partition, where.incarnation, where.next_offset, max(counter, where.incarnation) + 1,
                 to, topic_id, topic_id)


def plan_topic_reset(topic: str, known: SourceTopic | None, current_id: str,
                     where: Mapping[TopicPartition, Incarnation],
                     bounds: Mapping[TopicPartition, PartitionBounds], target: Target) -> TopicReset:
    """Accept a recreated topic: every partition starts a new incarnation at its log start (earliest) or at
    its last stable offset (latest); the partitions read before are recorded as resets."""
    if target not in ("earliest", "latest"):
        raise InvalidRange(f"--topic {topic}: --to must be earliest or latest (offsets differ per partition)")
    if known is not None and known.topic_id == current_id:
        raise ProtocolError(f"topic {topic!r} still has topic ID {current_id}; nothing to accept (to move "
                            f"partitions: --partition {topic}:N)")
    mine = {tp: w for tp, w in where.items() if tp.topic == topic}
    incarnation = max([known.incarnation if known else 0, *(w.incarnation for w in mine.values())]) + 1
    ours = {tp: b for tp, b in bounds.items() if tp.topic == topic}
    starts = {tp: resolve_target(target, b) for tp, b in sorted(ours.items())}
    old_id = known.topic_id if known else None
    resets = tuple(Reset(topic, tp.partition, w.incarnation, w.next_offset, incarnation, starts.get(tp, 0), old_id,
                         current_id) for tp, w in sorted(mine.items()))
    dropped = tuple(tp for tp in sorted(mine) if tp not in ours)
    return TopicReset(topic, current_id, incarnation, starts, resets, dropped)


# ---------------------------------------------------------------- coverage: holes vs declared gaps

def coverage_problems(covered: Iterable[tuple[int, OffsetRange]], current: Mapping[TopicPartition, Incarnation],
                      resets: Iterable[Reset]) -> dict[str, list[OffsetRange]]:
    """Per partition and incarnation, the committed coverage with the declared gaps when together they are not
    one piece ending where the pipeline left that incarnation (its next offset, or the reset that left it).

    Keys: "topic:partition" for the incarnation read now, "topic:partition#N" for an earlier one."""
    pieces: dict[tuple[TopicPartition, int], list[OffsetRange]] = defaultdict(list)
    for incarnation, r in covered:
        pieces[(r.tp, incarnation)].append(r)
    declared: dict[tuple[TopicPartition, int], list[OffsetRange]] = defaultdict(list)
    ends: dict[tuple[TopicPartition, int], int] = {}
    for reset in resets:
        if reset.skipped is not None:
            declared[(reset.tp, reset.from_incarnation)].append(reset.skipped)
        else:
            ends[(reset.tp, reset.from_incarnation)] = reset.from_offset
    for tp, where in current.items():
        ends[(tp, where.incarnation)] = where.next_offset
    problems: dict[str, list[OffsetRange]] = {}
    for (tp, incarnation), found in sorted(pieces.items()):
        whole = merge(found + declared.get((tp, incarnation), []))
        end = ends.get((tp, incarnation))
        if len(whole) != 1 or (end is not None and whole[0].end != end):
            now = current.get(tp)
            key = str(tp) if now is not None and now.incarnation == incarnation else f"{tp}#{incarnation}"
            problems[key] = merge(found)
    return problems
