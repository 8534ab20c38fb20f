"""Warming a Spark Connect server just started, so that the first batch after a deploy or a restart runs at the
engine's steady pace.

A server just started runs its first batches slowly: its JIT compiles the read, parse, Arrow and encoding paths
over the first few hundred thousand records (measured in bench/RESULTS.md: the same 1M-record process step took
16.6, 7.5, 5.7, 5.1 and 4.5 s in five runs in a row). The warm-up runs those very paths, through the reader and
the parser a batch uses, over a topic of its own: read_committed ranges, JSON parsing with the dead-letter
check (by pyarrow and by Spark's from_json, in alternate rounds), and the staging tasks' Arrow hand-over and
binary-COPY encoding, without the COPY (it writes nothing: no ledger row, no staging row, no sink). It leaves
the topic behind for the next start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from eosbatch.config import Settings
from eosbatch.engine import connect
from eosbatch.exceptions import TransientError
from eosbatch.kafka import json_lines, offsets, topics
from eosbatch.pipeline import KafkaSource
from eosbatch.protocol.ranges import OffsetRange, PartitionBounds

if TYPE_CHECKING:
    import pyarrow as pa

TOPIC = "eosbatch-engine-warm-up"
PARTITIONS = 4
SCHEMA = "order_id STRING NOT NULL, customer_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"
# The same records with `ts` as text: a schema that pyarrow parses (eosbatch.formats.json_arrow), in the Python
# workers of an Arrow UDF, where SCHEMA's timestamp leaves every record to from_json. The rounds alternate,
# pyarrow's first: a batch meets whichever of the two its schema takes, warm.
ARROW_SCHEMA = "order_id STRING NOT NULL, customer_id STRING NOT NULL, amount DOUBLE, ts STRING"
FIELDS = ("order_id", "customer_id", "amount", "ts")
DEFAULT_RECORDS = 300_000
DEFAULT_ROUNDS = 3
PER_TRANSACTION = 50_000
STABLE_WAIT_S = 60.0


def records(count: int) -> list[tuple[bytes | None, bytes]]:
    """`count` order-like JSON records (key, value); one in a thousand malformed, as real input has some."""
    out: list[tuple[bytes | None, bytes]] = []
    for n in range(count):
        value = (b"not json" if n % 1000 == 999 else
                 json.dumps({"order_id": f"o-{n}", "customer_id": f"c-{n % 997}", "amount": round(n * 0.37 % 500, 2),
                             "ts": "2026-01-01T00:00:00Z"}).encode())
        out.append((f"c-{n % 997}".encode(), value))
    return out


def ensure_input(settings: Settings, count: int) -> list[OffsetRange]:
    """The warm-up topic holding at least `count` records (produced transactionally when it holds fewer); the
    ranges of about `count` records from its start (a partition's share, offsets counting its commit markers)."""
    created = topics.create(settings, TOPIC, PARTITIONS).created
    held = _bounds(settings, STABLE_WAIT_S if created else 0.0)
    if _stable(held) < count:
        json_lines.produce(settings, TOPIC, records(count), per_transaction=PER_TRANSACTION,
                           transactional_id=f"{TOPIC}-producer")
        # A commit returns before its markers are written: the last stable offsets move a moment later.
        deadline = time.monotonic() + STABLE_WAIT_S
        while _stable(held := _bounds(settings, STABLE_WAIT_S)) < count:
            if time.monotonic() > deadline:
                raise TransientError(f"engine warm-up: the records produced into {TOPIC!r} were not stable "
                                     f"after {STABLE_WAIT_S:.0f}s")
            time.sleep(0.1)
    share = -(-count // len(held))
    return [OffsetRange(tp.topic, tp.partition, b.low, min(b.stable, b.low + share))
            for tp, b in sorted(held.items()) if b.stable > b.low]


def _bounds(settings: Settings, patience: float) -> dict[Any, PartitionBounds]:
    """The topic's bounds; a topic just created answers only once its partitions have leaders: until then,
    `patience` seconds of asking again."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return offsets.bounds(settings, [TOPIC])
        except TransientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _stable(held: dict[Any, PartitionBounds]) -> int:
    return sum(b.stable - b.low for b in held.values())


def _encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A staging task without its COPY: the same tagging and pgpq encoding, then the rows counted."""
    import pyarrow as pa

    from eosbatch.spark.staging import binary_copy

    _, rows = binary_copy(batches, 0, "warm-up:0")
    yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=pa.schema([("rows", pa.int64())]))


class Round(NamedTuple):
    seconds: float
    records: int  # the well-formed records read, parsed and encoded


def warm(settings: Settings, count: int = DEFAULT_RECORDS, rounds: int = DEFAULT_ROUNDS,
         log: Any = print) -> list[Round]:
    """Run the warm-up `rounds` times over `count` records on the server `settings.spark_remote`. Spark's
    errors leave as eosbatch errors (engine.connect.run)."""
    from pyspark.sql import functions as F

    from eosbatch.spark import reader

    ranges = ensure_input(settings, count)
    sources = [KafkaSource(topics=[TOPIC], value_schema=schema) for schema in (ARROW_SCHEMA, SCHEMA)]

    def one_round(spark: Any, source: KafkaSource) -> int:
        parsed = reader.parse(reader.read_ranges(spark, settings, ranges, TOPIC), source)
        good = parsed.where(F.col(reader.ERROR_COLUMN).isNull()).select(*FIELDS, "topic", "partition", "offset")
        return sum(r["rows"] for r in good.mapInArrow(_encode, "rows long").collect())

    done = []
    for n in range(rounds):
        started = time.monotonic()
        records = connect.run(settings, "engine warm-up", one_round, sources[n % len(sources)])
        done.append(Round(time.monotonic() - started, records))
        log(f"spark-connect: warm-up round {n + 1} of {rounds}: {records:,} records read, parsed and encoded in "
            f"{done[-1].seconds:.1f}s")
    return done
