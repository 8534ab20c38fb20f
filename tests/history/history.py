"""A pipeline's history as plain values: what its input held, what its ledger says it committed, what its output
topic holds (read_committed and read_uncommitted), its dead letters and its sink. Header and table names are
spelled here, once, as literals: the contract as a reader sees it, not as eosbatch's code spells it."""

from __future__ import annotations

from typing import Any, NamedTuple

# The output record's headers (docs/output.md, docs/history-checker.md)
PIPELINE = "eosbatch.pipeline"
BATCH = "eosbatch.batch"
COMMIT_SEQ = "eosbatch.commit_seq"
SEQ = "eosbatch.seq"
ATTEMPT = "eosbatch.attempt"
SOURCE_TOPIC = "eosbatch.source_topic"
SOURCE_PARTITION = "eosbatch.source_partition"
SOURCE_OFFSET = "eosbatch.source_offset"

FINISHED = ("committed", "published")  # the states of a batch that committed
COVERING = ("regular", "backfill", "replay")  # kinds whose ranges claim coverage (not reprocess, redrive)


class Range(NamedTuple):
    topic: str
    partition: int
    start: int
    end: int  # exclusive
    incarnation: int = 0

    def overlaps(self, other: Range) -> bool:
        return (self.topic, self.partition, self.incarnation) == (other.topic, other.partition, other.incarnation) \
            and self.start < other.end and other.start < self.end


class Batch(NamedTuple):
    id: int
    kind: str                 # regular, backfill, replay, reprocess, redrive
    state: str                # planned, staged, committed, published, aborted
    commit_seq: int | None
    publish: bool
    outbox_records: int | None
    published_records: int | None
    ranges: tuple[Range, ...] = ()  # its batch_ranges (none once compacted)


class Record(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    topic: str = ""


class DeadLetter(NamedTuple):
    batch_id: int
    topic: str
    partition: int
    offset: int
    incarnation: int = 0
    redriven: bool = False


class Sink(NamedTuple):
    """The sink as the checker compares it with the output: its rows and how the output builds them."""
    mode: str                          # replace, accumulate or append
    key: tuple[str, ...]
    rows: list[dict[str, Any]]
    accumulate: tuple[str, ...] = ()   # accumulate: the columns the output's deltas add up to


class History(NamedTuple):
    pipeline: str
    batches: list[Batch]
    coverage: list[tuple[int, Range]]           # committed_ranges: (batch id, range)
    next_offsets: dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> (incarnation, next offset)
    commit_counter: int                         # the pipeline's last commit sequence number
    declared: list[Range] = []                  # offsets an operator skipped on purpose (a reset forward)
    output: list[Record] | None = None          # read_committed; None: the pipeline has no output topic
    uncommitted: list[Record] | None = None     # read_uncommitted (aborted and committed records alike)
    unsettled: str = ""                         # why the output could not be read to its end read_committed
    dead_letters: list[DeadLetter] = []
    sink: Sink | None = None
    inputs: list[Record] | None = None          # the input topics read_committed (for `caught_up`)


class Anomaly(NamedTuple):
    kind: str
    detail: str

    def line(self) -> str:
        return f"{self.kind}: {self.detail}"


KINDS = (
    "lost-input",           # offsets below the next offset that no committed batch covers; or input never read
    "lost-output",          # a published batch's output records missing from read_committed
    "duplicate-output",     # an output record (batch, seq) or a source record's output twice
    "duplicate-effect",     # the sink holds an effect more often than the output (or a dead letter twice)
    "aborted-read",         # a record of an aborted attempt visible read_committed; or one batch from two attempts
    "unknown-batch",        # read_committed output of a batch the ledger does not hold as committed
    "sink-output",          # the sink differs from what the output says it holds
    "commit-seq-gap",       # a commit sequence number no committed batch holds
    "commit-seq-regression",  # a number given twice, out of order, behind the counter, or not the output's
    "overlap",              # two committed batches cover the same offsets of a partition
    "unsettled",            # the output cannot be read to its end read_committed (a transaction open)
)
