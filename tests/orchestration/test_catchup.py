"""Catching up through a real Airflow (`eosbatch airflow up`, LocalExecutor): a micro-batch DAG run processes
up to its pipeline's `batches_per_run` batches, one TaskGroup each, one at a time and in order, each planned
only when its turn comes; a run that finds nothing new ends there. Checked exactly-once at the end (the sink
against the input, the output topic read with read_committed)."""

from __future__ import annotations

import time

import pytest

from eosbatch.kafka.offsets import bounds
from eosbatch.ledger import positions, store
from tests.orchestration.conftest import CATCHUP_CAP
from tests.orchestration.helpers import LocalAirflow, run_states
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
BATCH = 300  # the catch-up pipeline's max_records_per_batch (conftest ROLES)
FEEDS = 3  # intervals with input: three times the batch size each


def lag(scenario: Scenario) -> int:
    """Offsets of the input up to its last stable offset that the pipeline has not committed yet."""
    ends = bounds(scenario.settings, [scenario.input])
    with store.transaction(scenario.settings) as cur:
        done = positions.next_offsets(cur, scenario.pipeline)
    return sum(max(0, end.stable - done.get(tp, end.low)) for tp, end in ends.items())


def wait_task(airflow: LocalAirflow, dag: str, run: str, task: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = airflow.task_state(dag, run, task)
        if state == "success":
            return
        assert state not in ("failed", "upstream_failed", "skipped"), airflow.tasks(dag, run)
        time.sleep(0.5)
    raise AssertionError(f"{dag} {run}: {task} not done in {timeout:.0f}s: {airflow.tasks(dag, run)}")


def test_runs_catch_up_with_several_batches_each(scheduler: LocalAirflow, settings) -> None:
    """Input of three times the batch size per interval for three intervals, each interval's input arriving
    while the run before it works (after its first plan), then no more input: every run processes more
    than one batch and at most the cap, in order, and within two runs after the input stops the lag is 0."""
    scenario = Scenario(settings, scheduler.suffixes["catchup"], "totals", records=0, batch=BATCH)
    dag = f"eosbatch__{scenario.pipeline}"
    scheduler.unpause(dag)
    scenario.produce(FEEDS * BATCH)  # the first interval's input
    fed, figures, number, last_fed = 1, [], 0, 0
    while True:
        number += 1
        run, before = f"catchup-{number}", len(scenario.batches())
        started = time.monotonic()
        scheduler.trigger(dag, run)
        if fed < FEEDS:  # the next interval's input arrives while this run works, after its first plan
            wait_task(scheduler, dag, run, "batch_1.plan")
            scenario.produce(FEEDS * BATCH)
            fed += 1
            last_fed = number  # the run during which the input stopped
        assert scheduler.wait_run(dag, run) == "success", scheduler.timeline(dag, run)
        took = time.monotonic() - started
        ran = scenario.batches()[before:]
        figures.append((run, len(ran), lag(scenario), round(took, 1)))
        print(scheduler.timeline(dag, run))
        print(f"{run}: {len(ran)} batches, lag after it {figures[-1][2]} offsets, {took:.1f}s")
        assert {state for _, _, state in ran} == {"published"}
        assert 1 < len(ran) <= CATCHUP_CAP, figures
        check_one_at_a_time(scheduler, dag, run, len(ran))
        if fed == FEEDS and figures[-1][2] == 0:
            break
        assert number < last_fed + 2, f"still behind two runs after the input stopped: {figures}"
    print("catch-up figures (run, batches, lag after, seconds): " + "; ".join(map(str, figures)))
    assert any(batches == CATCHUP_CAP for _, batches, _, _ in figures), figures  # the cap bound at least once
    scenario.assert_exactly_once()
    print(f"exactly-once: OK for {scenario.pipeline}: {len(scenario.batches())} batches")


def check_one_at_a_time(airflow: LocalAirflow, dag: str, run: str, published: int) -> None:
    """The run's groups: `published` batches, each planned after the one before it was finalized, then (below
    the cap) a caught-up plan, and every later group skipped without running a task."""
    rows = airflow.query("SELECT task_id, start_date, end_date FROM task_instance WHERE dag_id = %s AND run_id = %s",
                         (dag, run))
    spans = {task: (start, end) for task, start, end in rows}
    for number in range(2, published + 1):
        assert spans[f"batch_{number}.plan"][0] >= spans[f"batch_{number - 1}.finalize"][1], (number, spans)
    assert {t: s for t, (s, _, _) in airflow.tasks(dag, run).items()} == run_states(published, CATCHUP_CAP)
