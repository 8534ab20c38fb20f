"""Redrive decisions, without I/O: which dead letters a request chooses, and the batches they make.

A redrive batch runs chosen dead letters through the pipeline again, from the bytes the ledger stored (Kafka
may have deleted the records since). Its ranges span its dead letters per partition (the marker and
`eosbatch status` show them); its exact input is the list of dead letters fixed when it is planned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from eosbatch.protocol.exceptions import ProtocolError
from eosbatch.protocol.ranges import OffsetRange

DEFAULT_LIMIT = 10_000  # dead letters one redrive runs at most, unless asked for another cap
# The commit writes these dead letters from the output rows, not from the input record: there is no input
# to run again (backfill --mode reprocess re-reads their range from Kafka instead).
OVERSIZE_PREFIX = "output record of "

_PARTITION = re.compile(r"(?P<topic>[A-Za-z0-9._-]+):(?P<partition>\d+)")


class InvalidSelection(ProtocolError):
    """A redrive request that chooses no dead letters in a way the command understands."""


class Selection(NamedTuple):
    """Which dead letters of a pipeline to redrive: every one (`everything`), or those matching all the given
    filters. `error_like` is a SQL LIKE pattern on the reason; `partitions` are (topic, partition)."""

    everything: bool = False
    error_like: str | None = None
    ids: tuple[int, ...] = ()
    topic: str | None = None
    partitions: tuple[tuple[str, int], ...] = ()
    limit: int = DEFAULT_LIMIT

    @property
    def filtered(self) -> bool:
        return bool(self.error_like is not None or self.ids or self.topic or self.partitions)


def parse_partition(text: str) -> tuple[str, int]:
    found = _PARTITION.fullmatch(text.strip())
    if found is None:
        raise InvalidSelection(f"--partition {text!r}: expected TOPIC:PARTITION, e.g. orders:0")
    return found["topic"], int(found["partition"])


def selection(everything: bool = False, error_like: str | None = None, ids: Iterable[int] = (),
              topic: str | None = None, partitions: Iterable[str] = (), limit: int | None = None,
              source_topics: Sequence[str] = ()) -> Selection:
    """The request as a Selection, refused unless it says what it wants: --all, or at least one filter (not
    both: --all with a filter would read as "all", which it is not)."""
    chosen = Selection(everything, error_like, tuple(sorted(set(ids))), topic,
                       tuple(sorted({parse_partition(p) for p in partitions})),
                       DEFAULT_LIMIT if limit is None else limit)
    if chosen.everything == chosen.filtered:
        raise InvalidSelection("say which dead letters to redrive: --all, or --error-like PATTERN, --ids, --topic "
                               "or --partition (filters combine with AND)" if not chosen.everything else
                               "--all takes no filter; give the filters alone (they combine with AND)")
    if chosen.limit < 1:
        raise InvalidSelection(f"--limit must be at least 1, got {chosen.limit}")
    if any(i < 1 for i in chosen.ids):
        raise InvalidSelection(f"--ids: dead letter ids are positive, got {min(chosen.ids)}")
    for name in [chosen.topic] * bool(chosen.topic) + [t for t, _ in chosen.partitions]:
        if source_topics and name not in source_topics:
            raise InvalidSelection(f"{name!r} is not a source topic of this pipeline ({', '.join(source_topics)})")
    if chosen.error_like is not None and not chosen.error_like.strip():
        raise InvalidSelection("--error-like: an empty pattern; use --all for every dead letter")
    return chosen


class DeadLetter(NamedTuple):
    """A dead letter as a redrive plans it: its id, position, and reason."""

    id: int
    topic: str
    partition: int
    offset: int
    error: str


def redrivable(letter: DeadLetter) -> bool:
    """Whether the ledger holds the input record itself: not a result row the output topic could not take, nor
    an aggregate's row recorded against partition -1."""
    return letter.partition >= 0 and letter.offset >= 0 and not letter.error.startswith(OVERSIZE_PREFIX)


def spans(letters: Iterable[DeadLetter]) -> list[OffsetRange]:
    """A redrive batch's ranges: per partition, from its first dead letter's offset to past its last."""
    bounds: dict[tuple[str, int], tuple[int, int]] = {}
    for d in letters:
        low, high = bounds.get((d.topic, d.partition), (d.offset, d.offset))
        bounds[(d.topic, d.partition)] = (min(low, d.offset), max(high, d.offset))
    return [OffsetRange(t, p, low, high + 1) for (t, p), (low, high) in sorted(bounds.items())]

