"""The foundation on the real stack: Kafka transactions as read_committed sees them, the LSO, the ledger."""

from __future__ import annotations

from pathlib import Path

import psycopg2
import psycopg2.sql
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from eosbatch.kafka.offsets import bounds
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import lanes, migrate, revisions, store
from eosbatch.ledger.exceptions import LedgerSchemaMissing
from eosbatch.protocol.ranges import TopicPartition
from examples.orders import generate
from tests.conftest import long_lived_ids

pytestmark = pytest.mark.integration


def _topic(settings, name: str, partitions: int = 1) -> str:
    admin = AdminClient(settings.kafka())  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


def _producer(settings, tid: str) -> Producer:
    producer = Producer(settings.kafka(**{"transactional.id": tid}))
    producer.init_transactions(30)
    return producer


def test_read_committed_sees_committed_records_and_never_aborted_ones(settings, unique):
    topic = _topic(settings, f"t_txn_{unique}")
    producer = _producer(settings, f"test-{unique}")
    for value, commit in ((b"kept-1", True), (b"dropped", False), (b"kept-2", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    generate.await_markers(settings, [topic])
    committed = [r.value for r in read_topic(settings, topic)]
    everything = [r.value for r in read_topic(settings, topic, "read_uncommitted")]
    assert committed == [b"kept-1", b"kept-2"]
    assert everything == [b"kept-1", b"dropped", b"kept-2"]
    # Offsets have gaps where the markers and the aborted record sit.
    offsets = [r.offset for r in read_topic(settings, topic)]
    assert offsets[-1] - offsets[0] > 1


def test_last_stable_offset_stops_before_an_open_transaction(settings, unique):
    topic = _topic(settings, f"t_lso_{unique}")
    producer = _producer(settings, f"test-lso-{unique}")
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"committed-%d" % i)
    producer.flush(30)
    producer.commit_transaction(30)
    generate.await_markers(settings, [topic])
    tp = TopicPartition(topic, 0)
    stable_before = bounds(settings, [topic])[tp].stable
    assert stable_before == 4  # three records and the commit marker
    producer.begin_transaction()
    producer.produce(topic, value=b"open")
    producer.flush(30)
    open_bounds = bounds(settings, [topic])[tp]
    assert open_bounds.stable == stable_before, "the LSO must not move past an open transaction"
    producer.commit_transaction(30)
    generate.await_markers(settings, [topic])
    assert bounds(settings, [topic])[tp].stable == stable_before + 2


def test_upgrade_sets_the_transient_reloption_on_tables_an_older_eosbatch_made(settings, unique):
    """Migration 0010: staging and typed outbox tables created without the option (as before 693acba) get it,
    and keep it on a downgrade; tables of other names or schemas, and the ledger's own outbox, are left alone."""
    url = settings.database_url
    made = {("eosbatch", f"stage_{unique}-x"): True, ("eosbatch", f"outbox_{unique}"): True,
            ("public", f"stage_{unique}"): False, ("eosbatch", f"staged{unique}"): False,
            ("eosbatch", f"outboxes{unique}"): False}
    setting = "autovacuum_vacuum_insert_threshold=-1"

    def options() -> dict[tuple[str, str], bool]:
        with raw, raw.cursor() as cur:
            found = {}
            for schema, table in [*made, ("eosbatch", "outbox")]:
                cur.execute("SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE n.nspname = %s AND c.relname = %s", (schema, table))
                found[(schema, table)] = setting in (cur.fetchone()[0] or [])
            return found

    expected = {**made, ("eosbatch", "outbox"): False}
    raw = store.connect(settings, check_schema=False)
    try:
        try:
            migrate.downgrade(url, "0009")
            with raw, raw.cursor() as cur:
                for schema, table in made:
                    cur.execute(psycopg2.sql.SQL("CREATE TABLE {} (a bigint)").format(
                        psycopg2.sql.Identifier(schema, table)))
            assert not any(options().values())
            migrate.upgrade(url, "head")
            assert options() == expected
            migrate.downgrade(url, "0009")
            assert options() == expected
        finally:
            with raw, raw.cursor() as cur:
                for schema, table in made:
                    cur.execute(psycopg2.sql.SQL("DROP TABLE IF EXISTS {}").format(
                        psycopg2.sql.Identifier(schema, table)))
    finally:
        raw.close()
        migrate.upgrade(url, "head")


def test_migrations_downgrade_and_upgrade(settings):
    url = settings.database_url
    try:
        migrate.downgrade(url, "base")
        assert migrate.current(url) is None
        raw = store.connect(settings, check_schema=False)
        with raw, raw.cursor() as cur:
            cur.execute("SELECT to_regclass('eosbatch.batches')")
            assert cur.fetchone()[0] is None
        raw.close()
        with pytest.raises(LedgerSchemaMissing, match="run `eosbatch db upgrade`"), store.transaction(settings):
            pass  # the ledger's own connections refuse a database without the ledger, naming the way out
    finally:
        migrate.upgrade(url, "head")
        long_lived_ids(settings)
    assert migrate.current(url) == revisions.head()
    with store.transaction(settings) as cur:
        cur.execute("SELECT to_regclass('eosbatch.committed_ranges') IS NOT NULL")  # NULL: no such table
        assert cur.fetchone()[0] is True


def test_exclusion_constraint_refuses_overlapping_committed_ranges(settings, unique):
    pipeline = f"p_{unique}"
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline)
        batch = store.create_batch(cur, pipeline, "regular", 0, [], "g")
        insert = ("INSERT INTO eosbatch.committed_ranges (pipeline, topic, partition, incarnation, offsets, batch_id) "
                  "VALUES (%s, 't', 0, %s, int8range(%s, %s), %s)")
        cur.execute(insert, (pipeline, 0, 0, 100, batch.id))
        cur.execute(insert, (pipeline, 0, 100, 200, batch.id))  # adjacent is fine: ranges are half-open
        cur.execute(insert.replace("'t', 0,", "'t', 1,"), (pipeline, 0, 50, 150, batch.id))  # other partition
        # The same offsets of another incarnation (the topic recreated, or its log went back) are other records.
        cur.execute(insert, (pipeline, 1, 0, 100, batch.id))
    with pytest.raises(psycopg2.errors.ExclusionViolation), store.transaction(settings) as cur:
        cur.execute(insert, (pipeline, 0, 150, 250, batch.id))
    with pytest.raises(psycopg2.errors.NotNullViolation), store.transaction(settings) as cur:
        # A commit that does not say which incarnation it covers fails rather than landing in incarnation 0.
        cur.execute("INSERT INTO eosbatch.committed_ranges (pipeline, topic, partition, offsets, batch_id) "
                    "VALUES (%s, 't', 2, int8range(0, 5), %s)", (pipeline, batch.id))


