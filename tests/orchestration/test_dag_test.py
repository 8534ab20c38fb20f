"""`dag.test()` of each DAG against the real stack: the tasks run in this process, in DAG order, with the
Airflow connections resolved at run time; the end state is checked exactly-once."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest

from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def history(settings, airflow_db, unique, monkeypatch) -> Scenario:
    """A replace-sink pipeline started at the end of a topic that already holds history."""
    monkeypatch.setenv("EOSBATCH_PIPELINES", "tests.pipelines.scheduled")
    monkeypatch.setenv("EOSBATCH_TEST_SUFFIXES", f"{unique}:latest:100000")
    monkeypatch.setenv("EOSBATCH_SPARK_MASTER", "local[2,3]")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # spark-submit's driver imports the pipeline module too
    import tests.pipelines.scheduled

    importlib.reload(tests.pipelines.scheduled)  # register this test's pipelines here, as spark-submit will
    return Scenario(settings, unique, "latest", batch=100_000, start="latest")


def test_dag_test_of_micro_batch_backfill_and_replay_dags(history: Scenario) -> None:
    from eosbatch import registry
    from eosbatch.orchestration import dags

    pipeline = registry.get(history.pipeline)
    micro = dags.microbatch_dag(pipeline)

    # Started at the end: nothing to do yet; plan short-circuits the rest of the run.
    run = micro.test()
    assert run.state == "success"
    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {
        "plan": "success", "process": "skipped", "commit": "skipped", "publish": "skipped",
        "finalize": "skipped", "abort": "skipped"}
    assert history.batches() == []

    history.produce(600)  # new input: the next micro-batch run processes it
    run = micro.test()
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"plan": "success", "process": "success", "commit": "success", "publish": "success",
                      "finalize": "success", "abort": "skipped"}
    assert [(kind, state) for _, kind, state in history.batches()] == [("regular", "published")]

    # The history before the start: a backfill over a time window that holds all of it.
    window = {"from": "2000-01-01T00:00:00Z", "to": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
    run = dags.backfill_dag(pipeline).test(run_conf=window)
    assert run.state == "success"
    assert [(kind, state) for _, kind, state in history.batches()] == [("regular", "published"),
                                                                       ("backfill", "published")]
    history.assert_exactly_once(from_log_start=True)

    # Replaying a published batch changes nothing.
    first = history.batches()[0][0]
    run = dags.replay_dag(pipeline).test(run_conf={"batch_id": first})
    assert run.state == "success"
    replay = next(ti for ti in run.get_task_instances() if ti.task_id == "replay")
    assert replay.state == "success"
    assert len(history.batches()) == 2
    history.assert_exactly_once(from_log_start=True)
