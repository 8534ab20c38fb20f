"""The compact micro-batch DAG (AirflowOptions(shape="compact")) through the real scheduler: plan -> process ->
commit_and_publish, exactly-once, each step still a line of the task's log."""

from __future__ import annotations

import pytest

from eosbatch.ledger import store
from eosbatch.orchestration import local
from tests.orchestration.helpers import LocalAirflow
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]


def compact_states(cap: int) -> dict[str, str]:
    """A run of the compact DAG that published one batch, then found nothing new in batch_2."""
    states = {"batch_1.plan": "success", "batch_1.process": "success", "batch_1.commit_and_publish": "success",
              "batch_1.abort": "skipped", "batch_1.done": "success", "batch_2.plan": "success"}
    for number in range(2, cap + 1):
        for step in ("plan", "process", "commit_and_publish", "abort", "done"):
            states.setdefault(f"batch_{number}.{step}", "skipped")
    for number in range(1, cap):
        states[f"batch_{number}_failed"] = states[f"batch_{number}_skipped"] = "skipped"
    return states


def task_log(dag: str, run: str, task: str) -> str:
    return (local.home() / "logs" / f"dag_id={dag}" / f"run_id={run}" / f"task_id={task}" / "attempt=1.log").read_text()


def test_compact_dag_publishes_a_batch_in_three_tasks_exactly_once(scheduler: LocalAirflow, settings) -> None:
    from eosbatch.pipeline import BATCHES_PER_RUN

    scenario = Scenario(settings, scheduler.suffixes["compact"], "totals", batch=100_000)
    dag = f"eosbatch__{scenario.pipeline}"
    scheduler.unpause(dag)
    scheduler.trigger(dag, "compact-1")
    assert scheduler.wait_run(dag, "compact-1") == "success"
    print(scheduler.timeline(dag, "compact-1"))
    states = {task: state for task, (state, _, _) in scheduler.tasks(dag, "compact-1").items()}
    assert states == compact_states(BATCHES_PER_RUN)
    assert scenario.states() == ["published"]
    scenario.assert_exactly_once()
    [(batch, _, _)] = scenario.batches()
    counts = scheduler.xcom(dag, "compact-1", "batch_1.commit_and_publish")
    with store.transaction(settings) as cur:
        ledger = store.get_batch(cur, batch)
    assert (counts["batch"], counts["state"], counts["records_read"], counts["published"]) == (
        batch, "published", ledger.records_read, ledger.published_records)
    # Each step still says what it did, in the one task's log: the commit, then the publication.
    text = task_log(dag, "compact-1", "batch_1.commit_and_publish")
    assert f"batch {batch}: committed" in text and f"batch {batch}: finalized" in text, text[-3000:]
    print(f"exactly-once: OK for {scenario.pipeline} through the compact DAG: batches {scenario.batches()}")
