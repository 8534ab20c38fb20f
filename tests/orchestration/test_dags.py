"""The DAG file parses with no import errors into the expected DAGs, and parsing stays light."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "dags" / "eosbatch_dags.py"
PIPELINES = ["order_totals", "orders_latest", "order_totals_live"]  # examples/orders/pipeline.py


def check_conf(dag, conf: dict) -> None:
    """What Airflow does with a triggered run's conf: merge it into the params and validate them all."""
    params = copy.deepcopy(dag.params)
    params.update(conf)
    params.validate()


@pytest.fixture(scope="module")
def dagbag(airflow_db):  # DagBag reads airflow.cfg, whose metadata database must exist
    """The DAG file parsed with the example pipelines' module named, as on a DAG processor; the module stays
    named while this file's tests run, since the registry finds pipelines in the modules named."""
    from airflow.dag_processing.dagbag import DagBag

    before = os.environ.get("EOSBATCH_PIPELINES")
    os.environ["EOSBATCH_PIPELINES"] = "examples.orders.pipeline"
    try:
        yield DagBag(dag_folder=str(DAG_FILE))
    finally:
        if before is None:
            os.environ.pop("EOSBATCH_PIPELINES")
        else:
            os.environ["EOSBATCH_PIPELINES"] = before


def test_dag_file_imports_without_errors_into_three_dags_per_pipeline(dagbag) -> None:
    from eosbatch import registry

    assert dagbag.import_errors == {}
    examples = {f"eosbatch__{p}{kind}" for p in PIPELINES for kind in ("", "__backfill", "__replay")}
    assert examples <= set(dagbag.dag_ids)
    # and nothing else than three per registered pipeline (other tests register theirs in this process)
    every = {f"eosbatch__{p}{kind}" for p in registry.load() for kind in ("", "__backfill", "__replay")}
    assert set(dagbag.dag_ids) == every


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_micro_batch_dag(dagbag, pipeline) -> None:
    """`batches_per_run` TaskGroups, one per batch, each planned only after the previous one finalized, and
    never after one failed or was skipped after a failure (the two gates between them); a plan that finds
    nothing new skips the rest of the run."""
    from eosbatch.pipeline import BATCHES_PER_RUN

    dag = dagbag.get_dag(f"eosbatch__{pipeline}")
    assert dag.max_active_runs == 1 and dag.catchup is False
    steps = ["plan", "process", "commit", "publish", "finalize", "abort", "done"]
    groups = [f"batch_{n}" for n in range(1, BATCHES_PER_RUN + 1)]
    gates = [f"{g}_{why}" for g in groups[:-1] for why in ("failed", "skipped")]
    assert set(dag.task_ids) == {f"{g}.{step}" for g in groups for step in steps} | set(gates)
    for number, group in enumerate(groups, 1):
        task = {step: dag.get_task(f"{group}.{step}") for step in steps}
        chain = steps[:5]
        for upstream, downstream in zip(chain, chain[1:], strict=False):
            assert task[downstream].task_id in task[upstream].downstream_task_ids, (group, upstream, downstream)
        assert task["abort"].trigger_rule == "one_failed"
        assert task["abort"].upstream_task_ids == {f"{group}.process", f"{group}.commit"}
        assert task["abort"].task_id not in task["publish"].downstream_task_ids  # a committed batch rolls forward
        assert type(task["plan"]).__name__ == "_ShortCircuitDecoratedOperator"
        assert task["plan"].ignore_downstream_trigger_rules  # caught up: the whole rest of the run, at once
        # done is skipped when its whole group was (a caught-up or stopped run costs no task)
        assert task["done"].trigger_rule == "none_failed_min_one_success"
        assert task["done"].upstream_task_ids == {f"{group}.finalize", f"{group}.abort"}
        if number == 1:
            assert task["plan"].upstream_task_ids == set() and task["plan"].trigger_rule == "all_success"
        else:  # the next batch is planned only when the previous one neither failed nor was skipped
            before = groups[number - 2]
            assert task["plan"].trigger_rule == "all_skipped"
            assert task["plan"].upstream_task_ids == {f"{before}_failed", f"{before}_skipped"}
            assert dag.get_task(f"{before}_failed").trigger_rule == "all_failed"
            assert dag.get_task(f"{before}_skipped").trigger_rule == "all_skipped"
            for gate in ("failed", "skipped"):
                assert dag.get_task(f"{before}_{gate}").upstream_task_ids == {f"{before}.finalize"}
    for task in dag.tasks:
        assert task.retries >= 1 or task.task_id in gates, task.task_id
    # asset events only through aliases: a task adds them for the batches it really committed or published
    outlets = {task.task_id: [type(o).__name__ + ":" + o.name for o in task.outlets] for task in dag.tasks}
    sink, output = f"AssetAlias:eosbatch__{pipeline}__sink", f"AssetAlias:eosbatch__{pipeline}__output"
    assert {task: names for task, names in outlets.items() if names} == {
        f"{g}.{step}": [alias] for g in groups for step, alias in (("commit", sink), ("plan", output),
                                                                    ("finalize", output))}


