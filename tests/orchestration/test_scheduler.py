"""End to end through a real Airflow (`eosbatch airflow up`: API server, scheduler, DAG processor,
LocalExecutor, metadata in the stack's PostgreSQL): runs are triggered with the `airflow` CLI as a user
does, their states read from Airflow's metadata database, and the results checked exactly-once in the sink
and in the output topic read with read_committed."""

from __future__ import annotations

import json
import time

import pytest

from eosbatch import faults
from eosbatch.kafka.offsets import bounds
from eosbatch.orchestration import assets, local
from eosbatch.pipeline import BATCHES_PER_RUN
from tests.orchestration.helpers import LocalAirflow, asset_events, run_states
from tests.pipelines.factory import make
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
CAP = BATCHES_PER_RUN  # the test pipelines' batches per run (but the catch-up test's: CATCHUP_CAP)


def states(airflow: LocalAirflow, dag: str, run: str) -> dict[str, str | None]:
    return {task: state for task, (state, _, _) in airflow.tasks(dag, run).items()}


def run_to_end(airflow: LocalAirflow, dag: str, run: str, conf: dict | None = None) -> str:
    airflow.trigger(dag, run, conf)
    state = airflow.wait_run(dag, run)
    print(airflow.timeline(dag, run))
    return state


def test_micro_batch_dag_through_the_real_scheduler_is_exactly_once(scheduler: LocalAirflow, settings) -> None:
    """A micro-batch run, then a caught-up one. A user's DAG scheduled on the sink's asset (conftest's
    DOWNSTREAM_DAG) runs after the committed batch, with the batch in its triggering event, and not after
    the caught-up run."""
    scenario = Scenario(settings, scheduler.suffixes["e2e"], "totals", batch=100_000)
    dag, downstream = f"eosbatch__{scenario.pipeline}", f"downstream_{scheduler.suffixes['e2e']}"
    scheduler.unpause(dag)
    scheduler.unpause(downstream)
    sink = assets.sink_uri(settings, make(scheduler.suffixes["e2e"], 100_000)[0])  # as the scheduler's pipeline

    assert run_to_end(scheduler, dag, "e2e-1") == "success"
    # one batch (all the input), then a caught-up plan in batch_2: the rest of the run skipped, no task run
    assert states(scheduler, dag, "e2e-1") == run_states(1, CAP)
    scenario.assert_exactly_once()
    [(batch, _, _)] = scenario.batches()
    assert [event["batch"] for event in asset_events(sink)] == [batch]
    [(run_id, run_type)] = scheduler.wait_runs(downstream, 1)
    assert run_type == "asset_triggered" and scheduler.wait_run(downstream, run_id) == "success"
    assert scheduler.xcom(downstream, run_id, "consume") == [batch]
    print(f"downstream DAG {downstream} ran ({run_id}) on the sink's asset event for batch {batch}")
    check_lineage(scheduler, scenario, dag, "e2e-1", batch)

    assert run_to_end(scheduler, dag, "e2e-2") == "success"  # caught up: plan finds nothing, the rest skips
    assert states(scheduler, dag, "e2e-2") == run_states(0, CAP)
    assert scenario.states() == ["published"]
    scenario.assert_exactly_once()
    print(f"exactly-once: OK for {scenario.pipeline}: batches {scenario.batches()}")
    # The caught-up run added no event (its tasks' outlets are aliases), so no second downstream run: the
    # e2e-2 run succeeded after the scheduler had queued whatever events existed.
    assert len(asset_events(sink)) == 1
    assert [run for run, _ in scheduler.runs(downstream)] == [run_id]


