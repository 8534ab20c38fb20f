"""docs/design.md's failure matrix, row by row: the runner dies for real (os._exit through EOSBATCH_FAULT) at a
protocol step; the next run must end with nothing lost and nothing duplicated, in the sink and in the
output topic read with read_committed. The input holds aborted transactions (so ranges have gaps),
repeated order ids and malformed records."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from eosbatch import config, faults
from eosbatch.kafka.read_back import OpenTransaction, read_topic
from tests.chaos.control import fired as fired_points
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize(("fault", "kind", "left"), [
    ("plan.after_commit", "totals", "planned"),
    ("process.before_staged", "totals", "planned"),
    ("process.after_staged", "latest", "staged"),
    ("commit.before_commit", "totals", "staged"),
    ("commit.after_commit", "totals", "committed"),
    ("publish.mid_produce", "totals", "committed"),
    ("publish.after_kafka_commit", "latest", "committed"),
])
def test_runner_killed_at_step_then_next_run_recovers_exactly_once(settings, unique, fault, kind, left,
                                                                   kafka_reader):
    """Commit, then publish from the outbox, one step after the other (early publish off: the next test
    kills the runner at the same points with it on, the default); with each Kafka reader."""
    scenario = Scenario(settings, unique, kind)
    scenario.env_overrides[config.EARLY_PUBLISH] = "0"
    scenario.env_overrides[config.KAFKA_READER] = kafka_reader
    crashed = scenario.run(fault, "--max-batches", "2")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-2000:]
    assert "fault injected at" in crashed.stderr
    assert scenario.states()[-1] == left
    if fault == "publish.mid_produce":  # the open transaction's records are in the log, invisible
        assert len(read_topic(settings, scenario.output, "read_uncommitted")) > 0
        assert read_topic(settings, scenario.output, stable_timeout=None) == []  # as read_committed sees it now
        with pytest.raises(OpenTransaction):  # and the verifier says it cannot check behind it, never "ok"
            read_topic(settings, scenario.output, stable_timeout=1)
    recovered = scenario.run()
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    scenario.assert_exactly_once()


def test_spark_task_attempt_dies_after_writing_staging_rows(settings, unique, tmp_path, kafka_reader):
    """An executor dies after its rows are committed to staging; Spark retries the task; only the
    successful attempt's rows count (the first attempt's stay in staging until finalize)."""
    scenario = Scenario(settings, unique, "totals")
    scenario.env_overrides[config.KAFKA_READER] = kafka_reader
    fired = tmp_path / "fired"
    scenario.env_overrides[faults.FIRED] = str(fired)  # carried into the Spark tasks with the fault
    result = scenario.run("process.mid_staging")
    assert result.returncode == 0, result.stderr[-3000:]
    # The point is in an executor's Python worker: it died there (the runner went on), once.
    assert [p for p, _ in fired_points(fired)] == ["process.mid_staging"], "the task attempt never died"
    scenario.assert_exactly_once()
    assert "published" in scenario.states()


@pytest.mark.parametrize(("fault", "left"), [
    (None, "published"),
    ("commit.before_commit", "staged"),
    ("commit.after_commit", "committed"),
    ("publish.mid_produce", None),  # in the producing thread: the commit beside it may have ended or not
    ("publish.after_kafka_commit", "committed"),
])
def test_early_publish_killed_at_each_point_then_next_run_recovers_exactly_once(settings, unique, fault, left):
    """Early publish, the default (EOSBATCH_EARLY_PUBLISH unset): the batch's records go into its Kafka
    transaction while PostgreSQL commits it. The runner dies at each point of that; the next run (early publish
    on too) leaves nothing lost, nothing twice, in the sink and in the output read with read_committed."""
    scenario = Scenario(settings, unique, "latest")
    assert not os.environ.get(config.EARLY_PUBLISH), "this test runs the default"
    done = scenario.run(fault, "--max-batches", "2")
    if fault is None:
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.count("produced while it committed") == 2, done.stdout[-3000:]  # the early path ran
    else:
        assert done.returncode == faults.EXIT_CODE, done.stderr[-2000:]
        assert f"fault injected at {fault}" in done.stderr
        assert scenario.states()[-1] == left if left else scenario.states()[-1] in ("staged", "committed")
        recovered = scenario.run()
        assert recovered.returncode == 0, recovered.stderr[-3000:]
    scenario.assert_exactly_once()


# The runner of the next test: its commit fails (as a lost connection would make it) only once the early
# producer has produced every record of the batch into the open Kafka transaction.
FAILING_COMMIT = """
import sys, threading, time
from eosbatch import cli
from eosbatch.steps import early
from eosbatch.ledger.exceptions import LedgerUnavailable

def commit_failing_late(*_):
    deadline = time.monotonic() + 120
    while any(t.name.startswith("eosbatch-early-publish") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the early producer never finished"
        time.sleep(0.05)
    print("eosbatch: every early record produced; the commit fails now", file=sys.stderr, flush=True)
    raise LedgerUnavailable("PostgreSQL at the test: the commit failed after the early records were produced")

early.commit_once = commit_failing_late
sys.exit(cli.main(["run", sys.argv[1], "--max-batches", "1"]))
"""


def test_early_publish_whose_commit_fails_after_producing_commits_nothing_in_kafka(settings, unique):
    """The early transaction holds every record of the batch when the commit fails: it is aborted, the batch
    too (planned again), and read_committed consumers never see a record of it."""
    scenario = Scenario(settings, unique, "latest")
    scenario.env_overrides[config.EARLY_PUBLISH] = "1"
    failed = subprocess.run([sys.executable, "-c", FAILING_COMMIT, scenario.pipeline], env=scenario.env(),
                            capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert failed.returncode == 3, failed.stderr[-3000:]  # transient: the next run does it again
    assert "every early record produced" in failed.stderr
    assert scenario.states() == ["aborted"]
    assert len(read_topic(settings, scenario.output, "read_uncommitted")) > 0  # produced, then aborted
    assert read_topic(settings, scenario.output) == []
    recovered = scenario.run()
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    scenario.assert_exactly_once()
