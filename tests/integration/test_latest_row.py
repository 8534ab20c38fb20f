"""Replace sinks keep the right row (docs/design.md, "Choosing the latest row"), and the output topic carries
exactly what the sink accepted: each test ends with sink and output equal key by key, checked from the
outside (the sink table, and the output read with read_committed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from psycopg2 import sql

from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import cleanup, store
from examples.orders import generate
from tests.scenario import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(autouse=True, params=["0", "1"], ids=["publish-after-commit", "early-publish"])
def publish_mode(request, monkeypatch) -> str:
    """Each case twice: publish after the commit, and EOSBATCH_EARLY_PUBLISH (records produced while the commit
    runs, dropped for the outbox's when the sink refused a row): the output must be the same."""
    monkeypatch.setenv("EOSBATCH_EARLY_PUBLISH", request.param)
    return request.param


class Versions:
    def __init__(self, settings, suffix: str) -> None:
        self.settings, self.suffix = settings, suffix
        self.input = f"versions_in_{suffix}"
        generate.ensure_topics(settings, {self.input: 4, f"versions_out_{suffix}": 2,
                                          f"versions_ts_out_{suffix}": 2, f"versions_bare_out_{suffix}": 2,
                                          f"versions_keys_out_{suffix}": 2})

    def write(self, *records: tuple[int, str, str | None, int | None]) -> None:
        """(partition, id, value, version) records, committed in one Kafka transaction."""
        producer = Producer(self.settings.kafka(**{"transactional.id": f"versions-{self.suffix}"}))
        producer.init_transactions(30)
        producer.begin_transaction()
        for partition, key, value, version in records:
            producer.produce(self.input, partition=partition, key=key.encode(),
                             value=json.dumps({"id": key, "val": value, "version": version}).encode())
        producer.commit_transaction(30)
        generate.await_markers(self.settings, [self.input])

    def run(self, pipeline: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "EOSBATCH_PIPELINES": "tests.pipelines.versions", "EOSBATCH_TEST_SUFFIX": self.suffix,
               "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "eosbatch.cli", "run", f"{pipeline}_{self.suffix}"], env=env,
                              capture_output=True, text=True, timeout=600, cwd=ROOT)

    def sink(self, pipeline: str) -> dict[str, str | None]:
        with store.transaction(self.settings) as cur:
            table = sql.Identifier("public", f"{pipeline}_{self.suffix}")
            cur.execute(sql.SQL("SELECT id, val FROM {}").format(table))
            return dict(cur.fetchall())

    def output(self, pipeline: str) -> dict[str, str | None]:
        """The last published value of each key, in commit order (the commit sequence header)."""
        records = read_topic(self.settings, f"{pipeline}_out_{self.suffix}")
        records.sort(key=lambda r: (int(r.headers["eosbatch.commit_seq"]), int(r.headers["eosbatch.seq"])))
        return {json.loads(r.value)["id"]: json.loads(r.value)["val"] for r in records}


def test_a_later_update_in_a_lower_partition_wins_and_a_stale_row_is_neither_stored_nor_published(settings, unique):
    v = Versions(settings, unique)
    v.write((3, "k", "first, partition 3", None), (3, "stay", "only", None))
    assert v.run("versions").returncode == 0
    v.write((0, "k", "second, partition 0", None))  # the same key moved to a lower partition, later
    assert v.run("versions").returncode == 0
    assert v.sink("versions") == {"k": "second, partition 0", "stay": "only"}
    v.write((3, "k", "third, partition 3 again", None))
    assert v.run("versions").returncode == 0
    assert v.sink("versions") == {"k": "third, partition 3 again", "stay": "only"}
    assert v.output("versions") == v.sink("versions")


@pytest.mark.parametrize(("pipeline", "written", "refusal"), [
    ("versions", ((1, "twice", "a", None), (2, "twice", "b", None)), "2 partitions of one batch"),
    ("versions_bare", ((1, "twice", "a", None), (1, "twice", "b", None)), "2 times of one batch"),
])
def test_a_key_nothing_orders_in_one_batch_is_refused_naming_the_key(settings, unique, pipeline, written, refusal):
    """Refused with the key named, and nothing of the batch stays: not in the sink, the outbox or the output
    (the commit statement finds the key after it wrote; its transaction rolls back)."""
    v = Versions(settings, unique)
    v.write((0, "once", "fine", None), *written)
    failed = v.run(pipeline)
    assert failed.returncode == 2, failed.stderr[-2000:]
    assert "'id': 'twice'" in failed.stderr and refusal in failed.stderr, failed.stderr[-2000:]
    assert v.sink(pipeline) == {} and v.output(pipeline) == {}
    with store.transaction(settings) as cur:
        cur.execute("SELECT count(*) FROM eosbatch.outbox o JOIN eosbatch.batches b ON b.id = o.batch_id "
                    "WHERE b.pipeline = %s", (f"{pipeline}_{unique}",))
        assert cur.fetchone()[0] == 0
        typed = sql.Identifier("eosbatch", f"outbox_{pipeline}_{unique}")  # created by the commit it rolled back
        assert not cleanup.table_exists(cur, typed)
        cur.execute("SELECT state FROM eosbatch.batches WHERE pipeline = %s", (f"{pipeline}_{unique}",))
        assert [state for (state,) in cur.fetchall()] == ["aborted"]  # by the run's failure path, not committed


def test_a_sink_of_the_key_alone_stores_and_publishes_each_key_once(settings, unique):
    """Nothing to update and nothing to order but the key: the commit inserts new keys and publishes them."""
    v = Versions(settings, unique)
    v.write((0, "a", None, None), (1, "b", None, None))
    assert v.run("versions_keys").returncode == 0
    v.write((2, "b", None, None), (3, "c", None, None))  # b again, in a later batch: already stored
    assert v.run("versions_keys").returncode == 0
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier(f"versions_keys_{unique}")))
        assert [key for (key,) in cur.fetchall()] == ["a", "b", "c"]
    published = [json.loads(r.value)["id"] for r in read_topic(settings, f"versions_keys_out_{unique}")]
    assert sorted(published) == ["a", "b", "c"]


