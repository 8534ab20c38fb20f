"""The DAG factory: for each registered pipeline, three DAGs whose tasks are thin calls into the engine.

- `eosbatch__<pipeline>`: one micro-batch per run, plan -> process -> commit -> publish -> finalize, and
  `abort` (trigger rule one_failed) after process/commit. When plan finds nothing new (caught up), the rest
  of the run is skipped. The pipeline's `schedule` is the DAG's; one run at a time.
- `eosbatch__<pipeline>__backfill`: params `ranges` or `from`/`to`, `mode`, `publish`; `plan` (a dry run:
  validates the request, shows the plan, changes nothing) -> `backfill`.
- `eosbatch__<pipeline>__replay`: param `batch_id`.

Correctness never depends on Airflow: every task is safe to retry or re-run, and a run that dies anywhere
is recovered by the next one. Only `airflow.sdk` is imported here; the engine loads inside the tasks.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import DAG, Param, get_current_context, task

from eosbatch.orchestration import params, tasks

if TYPE_CHECKING:
    from eosbatch.pipeline import Pipeline

START = datetime(2024, 1, 1, tzinfo=UTC)
RETRIES = 3
RETRY_DELAY = timedelta(seconds=10)
TAGS = ["eosbatch"]


def dag_id(pipeline: str, kind: str = "") -> str:
    return f"eosbatch__{pipeline}" + (f"__{kind}" if kind else "")


def _owner() -> str:
    """This DAG run as the lane's lease owner: every task of the run shares it."""
    context = get_current_context()
    return tasks.run_owner(context["ti"].dag_id, context["run_id"])


def _defaults() -> dict[str, Any]:
    # Transient errors retry; terminal ones raise AirflowFailException, which skips the retries.
    return {"owner": "eosbatch", "retries": RETRIES, "retry_delay": RETRY_DELAY}


def microbatch_dag(pipeline: Pipeline) -> DAG:
    name = pipeline.name
    with DAG(dag_id=dag_id(name), schedule=pipeline.schedule, start_date=START, catchup=False,
             max_active_runs=1, default_args=_defaults(), tags=[*TAGS, name],
             description=f"eosbatch micro-batch of {name}: plan -> process -> commit -> publish -> finalize",
             doc_md=__doc__) as dag:

        @task.short_circuit(task_id="plan")
        def plan() -> int | None:
            """Recover unfinished batches, then plan the next one up to the last stable offset."""
            return tasks.plan(name, _owner())

        @task(task_id="process")
        def process(batch_id: int) -> None:
            """spark-submit of the Spark app: reads the planned ranges, stages the results."""
            tasks.process(name, batch_id, _owner())

        @task(task_id="commit")
        def commit(batch_id: int) -> dict[str, Any]:
            """One PostgreSQL transaction: sink upsert, dead letters, offsets. After it, only roll forward."""
            return tasks.commit(name, batch_id, _owner())

        @task(task_id="publish")
        def publish(batch_id: int) -> int | None:
            """One Kafka transaction: the output records and the marker."""
            return tasks.publish(name, batch_id, _owner())

        @task(task_id="finalize")
        def finalize(batch_id: int, produced: int | None) -> str:
            return tasks.finalize(name, batch_id, produced, _owner())

        @task(task_id="abort", trigger_rule="one_failed")
        def abort() -> list[int]:
            """After a failed process or commit: abort the batch unless it committed."""
            context = get_current_context()
            batch_id = context["ti"].xcom_pull(task_ids="plan")
            return tasks.abort(name, batch_id, context["run_id"], _owner())

        batch: Any = plan()  # an XComArg: the planned batch id, resolved when each task runs
        processed = process(batch)
        committed = commit(batch)
        published: Any = publish(batch)
        processed >> committed >> published
        finalize(batch, published)
        [processed, committed] >> abort()
    return dag


def backfill_dag(pipeline: Pipeline) -> DAG:
    name = pipeline.name
    with DAG(dag_id=dag_id(name, "backfill"), schedule=None, start_date=START, catchup=False,
             max_active_runs=1, default_args=_defaults(), tags=[*TAGS, name, "backfill"],
             params={key: Param(default, description=text, **schema)
                     for key, (default, schema, text) in params.BACKFILL.items()},
             description=f"eosbatch backfill of {name}: offset ranges or a time window, fill or reprocess",
             doc_md=__doc__) as dag:

        @task(task_id="plan", retries=0)
        def plan() -> dict[str, Any]:
            """A dry run: checks the request with the engine's rules and shows the plan; changes nothing."""
            return tasks.backfill(name, dict(get_current_context()["params"]), dry_run=True)

        @task(task_id="backfill")
        def backfill() -> dict[str, Any]:
            return tasks.backfill(name, dict(get_current_context()["params"]), dry_run=False)

        plan() >> backfill()
    return dag


def replay_dag(pipeline: Pipeline) -> DAG:
    name = pipeline.name
    with DAG(dag_id=dag_id(name, "replay"), schedule=None, start_date=START, catchup=False,
             max_active_runs=1, default_args=_defaults(), tags=[*TAGS, name, "replay"],
             params={"batch_id": Param(description="The batch to replay (aborted) or publish (committed).",
                                       **params.REPLAY_BATCH_ID)},
             description=f"eosbatch replay of one batch of {name}", doc_md=__doc__) as dag:

        @task(task_id="replay")
        def replay() -> dict[str, Any]:
            return tasks.replay(name, int(get_current_context()["params"]["batch_id"]))

        replay()
    return dag


def build(pipelines: Iterable[Pipeline]) -> dict[str, DAG]:
    """Every DAG of every pipeline, by dag id."""
    dags: dict[str, DAG] = {}
    for pipeline in pipelines:
        for make in (microbatch_dag, backfill_dag, replay_dag):
            dag = make(pipeline)
            dags[dag.dag_id] = dag
    return dags


def registered() -> dict[str, DAG]:
    """The DAGs of the pipelines in EOSBATCH_PIPELINES (eosbatch.registry)."""
    from eosbatch import registry

    return build(registry.load().values())
