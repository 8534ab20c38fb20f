"""The history checker and `eosbatch verify` on histories tampered on a real stack (issue 37, item 5): after a clean
run, one anomaly at a time is made by hand (a sink row deleted, the commit sequence broken in the ledger, an output
record produced twice in a committed transaction, a record committed under an attempt id that aborted), and both
judges must report it. The clean history passes both first. tests/chaos/judge.py runs them."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from psycopg2 import sql

from eosbatch.ledger import store
from tests.chaos.judge import Verdicts, judge
from tests.history.collect import Where, read
from tests.history.history import ATTEMPT, PIPELINE, Record
from tests.scenario import Scenario

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def _judged(scenario: Scenario) -> Verdicts:
    verdicts = judge(scenario.settings, scenario.pipeline, scenario.output, scenario.history_sink(), scenario.env())
    assert verdicts.agree, f"eosbatch verify and the history checker disagree:\n{verdicts.describe()}"
    return verdicts


def _reported(scenario: Scenario, kind: str, verify_says: str) -> Verdicts:
    verdicts = _judged(scenario)
    assert not verdicts.verify_ok and kind in {a.kind for a in verdicts.anomalies}, verdicts.describe()
    assert verify_says in verdicts.verify_out, verdicts.describe()
    print(f"\n--- {scenario.pipeline}, tampered: {verdicts.describe()[:1500]}")  # shown with -s
    return verdicts


def _produce(scenario: Scenario, records: list[Record], commit: bool, attempt: bytes | None = None) -> None:
    """`records` again in one transaction of a transactional id of the test's own, committed or aborted; with
    `attempt`, each carrying that attempt header instead of its own."""
    producer = Producer({"bootstrap.servers": scenario.settings.kafka_bootstrap, **scenario.settings.kafka_config,
                         "transactional.id": f"tamper-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for r in records:
        headers = {**r.headers, **({ATTEMPT: attempt} if attempt else {})}
        producer.produce(scenario.output, r.value, r.key, partition=r.partition, headers=list(headers.items()))
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def _published(scenario: Scenario) -> list[Record]:
    where = Where(scenario.settings.kafka_bootstrap, scenario.settings.database_url, scenario.settings.kafka_config)
    records, unsettled = read(where, scenario.output)
    assert not unsettled
    return [r for r in records if r.headers.get(PIPELINE) == scenario.pipeline.encode()]


def test_both_judges_report_each_anomaly_tampered_into_a_real_history(settings, unique):
    totals = Scenario(settings, unique, "totals", records=1200, batch=500)  # three batches
    latest = Scenario(settings, unique, "latest", records=0, batch=500)  # the same input, another pipeline
    for scenario in (totals, latest):
        done = scenario.run()
        assert done.returncode == 0, done.stderr[-3000:]
        assert not _judged(scenario).anomalies  # the clean history passes both

    # a sink row deleted (then put back)
    table = sql.Identifier("public", f"crash_totals_{unique}")
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("DELETE FROM {} WHERE customer_id = (SELECT min(customer_id) FROM {}) "
                            "RETURNING *").format(table, table))
        row = cur.fetchone()
    _reported(totals, "sink-output", "FAIL sink = output")
    with store.transaction(settings) as cur:
        values = sql.SQL(", ").join([sql.Placeholder()] * len(row))
        cur.execute(sql.SQL("INSERT INTO {} VALUES ({})").format(table, values), row)

    # the commit sequence broken in the ledger: the last batch's number moved up, past the counter (then put back)
    with store.transaction(settings) as cur:
        cur.execute("UPDATE eosbatch.batches SET commit_seq = commit_seq + 5 WHERE id = (SELECT max(id) FROM "
                    "eosbatch.batches WHERE pipeline = %s AND commit_seq IS NOT NULL) RETURNING id", (totals.pipeline,))
        [moved] = cur.fetchone()
    _reported(totals, "commit-seq-gap", "FAIL commit order")
    with store.transaction(settings) as cur:
        cur.execute("UPDATE eosbatch.batches SET commit_seq = commit_seq - 5 WHERE id = %s", (moved,))
    assert not _judged(totals).anomalies

    # an output record produced again in a committed transaction
    first = _published(totals)[0]
    _produce(totals, [first], commit=True)
    _reported(totals, "duplicate-output", "FAIL output")

    # a record committed under an attempt id whose transaction aborted: first its aborted records, then one more
    # record of the same attempt, committed (an aborted transaction's output becoming visible)
    records = _published(latest)
    aborted = b"tamper/" + uuid.uuid4().hex.encode()
    _produce(latest, records[:2], commit=False, attempt=aborted)
    _produce(latest, records[:1], commit=True, attempt=aborted)
    verdicts = _reported(latest, "aborted-read", "FAIL output")
    assert "more than one Kafka transaction" in verdicts.verify_out, verdicts.describe()
