"""One integration test's own input topic, pipelines and ledger rows, the CLI run against them, and the
exactly-once checks of the end state (sink, dead letters, coverage, read_committed output)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from psycopg2 import sql

from eosbatch import config, faults, registry
from eosbatch.context import Context, Log, quiet
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import claims, positions, store
from eosbatch.verify import check_output, coverage_gaps
from examples.orders import generate
from tests.history.collect import SinkSpec

ROOT = Path(__file__).resolve().parents[1]


def context(pipeline: str, log: Log = quiet) -> Context:
    """What a step takes: this environment's settings, the registered pipeline, a log."""
    return Context(config.load(), registry.get(pipeline), log)


class Scenario:
    """`kind` is "totals" (accumulate sink), "latest" (replace sink) or "events" (append sink); see
    tests/pipelines/crash.py; or "latest_avro" (replace, its output Avro with a composite key and a copied header:
    tests/pipelines/crash_avro.py); or "deletes" (latest's sink with deletes, whose input has tombstones:
    tests/pipelines/crash_deletes.py); or "evolving" (latest's sink evolving, a jsonb column `detail` from the
    second batch on: tests/pipelines/crash_evolving.py)."""

    def __init__(self, settings, suffix: str, kind: str, records: int = 2400, batch: int = 1500,
                 start: str = "earliest", seed: int | None = None, create_output: bool = True,
                 partitions: int = 3) -> None:
        self.settings, self.suffix, self.kind, self.partitions = settings, suffix, kind, partitions
        self.batch, self.start = batch, start
        self.pipeline = f"crash_{kind}_{suffix}"
        self.input = f"crash_in_{suffix}"
        self.output = f"crash_{kind}_out_{suffix}"
        generate.ensure_topics(settings, {self.input: partitions, **({self.output: 3} if create_output else {})})
        self.waves = 0
        self.env_overrides: dict[str, str] = {}  # settings of the CLI runs only (e.g. another Kafka principal)
        if records:
            self.produce(records, seed)

    def produce(self, records: int, seed: int | None = None) -> None:
        """More input: transactions (every 5th aborted), repeated order ids, a few malformed records."""
        self.waves += 1
        generate.generate(self.settings, self.input, records=records, partitions=self.partitions, transaction_size=200,
                          malformed_every=331, seed=seed if seed is not None else len(self.suffix) + 10 + self.waves,
                          customers=40, **({"tombstone_every": 9} if self.kind == "deletes" else {}))

    def env(self, fault: str | None = None) -> dict[str, str]:
        module = {"latest_avro": "tests.pipelines.crash_avro", "deletes": "tests.pipelines.crash_deletes",
                  "evolving": "tests.pipelines.crash_evolving"}.get(
            self.kind, "tests.pipelines.crash")
        env = {**os.environ, config.DATABASE_URL: self.settings.database_url, "EOSBATCH_PIPELINES": module,
               "EOSBATCH_TEST_SUFFIX": self.suffix,
               "EOSBATCH_TEST_BATCH": str(self.batch), "EOSBATCH_TEST_START": self.start,
               "PYTHONPATH": str(ROOT), "EOSBATCH_SPARK_MASTER": "local[2,3]"}  # 3 tries per Spark task
        env.pop(faults.FAULT, None)
        env.update(self.env_overrides)
        if fault:
            env[faults.FAULT] = fault
        return env

    def cli(self, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        """`eosbatch <args>` in a process of its own, as a user (or a DAG task) runs it: no terminal on stdin,
        so a destructive command runs only with --yes."""
        return subprocess.run([sys.executable, "-m", "eosbatch.cli", *args], env=self.env(fault),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900, cwd=ROOT)

    def run(self, fault: str | None = None, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli("run", self.pipeline, *args, fault=fault)

    def batches(self) -> list[tuple[int, str, str]]:
        """(id, kind, state) of this scenario's batches, oldest first."""
        with store.transaction(self.settings) as cur:
            cur.execute("SELECT id, kind, state FROM eosbatch.batches WHERE pipeline = %s ORDER BY id",
                        (self.pipeline,))
            return [tuple(row) for row in cur.fetchall()]

    def states(self) -> list[str]:
        return [state for _, _, state in self.batches()]

    def sink(self) -> dict:
        table = sql.Identifier("public", f"crash_{self.kind}_{self.suffix}")
        with store.transaction(self.settings) as cur:
            if self.kind == "totals":
                cur.execute(sql.SQL("SELECT customer_id, total_amount, order_count FROM {}").format(table))
                return {c: (Decimal(t), n) for c, t, n in cur.fetchall()}
            if self.kind == "events":  # keyed by source position and row number: a duplicate cannot hide here
                cur.execute(sql.SQL('SELECT topic, partition, "offset", row_in_record, order_id, side, amount '
                                    "FROM {}").format(table))
                return {tuple(row[:4]): tuple(row[4:]) for row in cur.fetchall()}
            if self.kind == "evolving":  # the amount and the column the second batch added (jsonb)
                cur.execute(sql.SQL("SELECT order_id, amount, detail FROM {}").format(table))
                return {order_id: (amount, detail) for order_id, amount, detail in cur.fetchall()}
            cur.execute(sql.SQL("SELECT order_id, amount FROM {}").format(table))
            return dict(cur.fetchall())

    def expected_latest(self, latest: dict[str, dict]) -> dict:
        """What sink() holds for each order's latest version; "evolving": with its `detail`, which tests/pipelines/
        factory.py's to_evolving gave the orders of every published batch but the first (ranges from offset 0)."""
        if self.kind != "evolving":
            return {k: v["amount"] for k, v in latest.items()}
        with store.transaction(self.settings) as cur:
            later = [r for batch_id, kind, state in self.batches() if state == "published" and kind == "regular"
                     for batch in [store.get_batch(cur, batch_id)] if any(r.start for r in batch.ranges)
                     for r in batch.ranges]
        assert later, "no batch after the first: the sink's shape never changed"

        def detail(order: dict) -> dict | None:
            later_batch = any(r.partition == order["partition"] and r.start <= order["offset"] < r.end for r in later)
            return {"customer_id": order["customer_id"], "order_id": order["order_id"]} if later_batch else None

        return {k: (v["amount"], detail(v)) for k, v in latest.items()}

    def value(self, output) -> dict:  # noqa: ANN001 - a read_back.Record
        """An output record's value; for "latest_avro" decoded from the wire format with fastavro, its key and
        copied header checked against it."""
        if self.kind != "latest_avro":
            return json.loads(output.value)  # type: ignore[no-any-return]
        import io

        import fastavro

        from tests.pipelines.crash_avro import SCHEMA, SCHEMA_ID

        assert output.value[:5] == b"\x00" + SCHEMA_ID.to_bytes(4, "big")
        row = fastavro.schemaless_reader(io.BytesIO(output.value[5:]), fastavro.parse_schema(SCHEMA))
        assert isinstance(row, dict)
        assert output.key == json.dumps({"customer_id": row["customer_id"], "order_id": row["order_id"]},
                                        separators=(",", ":")).encode()
        assert output.headers.get("status") == (None if row["status"] is None else row["status"].encode())
        return row

    def history_sink(self) -> SinkSpec:
        """The sink as the history checker (tests/history) compares it with the output."""
        table = f"crash_{self.kind}_{self.suffix}"
        if self.kind == "totals":
            return SinkSpec(table, ("customer_id",), "accumulate", ("total_amount", "order_count"))
        if self.kind == "events":
            return SinkSpec(table, ("topic", "partition", "offset", "row_in_record"), "append")
        return SinkSpec(table, ("order_id",))

    def history_decoder(self) -> Callable[[bytes], dict[str, Any]] | None:
        """How the checker reads an output value: JSON (None), or the Avro of "latest_avro"."""
        if self.kind != "latest_avro":
            return None
        from tests.chaos.judge import avro_decoder
        from tests.pipelines.crash_avro import SCHEMA, SCHEMA_ID

        return avro_decoder(SCHEMA, SCHEMA_ID)

    def assert_exactly_once(self, from_log_start: bool = True) -> None:
        inputs = read_topic(self.settings, self.input)
        orders, malformed = generate.valid_orders(inputs)
        assert not any(o["customer_id"].startswith("ghost") for o in orders), "read_committed leaked"
        tombstones = [(r.key.decode(), r.partition, r.offset) for r in inputs if r.value is None]
        if self.kind == "deletes":  # tombstones delete their order; they are not dead letters
            malformed -= len(tombstones)
        latest = generate.expected_latest(orders, tombstones if self.kind == "deletes" else ())
        if self.kind == "totals":
            assert self.sink() == generate.expected_totals(orders)
        elif self.kind == "events":
            assert self.sink() == expected_events(self.input, orders)
        else:
            assert self.sink() == self.expected_latest(latest)
        with store.transaction(self.settings) as cur:
            cur.execute('SELECT topic, partition, "offset" FROM eosbatch.dead_letters WHERE pipeline = %s',
                        (self.pipeline,))
            dead = cur.fetchall()
            next_offsets = positions.next_offsets(cur, self.pipeline)
            covered = claims.committed_coverage(cur, self.pipeline)
        assert len(dead) == malformed and all(t == self.input for t, _, _ in dead)
        assert next_offsets and all(o > 0 for o in next_offsets.values())
        assert not coverage_gaps(self.settings, self.pipeline)
        if from_log_start:  # every offset from the first one on is covered, once
            assert {tp: min(r.start for r in covered if r.tp == tp) for tp in next_offsets} == \
                {tp: 0 for tp in next_offsets}
        assert set(self.states()) <= {"published", "aborted"}
        with store.transaction(self.settings) as cur:  # every published batch knows its count, fixed at commit
            cur.execute("SELECT id, published_records, outbox_records FROM eosbatch.batches WHERE pipeline = %s "
                        "AND state = 'published' AND (published_records IS NULL OR published_records <> outbox_records "
                        # a batch committed by the previous release has no outbox: the count its publish made
                        "OR (outbox_records IS NULL AND commit_seq IS NOT NULL))", (self.pipeline,))
            assert cur.fetchall() == []
        outputs = read_topic(self.settings, self.output)
        check = check_output(self.settings, self.pipeline, self.output, outputs)
        assert check.ok, check
        if self.kind == "events":  # one record per stored row, each once: the published rows are the sink
            rows = [json.loads(r.value) for r in outputs]
            published = {(r["topic"], r["partition"], r["offset"], r["row_in_record"]): (r["order_id"], r["side"],
                                                                                         r["amount"]) for r in rows}
            assert len(published) == len(rows) and published == expected_events(self.input, orders)
        elif self.kind == "totals":  # the deltas published add up to the sink: no batch published twice
            sums: dict[str, Decimal] = {}
            for record in outputs:
                row = json.loads(record.value)
                sums[row["customer_id"]] = sums.get(row["customer_id"], Decimal(0)) + Decimal(str(row["total_amount"]))
            assert sums == {k: v[0] for k, v in generate.expected_totals(orders).items()}
        else:  # each key's last published value, in commit order, is its latest in the input: nothing lost
            ordered = sorted(outputs, key=lambda r: int(r.headers.get("eosbatch.commit_seq", b"0")))
            last: dict[str, Any] = {}
            for r in ordered:
                if r.value is None:  # a tombstone: the sink deleted the order
                    last.pop(r.key.decode(), None)
                else:
                    row = self.value(r)
                    last[row["order_id"]] = (row["amount"], row.get("detail")) if self.kind == "evolving" \
                        else row["amount"]
            assert last == self.expected_latest(latest)


def expected_events(topic: str, orders: list[dict]) -> dict[tuple, tuple]:
    """tests/pipelines/factory.py's to_events in plain Python, numbered as an append sink numbers a record's rows
    (in the order of their other columns, order_id, customer_id, amount, side: for a positive amount the debit,
    -amount, is row 1 and the credit row 2)."""
    events = {}
    for order in orders:
        amount = float(order["amount"])
        rows = sorted([(order["order_id"], order["customer_id"], amount, "credit"),
                       (order["order_id"], order["customer_id"], -amount, "debit")])
        for number, (order_id, _, signed, side) in enumerate(rows, 1):
            events[(topic, order["partition"], order["offset"], number)] = (order_id, side, signed)
    return events
