"""When new data has arrived for a pipeline: its source's last stable offsets (LSO, what read_committed can
read) against the ledger's next offsets. The decisions are pure; `read_position` is the one blocking read
(Kafka's ListOffsets and one ledger query), run in a thread by the trigger (eosbatch.orchestration.triggers).

Nothing here joins a consumer group or commits anything: the plan of the run this starts reads the ledger
again, so what a run processes never depends on what was seen here, and the run stays exactly-once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from eosbatch.config import Settings

Partition = tuple[str, int]  # (topic, partition): plain tuples, so this module imports nothing of eosbatch


class Position(NamedTuple):
    """Where the source ends (last stable offsets) and where the pipeline reads next (the ledger), per
    partition. A partition the ledger does not track yet has no next offset."""

    stable: Mapping[Partition, int]
    next_offsets: Mapping[Partition, int]


def behind(stable: Mapping[Partition, int], next_offsets: Mapping[Partition, int]) -> bool:
    """True when a plan would find something to do: a partition's last stable offset is past the ledger's next
    offset, or a partition of the source is not tracked yet (a plan starts tracking it: from its log start, or,
    for a `latest` pipeline's first plan, from the offsets of that moment)."""
    return any(tp not in next_offsets or end > next_offsets[tp] for tp, end in stable.items())


def records_behind(position: Position) -> int:
    """How many offsets lie between the ledger's next offsets and the last stable offsets (untracked
    partitions counted from 0: an upper bound; aborted records and commit markers count too)."""
    return sum(max(0, end - position.next_offsets.get(tp, 0)) for tp, end in position.stable.items())


def decide(last_fired: Position | None, now: Position) -> tuple[bool, Position | None]:
    """(fire?, what to remember). Fires once when the pipeline falls behind, then again only when, still
    behind, the source moved (a last stable offset advanced: more data) or the ledger advanced without
    catching up (a backlog larger than one run). A plan that only starts tracking partitions is no advance.
    Caught up, it forgets, so the next arrival fires. Never once per record: at most once per poll, and not at
    all while nothing moves (a failed run is not retried in a loop)."""
    if not behind(now.stable, now.next_offsets):
        return False, None
    if last_fired is None or advanced(last_fired.stable, now.stable) or \
            advanced(last_fired.next_offsets, now.next_offsets):
        return True, now
    return False, Position(last_fired.stable, {**last_fired.next_offsets, **now.next_offsets})


def advanced(before: Mapping[Partition, int], after: Mapping[Partition, int]) -> bool:
    """Some partition known before is further on after (a partition seen for the first time is not)."""
    return any(tp in before and offset > before[tp] for tp, offset in after.items())


def payload(pipeline: str, position: Position) -> dict[str, Any]:
    """The trigger event's payload (the asset event's extra): small, whatever the partition count."""
    lagging = sum(1 for tp, end in position.stable.items() if end > position.next_offsets.get(tp, -1))
    return {"pipeline": pipeline, "partitions": len(position.stable), "partitions_behind": lagging,
            "records_behind": records_behind(position)}


# ---------------------------------------------------------------- the blocking read (in a thread)

def settings_of(pipeline: str, log: Callable[[str], None]) -> Settings:
    """The pipeline's settings as its tasks see them: its Airflow connections, else the environment."""
    from eosbatch.orchestration import connections

    return connections.settings(log, pipeline=pipeline)


def read_position(settings: Settings, pipeline: str, topics: Sequence[str]) -> Position:
    """The source's last stable offsets (read_committed ListOffsets, with the process's kept admin client)
    and the ledger's next offsets of `pipeline`. Raises eosbatch's errors (KafkaUnavailable, TopicMissing,
    LedgerUnavailable, ...)."""
    from eosbatch.kafka import offsets
    from eosbatch.ledger import positions, store

    bounds = offsets.bounds(settings, topics)
    with store.transaction(settings) as cur:
        known = positions.next_offsets(cur, pipeline)
    return Position({(tp.topic, tp.partition): b.stable for tp, b in bounds.items()},
                    {(tp.topic, tp.partition): offset for tp, offset in known.items() if tp.topic in topics})
