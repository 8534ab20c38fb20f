"""A pipeline's history read from a real stack with confluent_kafka and psycopg2 directly (no eosbatch): the
ledger's batches, ranges, coverage, next offsets and commit counter; the output topic read_committed and
read_uncommitted; the dead letters; the sink table; the input topics read_committed.

Settings come from the environment eosbatch reads too (EOSBATCH_KAFKA_BOOTSTRAP, EOSBATCH_DATABASE_URL,
EOSBATCH_KAFKA_CONFIG), or as arguments."""

from __future__ import annotations

import json
import os
import time
import uuid
from contextlib import closing
from decimal import Decimal
from typing import Any, NamedTuple
from urllib.parse import unquote

import psycopg2
from confluent_kafka import Consumer, TopicPartition
from psycopg2 import sql

from tests.history.history import Batch, DeadLetter, History, Range, Record, Sink


class Where(NamedTuple):
    bootstrap: str
    database_url: str
    kafka_config: dict[str, Any] = {}

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Where:
        env = dict(os.environ if env is None else env)
        return cls(env["EOSBATCH_KAFKA_BOOTSTRAP"], env["EOSBATCH_DATABASE_URL"],
                   json.loads(env.get("EOSBATCH_KAFKA_CONFIG", "").strip() or "{}"))

    def dsn(self) -> str:
        """The SQLAlchemy URL eosbatch takes, as libpq takes it."""
        scheme, _, rest = self.database_url.partition("://")
        if not scheme.startswith("postgres"):
            return self.database_url
        # SQLAlchemy's multi-host form (`user@/db?host=a:1&host=b:2&...`, a stack with a replica) is libpq's
        # `user@a:1,b:2/db?...`: libpq reads `host` in a query as a bare name.
        before, _, query = rest.partition("?")
        pairs = [pair.partition("=") for pair in query.split("&")] if query else []
        hosts = [unquote(value) for name, _, value in pairs if name == "host"]
        if hosts:
            authority, slash, path = before.partition("/")
            user, at, netloc = authority.rpartition("@")
            before = f"{user}{at}{','.join([netloc, *hosts] if netloc else hosts)}{slash}{path}"
        others = "&".join(f"{name}={value}" for name, _, value in pairs if name != "host")
        return f"postgresql://{before}{'?' + others if others else ''}"


class SinkSpec(NamedTuple):
    table: str                        # schema.table or table (public)
    key: tuple[str, ...]
    mode: str = "replace"             # replace, accumulate or append
    accumulate: tuple[str, ...] = ()


def _consumer(where: Where, isolation: str) -> Consumer:
    return Consumer({"bootstrap.servers": where.bootstrap, **where.kafka_config,
                     "group.id": f"history-{uuid.uuid4().hex}", "enable.auto.commit": False,
                     "isolation.level": isolation, "enable.partition.eof": True, "fetch.wait.max.ms": 20})


def read(where: Where, topic: str, isolation: str = "read_committed", settle: float = 30.0,
         timeout: float = 120.0) -> tuple[list[Record], str]:
    """Every record of `topic` a consumer with `isolation` sees, from the start to the log end; and, read
    committed, why not all of it (a transaction still open after `settle` seconds below the log end)."""
    ends_client = _consumer(where, "read_uncommitted")
    try:
        partitions = sorted(ends_client.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: ends_client.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in partitions}
    finally:
        ends_client.close()
    client = _consumer(where, isolation)
    try:
        if isolation == "read_committed":  # its high watermark is the last stable offset: wait for the log end
            deadline = time.monotonic() + settle
            while held := {p: stable for p in partitions if (stable := client.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=30)[1]) < ends[p][1]}:
                if time.monotonic() > deadline:
                    return [], (f"{topic}: a transaction is open below the log end: "
                                + ", ".join(f"partition {p} stable to {s} of {ends[p][1]}" for p, s in held.items()))
                time.sleep(0.2)
        assigned = [TopicPartition(topic, p, low) for p, (low, high) in ends.items() if high > low]
        records: list[Record] = []
        if not assigned:
            return records, ""
        client.assign(assigned)
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(assigned):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(done)} of {len(assigned)} read in {timeout:.0f} s")
            for message in client.consume(10_000, 0.05):
                error, partition, offset = message.error(), message.partition(), message.offset()
                assert partition is not None, "a message or a partition EOF names its partition"
                if error is not None:
                    if error.code() == -191:  # _PARTITION_EOF
                        done.add(partition)
                    continue
                assert offset is not None
                raw: Any = message.headers() or []
                headers = {k: v if isinstance(v, bytes) else (v or "").encode() for k, v in raw}
                records.append(Record(partition, offset, message.key(), message.value(), headers, topic))
        return records, ""
    finally:
        client.close()