def test_a_pipelines_airflow_options_are_its_dags_settings() -> None:
    """AirflowOptions become the three DAGs' default_args and tags; the retries replace eosbatch's own on
    every task, also inside the TaskGroup; the gates carry no callbacks (the scheduler never runs them)."""
    from datetime import timedelta

    from eosbatch import AirflowOptions, KafkaSource, Pipeline, PostgresSink
    from eosbatch.orchestration import dags

    def alert(context) -> None:  # a user's callback
        """Never called here."""

    options = AirflowOptions(batches_per_run=2, owner="data-team", retries=5, retry_delay=timedelta(minutes=2),
                             pool="eosbatch_pool", queue="spark", on_failure_callback=alert, tags=["orders"])
    pipeline = Pipeline(name="options_probe", source=KafkaSource(["probe_in"]), transform=lambda df: df,
                        sink=PostgresSink("probe", key=["id"]), airflow=options)
    built = dags.build([pipeline])
    assert set(built) == {"eosbatch__options_probe", "eosbatch__options_probe__backfill",
                          "eosbatch__options_probe__replay"}
    micro = built["eosbatch__options_probe"]
    assert micro.max_active_runs == 1 and micro.tags == {"eosbatch", "options_probe", "orders"}
    assert built["eosbatch__options_probe__backfill"].tags == {"eosbatch", "options_probe", "backfill", "orders"}
    gates = {"batch_1_failed", "batch_1_skipped"}
    assert {t.task_id.split(".")[0] for t in micro.tasks} == {"batch_1", "batch_2", *gates}
    for dag in built.values():
        assert dag.default_args["owner"] == "data-team"
        for task in dag.tasks:
            assert (task.owner, task.pool, task.queue) == ("data-team", "eosbatch_pool", "spark"), task.task_id
            if task.task_id in gates:
                assert task.retries == 0 and not task.on_failure_callback
                continue
            assert task.on_failure_callback == [alert] or task.on_failure_callback == alert, task.task_id
            if task.task_id != "plan" or dag is micro:  # the backfill's plan is a dry run: a refusal is final
                assert (task.retries, task.retry_delay) == (5, timedelta(minutes=2)), (dag.dag_id, task.task_id)


def test_compact_shape_is_plan_process_commit_and_publish_and_an_empty_done() -> None:
    """AirflowOptions(shape="compact"): three tasks that run per batch; `done` is a gate the scheduler sets
    (upstream failed when the batch failed: the run fails), `abort` after process or commit_and_publish."""
    from eosbatch import AirflowOptions, KafkaSource, Pipeline, PostgresSink
    from eosbatch.orchestration import dags

    pipeline = Pipeline(name="compact_probe", source=KafkaSource(["probe_in"]), transform=lambda df: df,
                        sink=PostgresSink("probe", key=["id"]), airflow=AirflowOptions(batches_per_run=2,
                                                                                        shape="compact"))
    micro = dags.microbatch_dag(pipeline)
    down = {t.task_id: sorted(t.downstream_task_ids) for t in micro.tasks}
    assert down == {
        "batch_1.plan": ["batch_1.commit_and_publish", "batch_1.process"],
        "batch_1.process": ["batch_1.abort", "batch_1.commit_and_publish"],
        "batch_1.commit_and_publish": ["batch_1.abort", "batch_1.done", "batch_1_failed", "batch_1_skipped"],
        "batch_1.abort": ["batch_1.done"], "batch_1.done": [],
        "batch_1_failed": ["batch_2.plan"], "batch_1_skipped": ["batch_2.plan"],
        "batch_2.plan": ["batch_2.commit_and_publish", "batch_2.process"],
        "batch_2.process": ["batch_2.abort", "batch_2.commit_and_publish"],
        "batch_2.commit_and_publish": ["batch_2.abort", "batch_2.done"], "batch_2.abort": ["batch_2.done"],
        "batch_2.done": []}
    assert all(isinstance(micro.get_task(f"batch_{n}.done"), dags.Gate) for n in (1, 2))
    assert micro.description.endswith("plan -> process -> commit_and_publish")


