"""DESIGN.md's failure matrix, row by row: the runner dies for real (os._exit through EOSBATCH_FAULT) at a
protocol step; the next run must end with nothing lost and nothing duplicated, in the sink and in the
output topic read with read_committed. The input holds aborted transactions (so ranges have gaps),
repeated order ids and malformed records."""

from __future__ import annotations

import pytest

from eosbatch import faults
from eosbatch.verify import OpenTransaction, read_topic
from tests.scenario import Scenario

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
def test_runner_killed_at_step_then_next_run_recovers_exactly_once(settings, unique, fault, kind, left):
    scenario = Scenario(settings, unique, kind)
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


def test_spark_task_attempt_dies_after_writing_staging_rows(settings, unique):
    """An executor dies after its rows are committed to staging; Spark retries the task; only the
    successful attempt's rows count (the first attempt's stay in staging until finalize)."""
    scenario = Scenario(settings, unique, "totals")
    result = scenario.run("process.mid_staging")
    assert result.returncode == 0, result.stderr[-3000:]
    scenario.assert_exactly_once()
    assert "published" in scenario.states()
