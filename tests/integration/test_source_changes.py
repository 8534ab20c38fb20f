"""Source changes on the real stack, through the `eosbatch` CLI: partitions added to a `latest` pipeline,
a topic deleted and recreated with more records than before, retention past the next offset. Each ends
read from its first offset, or stopped with a terminal error (exit 2) that names topic, partition and
offsets, then goes on after an explicit, recorded `eosbatch reset`; nothing is skipped silently."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from eosbatch.kafka.offsets import bounds, topic_ids
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import positions, store
from eosbatch.protocol.ranges import TopicPartition
from eosbatch.verify import check_output, coverage_gaps, declared_gaps
from examples.orders import generate
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def ok(result) -> str:  # noqa: ANN001
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def stopped(result) -> str:  # noqa: ANN001
    """A terminal error: exit code 2, one line naming the error on stderr."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    assert "SourceChanged" in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr


def create_topic(settings, name: str, partitions: int, deadline: float = 60.0) -> None:
    """Create `name`, retrying while a deletion of the same name is still under way."""
    client = AdminClient(settings.kafka())
    end = time.monotonic() + deadline
    while True:
        try:
            client.create_topics([NewTopic(name, partitions, 1)])[name].result()
            return
        except Exception:
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


def wait_partitions(settings, topic: str, count: int) -> None:
    client = AdminClient(settings.kafka())
    for _ in range(120):
        meta = client.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{topic} never showed {count} partitions")


def ledger(settings, pipeline: str) -> tuple[dict[TopicPartition, int], int]:
    with store.transaction(settings) as cur:
        cur.execute("SELECT count(*) FROM eosbatch.batches WHERE pipeline = %s", (pipeline,))
        count = int(cur.fetchone()[0])
        return positions.next_offsets(cur, pipeline), count


def dead_letters(settings, pipeline: str) -> int:
    with store.transaction(settings) as cur:
        cur.execute("SELECT count(*) FROM eosbatch.dead_letters WHERE pipeline = %s", (pipeline,))
        return int(cur.fetchone()[0])


def status(scenario: Scenario) -> dict:
    return json.loads(ok(scenario.cli("status", scenario.pipeline, "--json")))


def test_partitions_added_to_a_latest_pipeline_are_read_from_their_first_offset(settings, unique):
    """2 -> 4 partitions mid-run: every record written to the new partitions is processed exactly once, and
    `latest` still holds for the two partitions the topic had when the pipeline started."""
    topic = f"crash_in_{unique}"
    create_topic(settings, topic, 2)
    scenario = Scenario(settings, unique, "totals", records=300, batch=10_000, start="latest")
    starts = {tp.partition: b.stable for tp, b in bounds(settings, [topic]).items()}
    ok(scenario.run())                               # tracks partitions 0 and 1 at their ends; no batch
    assert scenario.batches() == [] and set(ledger(settings, scenario.pipeline)[0].values()) == set(starts.values())
    scenario.produce(200)                            # to the two old partitions
    client = AdminClient(settings.kafka())  # kept alive until the future resolves
    client.create_partitions([NewPartitions(topic, 4)])[topic].result()
    wait_partitions(settings, topic, 4)
    scenario.produce(400)                            # over all four
    out = ok(scenario.run())
    assert "reading new partitions" in out and f"{topic}:2 from 0" in out and f"{topic}:3 from 0" in out

    inputs = read_topic(settings, topic)
    wanted = [r for r in inputs if r.partition >= 2 or r.offset >= starts[r.partition]]
    assert sum(1 for r in wanted if r.partition >= 2) > 50, "the new partitions got records"
    orders, malformed = generate.valid_orders(wanted)
    assert scenario.sink() == generate.expected_totals(orders)
    assert dead_letters(settings, scenario.pipeline) == malformed
    assert not coverage_gaps(settings, scenario.pipeline)
    assert check_output(settings, scenario.pipeline, scenario.output).ok
    report = status(scenario)
    assert [p["lag"] for p in report["partitions"]] == [0, 0, 0, 0]
    assert {p["partition"]: p["next_offset"] for p in report["partitions"]} == \
        {str(tp): b.stable for tp, b in bounds(settings, [topic]).items()}


