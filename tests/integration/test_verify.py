"""The verifier recomputes from the outside and notices loss: each test damages a finished pipeline the
way the PostgreSQL-crash bugs did (a sink emptied behind committed offsets; a batch marked published whose
records never reached the output topic) and `eosbatch verify` must fail, naming the check."""

from __future__ import annotations

import pytest
from psycopg2 import sql

from eosbatch.ledger import store
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def verify(scenario: Scenario, *args: str):
    return scenario.cli("verify", scenario.pipeline, *args)


def test_verify_passes_on_a_clean_run_and_fails_when_rows_or_output_go_missing(settings, unique):
    scenario = Scenario(settings, unique, "latest", records=1200, batch=800)
    assert scenario.run().returncode == 0
    scenario.assert_exactly_once()
    clean = verify(scenario)
    assert clean.returncode == 0, clean.stdout + clean.stderr[-2000:]
    assert "ok   sink = transform(committed input)" in clean.stdout
    assert "ok   dead letters = malformed committed input" in clean.stdout

    # What the staged-then-crashed commit did: offsets moved, ranges covered, but the sink lost rows.
    table = sql.Identifier("public", f"crash_latest_{unique}")
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("DELETE FROM {} WHERE order_id IN (SELECT order_id FROM {} LIMIT 7)").format(table, table))
        cur.execute("DELETE FROM eosbatch.dead_letters WHERE pipeline = %s", (scenario.pipeline,))
    lost = verify(scenario)
    assert lost.returncode == 1, lost.stdout
    assert "FAIL sink = transform(committed input)" in lost.stdout
    assert "FAIL sink = output" in lost.stdout
    assert "FAIL dead letters = malformed committed input" in lost.stdout


def test_verify_fails_when_a_published_batch_has_fewer_output_records_than_it_committed(settings, unique):
    """The runner died after COMMIT and the old publish read an emptied staging table: 'published 0'."""
    scenario = Scenario(settings, unique, "totals", records=1200, batch=800)
    assert scenario.run().returncode == 0
    assert verify(scenario, "--no-recompute").returncode == 0
    with store.transaction(settings) as cur:  # the ledger says the commit wrote more records than Kafka holds
        cur.execute("UPDATE eosbatch.batches SET outbox_records = outbox_records + 5 WHERE id = "
                    "(SELECT max(id) FROM eosbatch.batches WHERE pipeline = %s AND state = 'published')",
                    (scenario.pipeline,))
    short = verify(scenario, "--no-recompute")
    assert short.returncode == 1, short.stdout
    assert "FAIL output" in short.stdout


def test_verify_batch_checks_one_batch_and_names_a_duplicate_output_record(settings, unique):
    """`verify --batch N`: the cheap check at the end of a run. A record of batch N written a second time
    (what a zombie publisher outside any transaction would do) is found through its headers."""
    from confluent_kafka import Producer

    from eosbatch.kafka.read_back import read_topic

    scenario = Scenario(settings, unique, "latest", records=1200, batch=800)
    assert scenario.run().returncode == 0
    batches = [i for i, _, state in scenario.batches() if state == "published"]
    assert len(batches) >= 2
    for batch_id in batches:
        clean = verify(scenario, "--batch", str(batch_id))
        assert clean.returncode == 0, clean.stdout + clean.stderr[-2000:]
        assert "ok   output" in clean.stdout and "ok   dead letters" in clean.stdout
        assert "ok   coverage" in clean.stdout

    last = batches[-1]
    victim = next(r for r in read_topic(settings, scenario.output)
                  if r.headers.get("eosbatch.batch") == str(last).encode())
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    producer.produce(scenario.output, key=victim.key, value=victim.value, headers=list(victim.headers.items()),
                     partition=victim.partition)
    assert producer.flush(30) == 0
    duplicated = verify(scenario, "--batch", str(last))
    assert duplicated.returncode == 1, duplicated.stdout
    assert "FAIL output" in duplicated.stdout and "repeated seq" in duplicated.stdout
    assert verify(scenario, "--batch", str(batches[0])).returncode == 0  # the other batch is untouched


def test_verify_does_not_pass_while_an_open_transaction_hides_the_output_behind_it(settings, unique):
    """read_committed stops at the last stable offset. A verifier that took that for the end would pass over a
    duplicate committed behind a transaction left open (a publisher that died mid-publish, its successor not
    run yet): it must say the output cannot be checked yet, and, once the transaction ends, name the duplicate."""
    from confluent_kafka import Producer

    from eosbatch.kafka.read_back import OpenTransaction, read_topic

    scenario = Scenario(settings, unique, "latest", records=1200, batch=5000)
    assert scenario.run().returncode == 0
    (batch_id,) = [i for i, _, state in scenario.batches() if state == "published"]
    victim = read_topic(settings, scenario.output)[0]
    # open for the whole test: librdkafka's default transaction.timeout.ms (60 s) would let the broker abort it
    # while the two verify runs below wait their 30 s each
    hanging = Producer(settings.kafka(**{"transactional.id": f"hanging-{unique}", "transaction.timeout.ms": 600_000}))
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(scenario.output, value=b"not ours", partition=victim.partition)
    assert hanging.flush(30) == 0
    duplicate = Producer({"bootstrap.servers": settings.kafka_bootstrap})  # behind the open transaction
    duplicate.produce(scenario.output, key=victim.key, value=victim.value, headers=list(victim.headers.items()),
                      partition=victim.partition)
    assert duplicate.flush(30) == 0

    with pytest.raises(OpenTransaction, match=f"partition {victim.partition} at offset"):
        read_topic(settings, scenario.output, stable_timeout=2)
    held = verify(scenario, "--batch", str(batch_id))
    assert held.returncode == 1, held.stdout
    assert "FAIL output" in held.stdout and "an open transaction holds" in held.stdout
    whole = verify(scenario, "--no-recompute")
    assert whole.returncode == 1 and "cannot be checked yet" in whole.stdout, whole.stdout

    hanging.abort_transaction(30)
    found = verify(scenario, "--batch", str(batch_id))
    assert found.returncode == 1, found.stdout
    assert "FAIL output" in found.stdout and "repeated seq" in found.stdout
