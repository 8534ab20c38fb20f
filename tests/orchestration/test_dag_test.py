"""`dag.test()` of each DAG against the real stack: the tasks run in this process, in DAG order, with the
Airflow connections resolved at run time; the end state is checked exactly-once."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from eosbatch import faults
from eosbatch.pipeline import BATCHES_PER_RUN
from tests.orchestration.helpers import asset_events, run_states
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def history(settings, airflow_db, unique, monkeypatch) -> Scenario:
    """A replace-sink pipeline started at the end of a topic that already holds history."""
    monkeypatch.setenv("EOSBATCH_PIPELINES", "tests.pipelines.scheduled")
    monkeypatch.setenv("EOSBATCH_TEST_SUFFIXES", f"{unique}:latest:1000")  # the backfill maps several batches
    monkeypatch.setenv("EOSBATCH_SPARK_MASTER", "local[2,3]")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # spark-submit's driver imports the pipeline module too
    import tests.pipelines.scheduled

    importlib.reload(tests.pipelines.scheduled)  # this test's pipelines here, as spark-submit will build them
    return Scenario(settings, unique, "latest", batch=1000, start="latest")


def test_dag_test_of_micro_batch_backfill_and_replay_dags(history: Scenario) -> None:
    """The three DAGs by dag.test(): a caught-up run, a micro-batch, a backfill mapped over its planned batches
    (one task instance each, labelled with its ranges), a replay that finds nothing to do; asset events only
    for the batches that committed (sink) and published (output topic), with the batch and its counts."""
    from eosbatch import registry
    from eosbatch.orchestration import assets, dags

    pipeline = registry.get(history.pipeline)
    micro = dags.microbatch_dag(pipeline)
    sink_uri, output_uri = assets.sink_uri(history.settings, pipeline), assets.output_uri(history.settings, pipeline)

    # Started at the end: nothing to do yet; plan short-circuits the rest of the run.
    run = micro.test()
    assert run.state == "success"
    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == run_states(0, BATCHES_PER_RUN)
    assert history.batches() == []
    assert asset_events(sink_uri) == [] and asset_events(output_uri) == []  # a caught-up run changed nothing

    history.produce(600)  # new input: the next micro-batch run processes it
    run = micro.test()
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == run_states(1, BATCHES_PER_RUN)  # one batch took it all; batch_2's plan found nothing
    assert [(kind, state) for _, kind, state in history.batches()] == [("regular", "published")]
    [(regular, _, _)] = history.batches()
    [sunk] = asset_events(sink_uri)
    assert sunk["batch"] == regular and sunk["kind"] == "regular" and sunk["sink_rows"] == len(history.sink()) > 0
    [out] = asset_events(output_uri)
    assert out["batch"] == regular and out["published"] == len(history.sink())

    # The history before the start: a backfill over a time window that holds all of it, one mapped task
    # instance per planned batch, each labelled in the grid with its ranges.
    window = {"from": "2000-01-01T00:00:00Z", "to": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
    run = dags.backfill_dag(pipeline).test(run_conf=window)
    assert run.state == "success"
    after = history.batches()
    backfilled = [batch_id for batch_id, kind, state in after if kind == "backfill"]
    assert len(backfilled) >= 2 and [(k, s) for _, k, s in after] == [("regular", "published")] + \
        [("backfill", "published")] * len(backfilled)
    mapped = sorted((ti.map_index, ti.state, ti.rendered_map_index) for ti in run.get_task_instances()
                    if ti.task_id == "batch")
    assert [(i, state) for i, state, _ in mapped] == [(i, "success") for i in range(len(backfilled))]
    assert all(label.startswith(f"batch {i + 1}/{len(backfilled)}: {history.input}:") for i, _, label in mapped)
    print("\n".join(f"mapped instance {i}: {label}" for i, _, label in mapped))
    total = next(ti for ti in run.get_task_instances() if ti.task_id == "done").xcom_pull(task_ids="done")
    assert total["instances"] == len(backfilled) == total["batches"]
    history.assert_exactly_once(from_log_start=True)
    assert [e["batch"] for e in asset_events(sink_uri)] == [regular, *backfilled]
    assert [e["batch"] for e in asset_events(output_uri)] == [regular, *backfilled]
    assert sum(e["records_read"] for e in asset_events(sink_uri)[1:]) == total["records"]

    # Replaying a published batch changes nothing.
    first = history.batches()[0][0]
    run = dags.replay_dag(pipeline).test(run_conf={"batch_id": first})
    assert run.state == "success"
    replay = next(ti for ti in run.get_task_instances() if ti.task_id == "replay")
    assert replay.state == "success"
    assert len(history.batches()) == len(after)
    history.assert_exactly_once(from_log_start=True)
    assert len(asset_events(sink_uri)) == len(after) and len(asset_events(output_uri)) == len(after)

    # A batch committed outside Airflow whose runner died before publishing: the next run's plan rolls it
    # forward and announces the output topic's change (the sink's was not Airflow's to announce); the run
    # then finds nothing new.
    history.produce(300)
    crashed = history.run("commit.after_commit")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-2000:]
    (rolled, _, state) = history.batches()[-1]
    assert state == "committed"
    run = micro.test()
    assert run.state == "success" and history.batches()[-1] == (rolled, "regular", "published")
    assert {ti.task_id: ti.state for ti in run.get_task_instances()}["batch_1.process"] == "skipped"
    assert [e["batch"] for e in asset_events(output_uri)][-1] == rolled
    assert rolled not in [e["batch"] for e in asset_events(sink_uri)]
    history.assert_exactly_once(from_log_start=True)


CALLBACK_DAG = """
import dataclasses