def check_lineage(airflow: LocalAirflow, scenario: Scenario, dag: str, run: str, batch: int) -> None:
    """OpenLineage (the provider's file transport): `commit` read the source topic and wrote the sink,
    `finalize` wrote the output topic, and both name the batch with its offset ranges (run facet `eosbatch`)."""
    from sqlalchemy.engine import make_url

    from eosbatch.ledger import store

    events = airflow.lineage_events(dag, run)
    with store.transaction(scenario.settings) as cur:
        ranges = sorted(map(str, store.get_batch(cur, batch).ranges))
    url, kafka = make_url(scenario.settings.database_url), f"kafka://{scenario.settings.kafka_bootstrap}"

    def datasets(task: str, side: str) -> list[tuple[str, str]]:
        return [(d["namespace"], d["name"]) for d in events[f"batch_1.{task}"][side]]

    assert datasets("commit", "inputs") == datasets("finalize", "inputs") == [(kafka, scenario.input)]
    assert datasets("commit", "outputs") == [(f"postgres://{url.host}:{url.port}",
                                              f"{url.database}.public.crash_totals_{scenario.suffix}")]
    assert datasets("finalize", "outputs") == [(kafka, scenario.output)]
    for task in ("commit", "finalize"):
        [reported] = events[f"batch_1.{task}"]["run"]["facets"]["eosbatch"]["batches"]
        assert reported["batch"] == batch and sorted(reported["ranges"]) == ranges
    assert "eosbatch" not in events["batch_1.process"]["run"]["facets"]  # it changed nothing downstream can see
    print(f"OpenLineage: commit {datasets('commit', 'inputs')} -> {datasets('commit', 'outputs')}, finalize -> "
          f"{datasets('finalize', 'outputs')}; batch {batch} ranges {ranges}")


def test_scheduler_killed_mid_process_then_runs_recover_exactly_once(scheduler: LocalAirflow, settings) -> None:
    scenario = Scenario(settings, scheduler.suffixes["kill"], "totals", batch=100_000)
    dag = f"eosbatch__{scenario.pipeline}"
    scheduler.unpause(dag)
    scheduler.trigger(dag, "kill-1")

    # Wait until the process task of the planned batch is at work (its Spark tasks sleep 15 s first: see
    # conftest), then kill the scheduler's process group.
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if scenario.batches() and scheduler.task_state(dag, "kill-1", "batch_1.process") == "running":
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"process never started: {scheduler.tasks(dag, 'kill-1')}")
    time.sleep(3)  # into the 15 s its Spark tasks sleep: the kill lands mid-job (the ledger says "planned" below)
    killed = scheduler.kill_scheduler()
    # The task process and its Spark driver run in a process group of their own: they outlive the scheduler
    # as a zombie that may still stage the batch while Airflow retries the task. The protocol settles it.
    print(f"killed the scheduler (pid {killed}) and its process group while `process` ran; ledger: "
          f"{scenario.batches()}")
    assert scenario.states() == ["planned"]  # nothing staged, nothing committed

    local.up(log=print, base=scheduler.base)  # starts the scheduler again; the rest kept running
    final = scheduler.wait_run(dag, "kill-1", timeout=600)
    print(f"interrupted run kill-1 ended {final}:\n{scheduler.timeline(dag, 'kill-1')}")
    assert run_to_end(scheduler, dag, "kill-2") == "success"
    print(f"ledger after recovery: {scenario.batches()}")
    assert "published" in scenario.states()
    scenario.assert_exactly_once()