def test_topic_recreated_with_more_records_stops_then_a_reset_reads_the_new_topic(settings, unique):
    """The new topic's log end lies above the ledger's next offsets, so offsets alone look fine: the topic ID
    tells. The run stops (exit 2) naming the topic; after `reset --topic`, the new topic is read from its
    start and the old incarnation's coverage stays, with the move declared."""
    scenario = Scenario(settings, unique, "totals", records=300, batch=10_000)
    ok(scenario.run())
    topic = scenario.input
    old_inputs = read_topic(settings, topic)
    old_id = topic_ids(settings, [topic])[topic]
    next_before, batches_before = ledger(settings, scenario.pipeline)

    client = AdminClient(settings.kafka())  # kept alive until the future resolves
    client.delete_topics([topic])[topic].result()
    create_topic(settings, topic, 3)
    scenario.produce(900)
    new_id = topic_ids(settings, [topic])[topic]
    assert new_id != old_id
    assert all(b.stable > next_before[tp] for tp, b in bounds(settings, [topic]).items()), \
        "every partition's log end is above the next offset: offsets alone cannot tell"

    error = stopped(scenario.run())
    assert f"source topic '{topic}' was deleted and recreated" in error
    assert old_id in error and new_id in error and f"eosbatch reset {scenario.pipeline} --topic {topic}" in error
    assert ledger(settings, scenario.pipeline) == (next_before, batches_before), "nothing planned, nothing moved"
    assert status(scenario)["source_problems"]

    out = ok(scenario.cli("reset", scenario.pipeline, "--topic", topic, "--to", "earliest",
                          "--reason", "orders topic recreated by ops", "--yes"))
    assert "3 partition(s) reset" in out
    ok(scenario.run())

    new_inputs = read_topic(settings, topic)
    old_orders, old_bad = generate.valid_orders(old_inputs)
    new_orders, new_bad = generate.valid_orders(new_inputs)
    assert scenario.sink() == generate.expected_totals(old_orders + new_orders)
    assert dead_letters(settings, scenario.pipeline) == old_bad + new_bad
    assert not coverage_gaps(settings, scenario.pipeline)
    declared = declared_gaps(settings, scenario.pipeline)
    assert len(declared) == 3 and all("incarnation 0 left at offset" in d and new_id in d for d in declared)
    ranges = json.loads(ok(scenario.cli("ranges", scenario.pipeline, "--json")))
    assert [p["incarnation"] for p in ranges] == [1, 1, 1]
    assert all(p["holes"] == [] and p["committed"][0].endswith(f":0-{p['next_offset']}") for p in ranges)
    report = status(scenario)
    assert not report["source_problems"] and len(report["resets"]) == 3
    assert report["topics"][topic]["ledger_topic_id"] == new_id
    assert check_output(settings, scenario.pipeline, scenario.output).ok


def test_retention_past_the_next_offset_stops_then_a_reset_declares_the_gap(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=300, batch=10_000, start="latest")
    topic = scenario.input
    ok(scenario.run())                                   # starts at the end; no batch
    starts, _ = ledger(settings, scenario.pipeline)
    scenario.produce(600)
    p0 = TopicPartition(topic, 0)
    cut = starts[p0] + 20
    client = AdminClient(settings.kafka())
    for future in client.delete_records([KafkaTP(topic, 0, cut)], request_timeout=30).values():
        future.result()
    assert bounds(settings, [topic])[p0].low == cut

    error = stopped(scenario.run())
    assert f"{topic}:0: next offset {starts[p0]} was deleted by retention (the log starts at {cut})" in error
    assert f"eosbatch reset {scenario.pipeline} --partition {topic}:0 --to {cut}" in error
    assert ledger(settings, scenario.pipeline)[1] == 0

    ok(scenario.cli("reset", scenario.pipeline, "--partition", f"{topic}:0", "--to", "earliest", "--yes"))
    ok(scenario.run())
    inputs = read_topic(settings, topic)                 # from each log start: the deleted records are gone
    wanted = [r for r in inputs if r.offset >= starts[TopicPartition(topic, r.partition)]]
    orders, malformed = generate.valid_orders(wanted)
    assert scenario.sink() == generate.expected_totals(orders)
    assert dead_letters(settings, scenario.pipeline) == malformed
    assert not coverage_gaps(settings, scenario.pipeline)
    ranges = {p["partition"]: p for p in json.loads(ok(scenario.cli("ranges", scenario.pipeline, "--json")))}
    assert ranges[str(p0)]["declared"] == [f"{topic}:0:{starts[p0]}-{cut}"]
    assert any(f"skipped {starts[p0]}-{cut}" in r["reset"] for r in status(scenario)["resets"])