def ledger(where: Where, pipeline: str) -> dict[str, Any]:
    """The ledger's rows of `pipeline`, as History's fields, from one snapshot. Read before the output: a batch
    publishes only after its commit, so every record the output shows then is of a batch this snapshot holds."""
    with closing(psycopg2.connect(where.dsn())) as connection, connection, connection.cursor() as cur:
        connection.set_session(isolation_level="REPEATABLE READ", readonly=True)
        cur.execute("SELECT b.id, b.kind, b.state, b.commit_seq, b.publish, b.outbox_records, b.published_records, "
                    "coalesce(array_agg(ARRAY[r.topic, r.partition::text, r.start_offset::text, r.end_offset::text, "
                    "r.incarnation::text]) FILTER (WHERE r.batch_id IS NOT NULL), '{}') "
                    "FROM eosbatch.batches b LEFT JOIN eosbatch.batch_ranges r ON r.batch_id = b.id "
                    "WHERE b.pipeline = %s GROUP BY b.id ORDER BY b.id", (pipeline,))
        batches = [Batch(i, kind, state, seq, publish, outbox, published,
                         tuple(sorted(Range(t, int(p), int(s), int(e), int(n)) for t, p, s, e, n in ranges)))
                   for i, kind, state, seq, publish, outbox, published, ranges in cur.fetchall()]
        cur.execute("SELECT batch_id, topic, partition, lower(offsets), upper(offsets), incarnation "
                    "FROM eosbatch.committed_ranges WHERE pipeline = %s", (pipeline,))
        coverage = [(b, Range(t, p, s, e, n)) for b, t, p, s, e, n in cur.fetchall()]
        cur.execute("SELECT topic, partition, incarnation, next_offset FROM eosbatch.partition_offsets "
                    "WHERE pipeline = %s", (pipeline,))
        next_offsets = {(t, p): (n, o) for t, p, n, o in cur.fetchall()}
        cur.execute("SELECT commit_seq FROM eosbatch.pipelines WHERE name = %s", (pipeline,))
        row = cur.fetchone()
        cur.execute("SELECT topic, partition, from_incarnation, from_offset, to_offset FROM eosbatch.source_resets "
                    "WHERE pipeline = %s AND to_incarnation = from_incarnation AND to_offset > from_offset",
                    (pipeline,))
        declared = [Range(t, p, start, end, n) for t, p, n, start, end in cur.fetchall()]
        cur.execute('SELECT batch_id, topic, partition, "offset", incarnation, redriven_by IS NOT NULL '
                    "FROM eosbatch.dead_letters WHERE pipeline = %s", (pipeline,))
        dead = [DeadLetter(*r) for r in cur.fetchall()]
    return {"batches": batches, "coverage": coverage, "next_offsets": next_offsets,
            "commit_counter": int(row[0]) if row else 0, "declared": declared, "dead_letters": dead}


def sink_rows(where: Where, spec: SinkSpec) -> Sink:
    schema, _, table = spec.table.rpartition(".")
    with closing(psycopg2.connect(where.dsn())) as connection, connection, connection.cursor() as cur:
        cur.execute(sql.SQL("SELECT row_to_json(t)::text FROM {} t").format(sql.Identifier(schema or "public",
                                                                                            table)))
        rows = [json.loads(r, parse_float=Decimal) for (r,) in cur.fetchall()]
    return Sink(spec.mode, spec.key, rows, spec.accumulate)


def collect(pipeline: str, output: str | None, sink: SinkSpec | None = None, where: Where | None = None,
            inputs: bool = False, settle: float = 30.0) -> History:
    """The history of `pipeline` whose output topic is `output` (None: it has none); its sink's rows with `sink`,
    its input topics' records with `inputs`."""
    where = where or Where.from_env()
    found = ledger(where, pipeline)
    committed = uncommitted = None
    unsettled = ""
    if output is not None:
        committed, unsettled = read(where, output, "read_committed", settle)
        uncommitted, _ = read(where, output, "read_uncommitted")
    read_inputs = None
    if inputs:
        read_inputs = [r for topic in sorted({t for t, _ in found["next_offsets"]})
                       for r in read(where, topic, "read_committed", settle)[0]]
    return History(pipeline, output=committed, uncommitted=uncommitted, unsettled=unsettled,
                   sink=sink_rows(where, sink) if sink is not None else None, inputs=read_inputs, **found)