@pytest.mark.spark
def test_the_engine_log_rolls_over_by_size_and_leaves_the_kafka_clients_chatter_out(settings, unique):
    """A long-lived Spark Connect server must not fill the disk: log4j2 rolls its log over by size, and the Kafka
    clients' INFO lines (each consumer's whole configuration, each seek: 75 MB per quarter hour of 1M-record
    batches) stay out. Checked on the running server and on what one real batch adds to its log."""
    from eosbatch import stack
    from eosbatch.engine.log4j import LOG_BYTES, LOG_FILES
    from eosbatch.stack import processes, spark_connect
    from tests.scenario import Scenario

    home = stack.home() / "spark-connect"
    log, config = home / "spark-connect.log", home / "log4j2.properties"
    pid = processes.read_pid(home / "spark-connect.pid")
    assert pid is not None, "the stack's Spark Connect server is not running"
    arguments = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
    assert f"-Dlog4j2.configurationFile=file:{config}".encode() in arguments, \
        "the running Connect server was started without eosbatch's log configuration (restart it: stack up)"
    assert spark_connect.JAVA_OPTIONS.encode() in arguments  # the Parallel collector (spark_connect.JAVA_OPTIONS)
    declared = dict(line.split(" = ", 1) for line in config.read_text().splitlines() if " = " in line)
    assert declared["appender.file.type"] == "RollingFile" and declared["appender.file.fileName"] == str(log)
    assert (declared["appender.file.policies.size.size"], declared["appender.file.strategy.max"]) == \
        (LOG_BYTES, str(LOG_FILES))

    before = log.stat().st_size
    scenario = Scenario(settings, unique, "latest", records=1200, batch=5000)
    done = scenario.run()
    assert done.returncode == 0, done.stderr[-3000:]
    scenario.assert_exactly_once()
    with log.open("rb") as file:
        file.seek(before if log.stat().st_size >= before else 0)  # rolled over meanwhile: all of the new file
        grown = file.read().decode(errors="replace")
    assert " INFO DAGScheduler: Job " in grown, "the batch's Spark jobs are not in the server's log"
    chatter = [line for line in grown.splitlines() if " INFO " in line and ("SubscriptionState" in line or
               "ConsumerConfig" in line or "AppInfoParser" in line or "KafkaConsumer" in line)]
    assert not chatter, chatter[:5]


def test_the_running_engine_is_supervised_and_status_says_by_what() -> None:
    """`stack up` starts the Connect server under its supervisor (what restarts it when it dies: the chaos suite
    kills it), and `stack status` names both."""
    import subprocess
    import sys

    from eosbatch import stack
    from eosbatch.stack import processes

    home = stack.home() / "spark-connect"
    server = processes.read_pid(home / "spark-connect.pid")
    supervisor = processes.read_pid(processes.supervisor_pid_file(home / "spark-connect.pid"))
    assert server is not None and supervisor is not None, (server, supervisor)
    parent = int((Path("/proc") / str(server) / "stat").read_text().rpartition(")")[2].split()[1])
    assert parent == supervisor, f"the server {server} is a child of {parent}, not of its supervisor {supervisor}"
    shown = subprocess.run([sys.executable, "-m", "eosbatch.cli", "stack", "status"], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert f"pid={server} supervisor={supervisor} " in shown, shown