def test_a_tasks_parse_builds_only_its_own_dag(monkeypatch) -> None:
    """In a task's process, Airflow's parsing context names the DAG: the DAG file builds only that one."""
    from eosbatch.orchestration import dags

    monkeypatch.setenv("EOSBATCH_PIPELINES", "examples.orders.pipeline")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "eosbatch__orders_latest")
    assert list(dags.registered()) == ["eosbatch__orders_latest"]
    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID")
    # Without a context, every registered pipeline's DAGs (the registry also holds what earlier tests loaded)
    everything = set(dags.registered())
    assert {f"eosbatch__{name}{kind}" for name in PIPELINES for kind in ("", "__backfill", "__replay")} <= everything


def test_backfill_dag_params_are_validated_json_schemas(dagbag) -> None:
    dag = dagbag.get_dag("eosbatch__order_totals__backfill")
    assert set(dag.task_ids) == {"plan", "batch", "done"}
    batch = dag.get_task("batch")  # one mapped instance per planned batch, one at a time, in order
    assert type(batch).__name__.endswith("MappedOperator") and batch.max_active_tis_per_dagrun == 1
    assert batch.upstream_task_ids == {"plan"} and batch.downstream_task_ids == {"done"}
    assert dag.get_task("done").trigger_rule == "none_failed"  # an empty plan maps nothing and still ends green
    assert [a.name for a in batch.outlets] == ["eosbatch__order_totals__sink", "eosbatch__order_totals__output"]
    assert dag.max_active_runs == 1 and dag.get_task("plan").retries == 0  # a refused request fails at once
    schema = {name: dag.params.get_param(name).schema for name in dag.params}
    assert set(schema) == {"ranges", "from", "to", "mode", "publish"}
    assert schema["mode"]["enum"] == ["fill", "reprocess"]
    from airflow.sdk.exceptions import ParamValidationError

    check_conf(dag, {"ranges": ["orders:0:0-10"], "mode": "fill"})
    check_conf(dag, {"from": "2026-11-22T00:00:00Z", "to": "2026-11-22T01:00:00Z", "publish": False})
    for bad in ({"mode": "fast"}, {"ranges": ["orders:0:x-1"]}, {"from": "yesterday"}, {"publish": "no"}):
        with pytest.raises(ParamValidationError):
            check_conf(dag, bad)


def test_replay_dag_requires_an_integer_batch_id(dagbag) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.get_dag("eosbatch__orders_latest__replay")
    assert dag.task_ids == ["replay"]
    check_conf(dag, {"batch_id": 3})
    for conf in ({}, {"batch_id": "three"}, {"batch_id": 0}):
        with pytest.raises(ParamValidationError, match="batch_id"):
            check_conf(dag, conf)


@pytest.mark.parametrize(("modules", "pipelines"), [("examples.orders.pipeline", len(PIPELINES)),
                                                     ("bench.latency_pipelines", 1)])  # event-driven: a watcher
def test_parsing_the_dag_file_imports_nothing_heavy(tmp_path, modules, pipelines) -> None:
    """A fresh AIRFLOW_HOME (SQLite metadata) so that Airflow itself loads no PostgreSQL driver: what is
    imported then is the DAG file's doing (an event-driven pipeline's trigger included)."""
    probe = (
        "import json, runpy, sys\n"
        f"found = runpy.run_path({str(DAG_FILE)!r})\n"
        "heavy = [m for m in ('pyspark', 'py4j', 'confluent_kafka', 'psycopg2', 'eosbatch.steps', 'eosbatch.kafka',"
        " 'eosbatch.ledger') if m in sys.modules]\n"
        "print(json.dumps({'dags': sorted(k for k in found if k.startswith('eosbatch__')), 'heavy': heavy}))\n"
    )
    env = {**os.environ, "EOSBATCH_PIPELINES": modules, "PYTHONPATH": str(ROOT), "AIRFLOW_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["dags"]) == 3 * pipelines
    assert result["heavy"] == []


def test_a_broken_pipeline_module_is_an_import_error_naming_it(tmp_path) -> None:
    env = {**os.environ, "EOSBATCH_PIPELINES": "no_such_module_xyz", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(DAG_FILE)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode != 0
    assert "EOSBATCH_PIPELINES: cannot import 'no_such_module_xyz'" in done.stderr


def test_micro_batch_group_with_verify_in_a_users_dag(dagbag) -> None:
    from airflow.sdk import DAG

    from eosbatch import registry
    from eosbatch.orchestration.dags import START, microbatch_group

    with DAG(dag_id="users_dag", schedule=None, start_date=START) as dag:
        microbatch_group(registry.get("order_totals"), group_id="orders", verify=True)
    assert {t.split(".", 1)[0] for t in dag.task_ids} == {"orders"}
    assert dag.get_task("orders.verify").upstream_task_ids == {"orders.finalize", "orders.plan"}
    assert dag.get_task("orders.done").upstream_task_ids == {"orders.verify", "orders.abort"}
    assert all(t.retries >= 1 for t in dag.tasks)
