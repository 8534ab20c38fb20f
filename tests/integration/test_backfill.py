"""Backfill, replay and ranges on the real stack, through the `eosbatch` CLI as a user runs it.

The input holds aborted transactions (ranges have gaps), repeated order ids and malformed records; every
test ends with the exactly-once checks of tests/scenario.py: sink == input, each offset committed once,
dead letters == malformed input, and each published record once among read_committed output.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient

from eosbatch import faults
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import store
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration]


def ok(result) -> str:  # noqa: ANN001
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def ranges(scenario: Scenario) -> list[dict]:
    return json.loads(ok(scenario.cli("ranges", scenario.pipeline, "--json")))


def marker_groups(settings, pipeline: str) -> list[str]:
    client = AdminClient(settings.kafka())
    listed = client.list_consumer_groups(request_timeout=30).result()
    return sorted(g.group_id for g in listed.valid if g.group_id.startswith(f"eosbatch.{pipeline}.backfill."))


@pytest.mark.spark
@pytest.mark.slow
def test_started_at_the_end_then_history_backfilled_exactly_once(settings, unique):
    """A pipeline starts at the end of its topic, new data arrives, then its history is backfilled by two
    overlapping requests (a time window, then offset ranges); the same backfill again plans zero batches."""
    scenario = Scenario(settings, unique, "totals", records=1200, start="latest")
    time.sleep(1.5)
    middle = datetime.now(UTC).isoformat()
    time.sleep(1.5)
    scenario.produce(1200)
    ok(scenario.run())                 # starts at the end: nothing to read yet
    assert scenario.batches() == []
    history = {p["partition"]: p["next_offset"] for p in ranges(scenario)}
    scenario.produce(600)
    ok(scenario.run())                 # only what arrived after the start
    before = ranges(scenario)
    assert [p["holes"] for p in before] == [[f"{p}:0-{history[p]}"] for p in sorted(history)]

    dry = ok(scenario.cli("backfill", scenario.pipeline, "--from", "2000-01-01T00:00:00Z", "--to", middle,
                          "--dry-run"))
    assert "dry run: nothing changed" in dry and "backfill batch(es)" in dry
    assert len(scenario.batches()) == 1

    first = ok(scenario.cli("backfill", scenario.pipeline, "--from", "2000-01-01T00:00:00Z", "--to", middle))
    assert "0 batches" not in first
    every = [f"--range={p}:0-{history[p]}" for p in sorted(history)]
    second = ok(scenario.cli("backfill", scenario.pipeline, *every))  # overlaps the first request
    assert "skipped (already committed)" in second
    kinds = [kind for _, kind, _ in scenario.batches()]
    assert kinds[0] == "regular" and set(kinds[1:]) == {"backfill"} and len(kinds) >= 3
    after = ranges(scenario)
    assert all(p["holes"] == [] and len(p["committed"]) == 1 for p in after)
    scenario.assert_exactly_once()
    assert marker_groups(settings, scenario.pipeline) == [], "backfill marker groups are deleted after finalize"

    repeat = ok(scenario.cli("backfill", scenario.pipeline, *every))
    assert "plan: 0 backfill batch(es)" in repeat and "0 batches" in repeat
    assert len(scenario.batches()) == len(kinds)


@pytest.mark.spark
@pytest.mark.slow
def test_backfill_killed_halfway_then_run_again(settings, unique):
    """The runner dies for real inside the second backfill batch's Kafka transaction (the first batch is
    published); running the same backfill again rolls the second forward and fills the rest, once."""
    scenario = Scenario(settings, unique, "totals", records=2400, batch=900, start="latest")
    ok(scenario.run())
    scenario.produce(300)
    ok(scenario.run())
    history = [f"--range={p['partition']}:{h.split(':')[-1]}" for p in ranges(scenario) for h in p["holes"]]
    crashed = scenario.cli("backfill", scenario.pipeline, *history, fault="publish.mid_produce@2")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    assert [(k, s) for _, k, s in scenario.batches()][1:] == [("backfill", "published"), ("backfill", "committed")]
    # the open transaction's records are in the log, and a read_committed consumer does not see them (now)
    assert len(read_topic(settings, scenario.output, "read_uncommitted")) > len(
        read_topic(settings, scenario.output, stable_timeout=None))
    again = ok(scenario.cli("backfill", scenario.pipeline, *history))
    assert "rolling forward" in again
    scenario.assert_exactly_once()


@pytest.mark.spark
@pytest.mark.slow
def test_reprocess_changes_nothing_in_an_idempotent_sink_and_is_refused_for_accumulate(settings, unique):
    scenario = Scenario(settings, unique, "latest", records=1500, batch=3000)
    ok(scenario.run())
    sink, output = scenario.sink(), read_topic(settings, scenario.output)
    every = [f"--range={p['partition']}:{p['committed'][0].split(':')[-1]}" for p in ranges(scenario)]
    result = ok(scenario.cli("backfill", scenario.pipeline, *every, "--mode", "reprocess"))
    assert "1 batches" in result
    assert [(k, s) for _, k, s in scenario.batches()] == [("regular", "published"), ("reprocess", "published")]
    assert scenario.sink() == sink
    # sorted: records of different partitions arrive in any order
    assert sorted(read_topic(settings, scenario.output)) == sorted(output), "reprocess publishes nothing unless asked"
    scenario.assert_exactly_once()

    totals = Scenario(settings, unique, "totals", records=0)
    refused = totals.cli("backfill", totals.pipeline, *every, "--mode", "reprocess")
    assert refused.returncode == 2 and "mode: reprocess is refused" in refused.stderr
    assert totals.batches() == []


@pytest.mark.spark
@pytest.mark.slow
def test_replay_of_aborted_committed_published_and_superseded_batches(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=2400, batch=1000)

    def replay(batch_id: int) -> str:
        return ok(scenario.cli("replay", scenario.pipeline, str(batch_id)))

    assert scenario.run("plan.after_commit").returncode == faults.EXIT_CODE
    ok(scenario.cli("abort", scenario.pipeline))
    (aborted, _, _), = scenario.batches()
    assert "replayed" in replay(aborted)                       # aborted and uncovered: same ranges again
    replayed = scenario.batches()[-1]
    assert replayed[1:] == ("replay", "published")
    with store.transaction(settings) as cur:
        assert store.get_batch(cur, replayed[0]).ranges == store.get_batch(cur, aborted).ranges

    assert scenario.run("commit.after_commit", "--max-batches", "1").returncode == faults.EXIT_CODE
    committed = scenario.batches()[-1]
    assert committed[2] == "committed"
    assert replay(committed[0]).startswith(f"batch {committed[0]} is committed but not published")
    assert scenario.batches()[-1] == (committed[0], "regular", "published")

    count = len(scenario.batches())
    assert "already published" in replay(replayed[0])          # published: nothing changes
    assert "covered all its ranges" in replay(aborted)         # covered by the replay batch
    assert scenario.run("plan.after_commit").returncode == faults.EXIT_CODE
    superseded = scenario.batches()[-1][0]
    ok(scenario.cli("abort", scenario.pipeline))
    ok(scenario.run())                                         # a later regular batch covers its ranges
    assert "covered all its ranges" in replay(superseded)
    assert len(scenario.batches()) > count and scenario.batches()[-1][1] == "regular"
    scenario.assert_exactly_once()


@pytest.mark.parametrize(("make_range", "message"), [
    (lambda s, p: f"{s.input}:0:{p[0]['last_stable_offset'] - 5}-{p[0]['last_stable_offset'] + 10}",
     "ends past the last stable offset"),
    (lambda s, p: f"{s.input}:1:0-5", "deleted by retention (available 20-"),
    (lambda s, p: f"{s.input}:9:0-5", "no such topic/partition (known: "),
    (lambda s, p: f"{s.input}:0:5-5", "start must be below end"),
    (lambda s, p: "not-a-range", "expected TOPIC:PARTITION:START-END"),
    (lambda s, p: "other_topic:0:0-5", "is not a source topic"),
])
def test_bad_backfill_requests_name_the_range_that_exists_and_plan_nothing(settings, unique, make_range,
                                                                              message):
    scenario = Scenario(settings, unique, "totals", records=600, start="latest")
    client = AdminClient(settings.kafka())
    for future in client.delete_records([KafkaTP(scenario.input, 1, 20)]).values():  # retention, by hand
        future.result()
    bounds = ranges(scenario)
    result = scenario.cli("backfill", scenario.pipeline, "--range", make_range(scenario, bounds))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert scenario.batches() == []


def test_overlapping_ranges_in_one_request_are_refused(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=600, start="latest")
    result = scenario.cli("backfill", scenario.pipeline, "--range", f"{scenario.input}:0:0-50",
                          "--range", f"{scenario.input}:0:40-60")
    assert result.returncode == 2 and "overlaps" in result.stderr and f"{scenario.input}:0" in result.stderr
    assert scenario.batches() == []


def test_a_missing_output_topic_fails_fast_naming_the_field_and_plans_nothing(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=300, create_output=False)
    for args in (["run", scenario.pipeline], ["backfill", scenario.pipeline, "--range", f"{scenario.input}:0:0-10"]):
        result = scenario.cli(*args)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"output.topic: topic '{scenario.output}' does not exist" in result.stderr
    assert scenario.batches() == []