def test_backfill_and_replay_dags_through_the_real_scheduler(scheduler: LocalAirflow, settings) -> None:
    """A pipeline started at the end of a topic with history. A backfill batch of partition 0 dies in Spark
    and is aborted; the replay DAG runs it again; the backfill DAG fills the rest; a regular run takes what
    arrives later. Invalid conf is refused when triggered, with the reason, and creates no run."""
    scenario = Scenario(settings, scheduler.suffixes["history"], "latest", batch=1000, start="latest")
    micro, backfill, replay = (f"eosbatch__{scenario.pipeline}{kind}" for kind in ("", "__backfill", "__replay"))
    for dag in (micro, backfill, replay):
        scheduler.unpause(dag)

    for run, dag, conf, reason in [
        ("bad-1", backfill, {"ranges": [f"{scenario.input}:0:0-x"]}, "Invalid input for param ranges"),
        ("bad-2", backfill, {"mode": "fast"}, "Invalid input for param mode"),
        ("bad-3", replay, {}, "Invalid input for param batch_id"),
    ]:
        refused = scheduler.cli("dags", "trigger", dag, "--run-id", run, "--conf", json.dumps(conf), check=False)
        assert refused.returncode != 0 and reason in refused.stdout + refused.stderr, refused.stderr[-2000:]
        assert scheduler.run_state(dag, run) is None
        print(f"refused at trigger: {dag} --conf {json.dumps(conf)}: "
              f"{next(line for line in refused.stderr.splitlines() if reason in line)}")

    ends = {tp.partition: b.stable for tp, b in bounds(settings, [scenario.input]).items()}
    crashed = scenario.cli("backfill", scenario.pipeline, "--range", f"{scenario.input}:0:0-{ends[0]}",
                           fault="process.before_staged")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-2000:]
    (failed, kind, state), = scenario.batches()
    assert (kind, state) == ("backfill", "planned")
    assert scenario.cli("abort", scenario.pipeline, str(failed)).returncode == 0

    assert run_to_end(scheduler, replay, "replay-1", {"batch_id": failed}) == "success"
    assert [(k, s) for _, k, s in scenario.batches()] == [("backfill", "aborted"), ("replay", "published")]

    everything = [f"{scenario.input}:{p}:0-{end}" for p, end in sorted(ends.items())]
    assert run_to_end(scheduler, backfill, "fill-1", {"ranges": everything}) == "success"
    filled = scenario.batches()[2:]
    assert len(filled) >= 2 and {(k, s) for _, k, s in filled} == {("backfill", "published")}
    # The grid: one mapped `batch` instance per planned batch, in order, each labelled with its ranges.
    grid = scheduler.query("SELECT map_index, state, rendered_map_index, start_date FROM task_instance WHERE "
                           "dag_id = %s AND run_id = 'fill-1' AND task_id = 'batch' ORDER BY map_index", (backfill,))
    assert [(i, state) for i, state, _, _ in grid] == [(i, "success") for i in range(len(filled))]
    assert [start for *_, start in grid] == sorted(start for *_, start in grid)  # one at a time, in order
    assert all(label.startswith(f"batch {i + 1}/{len(filled)}: {scenario.input}:") for i, _, label, _ in grid)
    print("\n".join(f"  batch [{i}] {state}: {label}" for i, state, label, _ in grid))
    # Batch 1 cleared after the later ones succeeded: it plans its ranges again, finds them committed, and
    # runs nothing: no batch is created, nothing published again or out of order.
    scheduler.clear(backfill, "fill-1", "batch", 0)
    assert scheduler.wait_run(backfill, "fill-1") == "success"
    tries = scheduler.query("SELECT map_index, try_number, state FROM task_instance WHERE dag_id = %s AND "
                            "run_id = 'fill-1' AND task_id = 'batch' ORDER BY map_index", (backfill,))
    assert [(i, t, state) for i, t, state in tries] == [(0, 2, "success")] + [(i, 1, "success") for i in
                                                                              range(1, len(filled))]
    assert scenario.batches()[2:] == filled

    scenario.produce(300)
    assert run_to_end(scheduler, micro, "micro-1") == "success"
    assert scenario.batches()[-1][1:] == ("regular", "published")
    scenario.assert_exactly_once(from_log_start=True)
    print(f"exactly-once: OK for {scenario.pipeline}: batches {scenario.batches()}")


def test_two_pipelines_at_once_under_the_local_executor(scheduler: LocalAirflow, settings) -> None:
    """Two pipelines over one input topic (an accumulating and a replace sink), their micro-batch runs
    triggered together: the LocalExecutor runs their tasks side by side (parallelism 8), and each ends
    exactly-once."""
    suffix = scheduler.suffixes["pair"]
    totals = Scenario(settings, suffix, "totals", batch=100_000)
    latest = Scenario(settings, suffix, "latest", batch=100_000, records=0)  # the same input, produced once
    dags = [f"eosbatch__{s.pipeline}" for s in (totals, latest)]
    for dag in dags:
        scheduler.unpause(dag)
    for dag in dags:
        scheduler.trigger(dag, "pair-1")
    assert [scheduler.wait_run(dag, "pair-1") for dag in dags] == ["success", "success"]
    spans = scheduler.query("SELECT dag_id, start_date, end_date FROM task_instance WHERE dag_id = ANY(%s) AND "
                            "run_id = 'pair-1' AND task_id = 'batch_1.process'", (dags,))
    assert len(spans) == 2
    assert max(start for _, start, _ in spans) < min(end for _, _, end in spans), f"not side by side: {spans}"
    for dag in dags:
        print(scheduler.timeline(dag, "pair-1"))
    for scenario in (totals, latest):
        assert scenario.states() == ["published"]
        scenario.assert_exactly_once()