from eosbatch import AirflowOptions, registry
from eosbatch.orchestration import dags

CALLED = []


def on_failure(context):  # as a user writes one: page someone with the task and the error
    CALLED.append({"task": context["ti"].task_id, "error": context["exception"]})


# A pipeline this DAG file defines, but the tasks' EOSBATCH_PIPELINES does not register.
pipeline = dataclasses.replace(registry.get("{pipeline}"), name="{name}",
                               airflow=AirflowOptions(retries=2, on_failure_callback=on_failure))
dag = dags.microbatch_dag(pipeline)
"""


def users_dag_file(history: Scenario, tmp_path, monkeypatch, name: str, source: str) -> Any:
    """`source` as the module `name` of a DAG bundle of its own (a user's DAG file), imported here."""
    import importlib.util
    import json

    from airflow.configuration import conf

    bundles = json.loads(conf.get("dag_processor", "dag_bundle_config_list"))
    bundles.append({"name": f"users-{history.suffix}", "kwargs": {"path": str(tmp_path)},
                    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle"})
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(bundles))
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_pipelines_failure_callback_gets_a_terminal_error(history: Scenario, tmp_path, monkeypatch) -> None:
    """A pipeline's on_failure_callback (AirflowOptions) fires when a task fails for good, with the error in
    its context. The error: a pipeline that the DAG file defines but the tasks' environment does not register
    (EOSBATCH_PIPELINES differs between the DAG processor and the workers), terminal, so plan fails at once
    despite its retries; the run stops there: its later batches are skipped without running."""
    from airflow.sdk.exceptions import AirflowFailException

    name = f"unregistered_{history.suffix}"
    module = users_dag_file(history, tmp_path, monkeypatch, f"callback_{history.suffix}",
                            CALLBACK_DAG.replace("{pipeline}", history.pipeline).replace("{name}", name))
    run = module.dag.test()
    assert run.state == "failed"
    instances = {ti.task_id: ti for ti in run.get_task_instances()}
    assert (instances["batch_1.plan"].state, instances["batch_1.plan"].try_number) == ("failed", 1)  # no retry
    assert instances["batch_1_failed"].state == "success"  # the gate that stops the run
    later = {task: ti.state for task, ti in instances.items() if task.split(".")[0] in ("batch_2", "batch_3",
                                                                                    "batch_4")}
    assert set(later.values()) == {"skipped"}, later  # every later group, not the next one only
    # through the gates of each skipped group: batch_2 did not run, so batch_3 does not either
    assert (instances["batch_2_skipped"].state, instances["batch_2_failed"].state) == ("success", "skipped")
    [call] = module.CALLED
    assert call["task"] == "batch_1.plan" and isinstance(call["error"], AirflowFailException)
    assert f"no pipeline named {name!r}" in str(call["error"])
    assert "terminal: no retry" in str(call["error"])
    print(f"on_failure_callback: {call['task']}: {call['error']}")
    assert history.batches() == []


USERS_DAG = """
from datetime import UTC, datetime

from airflow.sdk import DAG, get_current_context, task

from eosbatch import registry
from eosbatch.orchestration.dags import microbatch_group

with DAG(dag_id="users_own_{pipeline}", schedule=None, start_date=datetime(2024, 1, 1, tzinfo=UTC),
         catchup=False) as dag:

    @task
    def extract() -> str:
        return "upstream work"

    @task
    def report(counts: dict) -> dict:  # as docs/airflow.md shows it
        assert get_current_context()["ti"].xcom_pull(task_ids="eosbatch.done") == counts
        return counts

    group = microbatch_group(registry.get("{pipeline}"))
    extract() >> group
    report(group.children["eosbatch.done"].output)
"""


def test_task_group_in_a_dag_of_ones_own(history: Scenario, tmp_path, monkeypatch) -> None:
    """The micro-batch as a TaskGroup between a user's own tasks, in a DAG file of the user's (a bundle of
    its own): a caught-up run skips only the group's tasks (the user's task after it runs), XCom works with
    the prefixed ids, and `done` returns the counts."""
    dag = users_dag_file(history, tmp_path, monkeypatch, f"users_own_{history.suffix}",
                         USERS_DAG.replace("{pipeline}", history.pipeline)).dag

    def outcome(run) -> tuple[dict[str, str], dict]:
        instances = {ti.task_id: ti for ti in run.get_task_instances()}
        return {k: ti.state for k, ti in instances.items()}, instances["report"].xcom_pull(task_ids="report")

    run = dag.test()  # caught up: the group's tasks skip, the user's report still runs
    states, counts = outcome(run)
    assert run.state == "success"
    assert states == {"extract": "success", "eosbatch.plan": "success", "eosbatch.process": "skipped",
                      "eosbatch.commit": "skipped", "eosbatch.publish": "skipped", "eosbatch.finalize": "skipped",
                      "eosbatch.abort": "skipped", "eosbatch.done": "success", "report": "success"}
    assert counts == {"pipeline": history.pipeline, "caught_up": True}

    history.produce(500)
    run = dag.test()
    states, counts = outcome(run)
    assert run.state == "success"
    assert {k for k, v in states.items() if v != "success"} == {"eosbatch.abort"}
    [(batch_id, kind, state)] = history.batches()
    assert (kind, state) == ("regular", "published")
    sink = history.sink()
    assert counts["batch"] == batch_id and counts["state"] == "published" and not counts["caught_up"]
    assert counts["sink_rows"] == len(sink) > 0 and counts["published"] == len(sink)
    # Exactly-once over the batch's ranges (the history before the start is a backfill's, not this run's).
    from eosbatch.kafka.read_back import read_topic
    from eosbatch.ledger import store
    from eosbatch.verify import check_output
    from examples.orders import generate

    with store.transaction(history.settings) as cur:
        ranges = store.get_batch(cur, batch_id).ranges
        cur.execute("SELECT count(*) FROM eosbatch.dead_letters WHERE pipeline = %s", (history.pipeline,))
        dead = cur.fetchone()[0]
    inputs = [r for r in read_topic(history.settings, history.input)
              if any(x.partition == r.partition and x.start <= r.offset < x.end for x in ranges)]
    orders, malformed = generate.valid_orders(inputs)
    assert sink == {k: v["amount"] for k, v in generate.expected_latest(orders).items()}
    assert dead == malformed
    assert check_output(history.settings, history.pipeline, history.output).ok

