"""Deletes (docs/deletes.md): tombstones delete their key in a replace sink and publish a tombstone, a deleted
marker keeps an older row (another partition, a reprocess) from bringing the key back, a newer row does.
Four pipelines over one input (tests/pipelines/deletes.py: String() keys, and a JSON struct key for one of them,
over a twin topic of the same records); the test ends with the
independent count: the input read with read_committed against the sink, the read_committed output (its
tombstones counted) and the dead letters, then `eosbatch verify`'s audit with its Spark recompute. The runs
are made in this process (one Spark Connect session): a CLI process per run cost ~3 s each."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from psycopg2 import sql

from eosbatch.backfill import backfill
from eosbatch.context import Context, quiet
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import store
from eosbatch.running import sequential
from eosbatch.verify import audit, check_output, coverage_gaps
from examples.orders import generate
from tests.pipelines.deletes import make

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

# The records' timestamps: T + their version, in ms (recent: the broker's retention drops older segments).
T = (int(time.time()) - 3600) * 1000
DELETING = ("deletes_pos", "deletes_ts", "deletes_hdr")
Event = tuple[int, str | None, str | None, int]  # partition, key, val (None: a tombstone), version


class Input:
    def __init__(self, settings: Any, suffix: str) -> None:
        self.settings, self.suffix = settings, suffix
        self.topic = f"deletes_in_{suffix}"
        self.pipelines = make(suffix)
        self.json_keyed = f"deletes_jin_{suffix}"  # the same records, keyed by a JSON object (a struct key)
        generate.ensure_topics(settings, {self.topic: 3, self.json_keyed: 3,
                                          **{f"{p}_out_{suffix}": 2 for p in self.pipelines}})
        self.waves = 0

    def write(self, *events: Event) -> None:
        """Records in one Kafka transaction: a value {"id", "val", "version"}, or a tombstone (a null value)
        carrying its version as the header `version`; each stamped T + version."""
        self.waves += 1
        producer = Producer(self.settings.kafka(**{"transactional.id": f"deletes-{self.suffix}-{self.waves}"}))
        producer.init_transactions(30)
        producer.begin_transaction()
        for partition, key, val, version in events:
            value = None if val is None else json.dumps({"id": key, "val": val, "version": version}).encode()
            for topic, keyed in ((self.topic, key), (self.json_keyed, key and json.dumps({"id": key}))):
                producer.produce(topic, partition=partition, key=None if keyed is None else keyed.encode(),
                                 value=value, timestamp=T + version, headers=[("version", str(version).encode())])
        producer.commit_transaction(30)
        generate.await_markers(self.settings, [self.topic, self.json_keyed])

    def run(self, prefixes: tuple[str, ...] = DELETING, early: bool = False) -> list[str]:
        """A run of each pipeline, in this process (one Spark Connect session for all); their logs."""
        settings = self.settings._replace(early_publish=early)
        logs = []
        for prefix in prefixes:
            lines: list[str] = []
            sequential.run(Context(settings, self.pipelines[prefix], lines.append))
            logs.append("\n".join(lines))
        return logs

    def sink(self, prefix: str) -> dict[str, str]:
        with store.transaction(self.settings) as cur:
            cur.execute(sql.SQL("SELECT id, val FROM {}").format(sql.Identifier("public", f"{prefix}_{self.suffix}")))
            return dict(cur.fetchall())

    def output(self, prefix: str) -> tuple[dict[str, str], list[str], int]:
        """The output topic read with read_committed, in commit order: each key's last value (a tombstone
        removes it), the tombstones' keys, and the count of records."""
        records = read_topic(self.settings, f"{prefix}_out_{self.suffix}")  # keyed by the sink key's text
        records.sort(key=lambda r: (int(r.headers["eosbatch.commit_seq"]), int(r.headers["eosbatch.seq"])))
        last: dict[str, str] = {}
        deleted = []
        for r in records:
            key = r.key.decode()
            if r.value is None:
                deleted.append(key)
                last.pop(key, None)
            else:
                last[key] = json.loads(r.value)["val"]
        return last, sorted(deleted), len(records)

    def dead_letters(self, prefix: str) -> list[tuple[int, str]]:
        with store.transaction(self.settings) as cur:
            cur.execute('SELECT partition, error FROM eosbatch.dead_letters WHERE pipeline = %s ORDER BY 1, 2',
                        (f"{prefix}_{self.suffix}",))
            return [tuple(row) for row in cur.fetchall()]


