"""Event-driven runs (AirflowOptions(trigger="data")): the trigger against the real Kafka and ledger, then a DAG
that runs by itself through the real scheduler and triggerer, exactly-once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Producer

from eosbatch.ledger import lanes, positions, store
from eosbatch.orchestration import triggers
from eosbatch.protocol.ranges import TopicPartition
from examples.orders import generate
from tests.orchestration.helpers import LocalAirflow
from tests.scenario import Scenario

POLL = 0.2
SETTLE = 10 * POLL  # long enough for several polls: an event that was going to come has come


@contextmanager
def watching(trigger: triggers.SourceAhead) -> Iterator[list[dict[str, Any]]]:
    """The trigger's run() in an event loop of its own (as the triggerer runs it); the payloads it yields."""
    events: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, asyncio.Task[None]] = {}

    async def consume() -> None:
        async for event in trigger.run():
            events.append(event.payload)

    def main() -> None:
        asyncio.set_event_loop(loop)
        holder["task"] = loop.create_task(consume())
        started.set()
        try:
            loop.run_until_complete(holder["task"])
        except asyncio.CancelledError:
            pass
        finally:
            loop.close()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield events
    finally:
        loop.call_soon_threadsafe(holder["task"].cancel)
        thread.join(30)


def wait_for(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout:.0f}s")


def settled(events: list[dict[str, Any]], count: int) -> None:
    """`count` events, and no more after several polls."""
    wait_for(lambda: len(events) >= count)
    time.sleep(SETTLE)
    assert len(events) == count, events


def commit_records(settings, topic: str, partitions: int, records: int) -> None:
    """One committed transaction of `records` records spread over the partitions."""
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, **settings.kafka_config,
                         "transactional.id": f"test-data-trigger-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for n in range(records):
        producer.produce(topic, json.dumps({"n": n}).encode(), partition=n % partitions)
    producer.commit_transaction(30)


def ledger_at_lso(settings, pipeline: str, topic: str, partitions: int) -> None:
    """The ledger's next offsets moved to the last stable offsets, as a commit moves them."""
    from eosbatch.exceptions import TransientError
    from eosbatch.kafka import offsets
    from eosbatch.kafka.exceptions import TopicMissing

    for _ in range(100):  # a topic just created may have no leader yet
        try:
            ends = {tp: b.stable for tp, b in offsets.bounds(settings, [topic]).items()}
            break
        except (TransientError, TopicMissing):
            time.sleep(0.2)
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline)
        positions.add_partitions(cur, pipeline, {TopicPartition(topic, p): 0 for p in range(partitions)})
        positions.set_next_offsets(cur, pipeline, ends)


@pytest.mark.integration
def test_the_trigger_fires_once_per_advance_of_the_last_stable_offset(settings, unique) -> None:
    topic, pipeline, partitions = f"data_trigger_{unique}", f"data_trigger_{unique}", 3
    generate.ensure_topics(settings, {topic: partitions})
    ledger_at_lso(settings, pipeline, topic, partitions)  # tracked and caught up
    with watching(triggers.SourceAhead(pipeline, [topic], POLL)) as events:
        settled(events, 0)  # caught up: nothing
        commit_records(settings, topic, partitions, 30)  # one transaction: 30 records, one event
        settled(events, 1)
        assert events[0] == {"pipeline": pipeline, "partitions": 3, "partitions_behind": 3, "records_behind": 33}
        commit_records(settings, topic, partitions, 5)  # the LSO advances again: one more event
        settled(events, 2)
        ledger_at_lso(settings, pipeline, topic, partitions)  # the run committed: caught up, nothing
        settled(events, 2)
        # an open transaction holds the LSO back: no event until it commits
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, **settings.kafka_config,
                             "transactional.id": f"test-data-trigger-open-{unique}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b'{"open": true}', partition=0)
        producer.flush(30)
        settled(events, 2)
        producer.commit_transaction(30)
        settled(events, 3)
        assert events[2]["partitions_behind"] == 1 and events[2]["records_behind"] == 2  # the record, its marker


@pytest.mark.integration
def test_a_new_pipeline_fires_once_so_a_plan_starts_tracking_it(settings, unique) -> None:
    topic = f"data_trigger_new_{unique}"
    generate.ensure_topics(settings, {topic: 2})
    with watching(triggers.SourceAhead(f"data_trigger_new_{unique}", [topic], POLL)) as events:
        settled(events, 1)  # untracked partitions: one run, whose plan records where they start
    assert events == [{"pipeline": f"data_trigger_new_{unique}", "partitions": 2, "partitions_behind": 2,
                       "records_behind": 0}]


@pytest.mark.integration
@pytest.mark.airflow
@pytest.mark.spark
@pytest.mark.slow
def test_a_data_triggered_dag_runs_by_itself_exactly_once(scheduler: LocalAirflow, settings) -> None:
    """Records committed to the source start a run through the triggerer and the scheduler; nobody triggers
    it. The sink and the output hold them exactly once; more records, another run by itself."""
    scenario = Scenario(settings, scheduler.suffixes["data"], "totals", records=0, batch=100_000)
    dag = f"eosbatch__{scenario.pipeline}"
    scheduler.unpause(dag)
    for wave, records in enumerate((300, 200), start=1):
        before = len(scheduler.runs(dag))
        produced = time.monotonic()
        scenario.produce(records)
        runs = scheduler.wait_runs(dag, before + 1, timeout=180)
        run_id, run_type = runs[before]
        assert run_type == "asset_triggered", runs
        assert scheduler.wait_run(dag, run_id) == "success"
        # a run started before every record was seen leaves the rest to the next run: wait for the ledger
        wait_for(lambda: not _behind(settings, scenario), timeout=300)
        for later_id, _ in scheduler.runs(dag):
            assert scheduler.wait_run(dag, later_id) == "success"
        print(f"wave {wave}: {records} records, {len(scheduler.runs(dag)) - before} run(s), caught up "
              f"{time.monotonic() - produced:.1f}s after the produce started")
        print(scheduler.timeline(dag, run_id))
        scenario.assert_exactly_once()
    # caught up, nothing more: no run starts by itself (once a run queued by events during the last one is done)
    time.sleep(5)
    for later_id, _ in scheduler.runs(dag):
        assert scheduler.wait_run(dag, later_id) == "success"
    count = len(scheduler.runs(dag))
    time.sleep(10)
    assert len(scheduler.runs(dag)) == count
    print(f"exactly-once: OK for {scenario.pipeline}, runs started by data only: {scheduler.runs(dag)}")


def _behind(settings, scenario: Scenario) -> bool:
    from eosbatch.orchestration import arrivals

    position = arrivals.read_position(settings, scenario.pipeline, [scenario.input])
    return arrivals.behind(position.stable, position.next_offsets)