def test_order_by_highest_wins_null_never_wins_and_never_freezes_a_key(settings, unique, publish_mode):
    v = Versions(settings, unique)
    v.write((0, "a", "a null first", None), (1, "b", "b v5", 5), (2, "c", "c v2", 2), (2, "c", "c null", None))
    assert v.run("versions_ts").returncode == 0
    assert v.sink("versions_ts") == {"a": "a null first", "b": "b v5", "c": "c v2"}
    # a value replaces a stored NULL; a lower version and a NULL never replace a higher one; a higher one does
    v.write((3, "a", "a v1", 1), (0, "b", "b v4", 4), (0, "b", "b null", None), (1, "c", "c v3", 3))
    second = v.run("versions_ts")
    assert second.returncode == 0
    assert v.sink("versions_ts") == {"a": "a v1", "b": "b v5", "c": "c v3"}
    assert v.output("versions_ts") == v.sink("versions_ts")
    if publish_mode == "1":  # b v4 went into the early transaction, the sink refused it: the outbox's records
        assert "early publish dropped (the outbox holds 2 records, 3 were produced)" in second.stdout, second.stdout


def test_a_record_too_big_for_the_output_goes_to_dead_letters_and_never_blocks_the_lane(settings, unique):
    """A row larger than the output topic takes (here a 300 kB row, a topic of max.message.bytes=200000) is
    refused before the commit, with the reason: not stored, not published, and the records around it (in
    the same batch and after it) flow as usual. A 100 kB row fits although the commit's cheap size bound
    (6 bytes a character) says it might not: the exact size decides then."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings.kafka())
    admin.create_topics([NewTopic(f"versions_out_{unique}", 2, 1, config={"max.message.bytes": "200000"})]
                        )[f"versions_out_{unique}"].result(30)
    v = Versions(settings, unique)
    v.write((0, "small", "fits", None), (1, "huge", "x" * 300_000, None), (0, "medium", "y" * 100_000, None))
    done = v.run("versions")
    assert done.returncode == 0, done.stderr[-2000:]
    v.write((1, "after", "flows", None))
    assert v.run("versions").returncode == 0
    assert v.sink("versions") == {"small": "fits", "medium": "y" * 100_000, "after": "flows"}
    assert v.output("versions") == v.sink("versions")
    with store.transaction(settings) as cur:
        cur.execute("SELECT convert_from(key, 'UTF8'), error FROM eosbatch.dead_letters WHERE pipeline = %s",
                    (f"versions_{unique}",))
        (key, error), = cur.fetchall()
    assert key == "huge" and "exceeds the output topic's limit" in error
    verified = subprocess.run([sys.executable, "-m", "eosbatch.cli", "verify", f"versions_{unique}"],
                              env={**os.environ, "EOSBATCH_PIPELINES": "tests.pipelines.versions",
                                   "EOSBATCH_TEST_SUFFIX": unique, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert verified.returncode == 0, verified.stdout + verified.stderr[-2000:]