def test_tombstones_delete_publish_and_an_older_row_never_brings_the_key_back(settings, unique):
    data = Input(settings, unique)
    data.write((0, "a", "a1", 10), (0, "b", "b1", 10), (0, "c", "c1", 10), (1, "d", "d1", 10),
               (1, None, None, 20))  # a tombstone without a key: a dead letter
    data.run()
    data.write((0, "a", None, 20),               # deletes a present key
               (0, "z", None, 20),               # an absent key: publishes nothing, leaves a marker
               (1, "d", None, 5),                # older than d1 by order value, later by position
               (0, "b", None, 20), (0, "b", "b2", 25),  # a newer row after the tombstone, in the same batch
               (0, "c", None, 20))
    for log in data.run(early=True):  # which tombstones delete, only the commit can tell
        assert "not published early: its 5 tombstone(s)" in log and "produced while" not in log, log
    data.write((1, "a", "a3", 15),               # older than a's tombstone by order value, in another partition
               (2, "z", "z3", 30))               # newer than z's marker: brings z back
    for log in data.run(early=True):  # the rows a marker holds back are left out of the early records too
        assert "(produced while it committed)" in log, log
    # A reprocess (the replay lane) of the first wave's a1, b1, c1 (partition 0, offsets 0-2): c1 is older
    # than c's marker in its own partition; a and b are held by newer rows.
    backfill(Context(settings, data.pipelines["deletes_pos"], quiet), [f"{data.topic}:0:0-3"], mode="reprocess")
    data.run(("deletes_none",))

    by_position = {"a": "a3", "b": "b2", "z": "z3"}  # a3: across partitions the later commit wins
    by_order = {"b": "b2", "d": "d1", "z": "z3"}
    expected = {"deletes_pos": (by_position, ["a", "c", "d"], 4 + 4 + 2),
                "deletes_ts": (by_order, ["a", "c"], 4 + 3 + 1), "deletes_hdr": (by_order, ["a", "c"], 4 + 3 + 1)}
    inputs = read_topic(settings, data.topic)
    tombstones = [r for r in inputs if r.value is None]
    assert (len(inputs), len(tombstones)) == (13, 6)
    for prefix, (sink, deleted, published) in expected.items():
        assert data.sink(prefix) == sink, prefix
        assert data.output(prefix) == (sink, deleted, published), prefix
        assert data.dead_letters(prefix) == [(1, "value is null (a tombstone) and its key gives no sink.key ['id']")]
        check = check_output(settings, f"{prefix}_{unique}", f"{prefix}_out_{unique}")
        assert check.ok and check.records == published, check
        assert not coverage_gaps(settings, f"{prefix}_{unique}")
    # without deletes every tombstone is a dead letter with the reason, and the rows are kept
    assert data.sink("deletes_none") == {"a": "a3", "b": "b2", "c": "c1", "d": "d1", "z": "z3"}
    assert data.dead_letters("deletes_none") == sorted((r.partition, "value is null (a tombstone): this sink does "
                                                        "not take deletes") for r in tombstones)
    for prefix in DELETING:  # `eosbatch verify`; its Spark recompute (~5 s each) once, where the reprocess ran
        found = audit(Context(settings, data.pipelines[prefix], quiet), recompute=prefix == "deletes_pos")
        assert found.ok, [f.line() for f in found.findings]
