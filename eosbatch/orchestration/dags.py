"""The DAG factory: for each registered pipeline, three DAGs whose tasks are thin calls into the engine.

- `eosbatch__<pipeline>`: up to `batches_per_run` micro-batches per run (AirflowOptions, default 4), one after
  another, each a TaskGroup `batch_1` .. `batch_N`: plan -> process -> commit -> publish -> finalize, and
  `abort` (trigger rule one_failed) after process/commit. Each group's plan runs only once the previous batch is
  finalized (a lane allows one unfinished batch), and only when neither gate after it succeeded:
  `batch_K_failed` (a task of batch K failed) and `batch_K_skipped` (batch K did not run: a batch before it
  failed), so a failed batch skips the rest of the run in the scheduler, without running a task. A plan that
  finds nothing new skips everything after it at once, later groups and their gates included. The pipeline's
  `schedule` is the DAG's (with AirflowOptions(trigger="data"), a watched Asset: a run when data arrives,
  eosbatch/orchestration/triggers.py); one run at a time.
- `eosbatch__<pipeline>__backfill`: params `ranges` or `from`/`to`, `mode`, `publish`; `plan` (a dry run:
  validates the request, shows the plan, changes nothing) -> `batch`, one mapped instance per planned batch
  (one at a time, in order; each retried or cleared alone) -> `done`.
- `eosbatch__<pipeline>__replay`: param `batch_id`.

The pipeline's AirflowOptions give the three DAGs their default_args (owner, retries, retry_delay, pool,
queue, callbacks) and extra tags (docs/airflow-dags.md).

The sink table and the output topic are assets, declared through aliases: events are added only for
batches really committed or published in the task (eosbatch/orchestration/assets.py).

Correctness never depends on Airflow: every task is safe to retry or re-run, and a run that dies anywhere
is recovered by the next one. Only `airflow.sdk` is imported here; the engine loads inside the tasks.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import DAG, BaseOperator, Param, TaskGroup, TriggerRule, conf, get_current_context, task

from eosbatch.orchestration import assets, params, tasks
from eosbatch.protocol import sequence

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


def _outlet_events() -> Any:
    """Where a task adds asset events (eosbatch.orchestration.assets: only for batches really changed)."""
    return get_current_context()["outlet_events"]


def _retry(pipeline: Pipeline) -> dict[str, Any]:
    """eosbatch's retries (RETRIES, RETRY_DELAY), or the pipeline's own where it sets them. Transient errors
    retry; terminal ones raise AirflowFailException, which skips the retries."""
    options = pipeline.airflow
    return {"retries": RETRIES if options.retries is None else options.retries,
            "retry_delay": RETRY_DELAY if options.retry_delay is None else options.retry_delay}


def _defaults(pipeline: Pipeline) -> dict[str, Any]:
    """The DAGs' default_args: the pipeline's AirflowOptions (owner, pool, queue, callbacks), its retries."""
    return {**pipeline.airflow.default_args(), **_retry(pipeline)}


def _tags(pipeline: Pipeline, *kind: str) -> list[str]:
    return list(dict.fromkeys([*TAGS, pipeline.name, *kind, *pipeline.airflow.tags]))


class Gate(BaseOperator):
    """A task that does nothing, between two batches of a run: the scheduler marks it success, when its
    trigger rule holds, without running it (as EmptyOperator). Users' callbacks are not attached to it."""

    inherits_from_empty_operator = True
    ui_color = "#e8f7e4"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(on_failure_callback=None, on_success_callback=None, on_retry_callback=None, retries=0,
                         **kwargs)

    def execute(self, context: Any) -> None:
        """Nothing: the gate's state is the news."""


def microbatch_group(pipeline: Pipeline, group_id: str = "eosbatch", prefix_group_id: bool = True,
                     verify: bool = False) -> TaskGroup:
    """One micro-batch of `pipeline` as a TaskGroup for a DAG of your own (call it inside `with DAG(...)`):
    plan -> process -> commit -> publish -> finalize, `abort` after a failed process or commit, and `done`.

    Put your tasks before or after it (`extract >> microbatch_group(p) >> report`): your downstream tasks
    hang on `done`, which succeeds when the batch was published *or* there was nothing to do (a caught-up
    plan skips only the group's own tasks), and fails when the batch did. `done` returns the batch's counts
    (XCom). Task ids are prefixed with the group id (`eosbatch.plan`) unless `prefix_group_id=False`. The
    tasks carry eosbatch's own retries (or the pipeline's AirflowOptions.retries), whatever your DAG's
    default_args say. With `verify`, a `verify` task after `finalize` checks the batch just published
    (`eosbatch verify --batch`); a violation fails it, naming what broke, and so the run."""
    return _group(pipeline, group_id, prefix_group_id, verify, done_rule=TriggerRule.NONE_FAILED)[0]


def steps_after_plan(pipeline: Pipeline) -> tuple[sequence.Step, ...]:
    """The tasks of a planned batch, one per declared step: process -> commit -> publish -> finalize, or with
    AirflowOptions(shape="compact"), process -> commit_and_publish (commit, publish and finalize in one task,
    the records produced while the batch commits: early publish)."""
    return sequence.after_plan(early_publish=pipeline.airflow.shape == "compact")


def _group(pipeline: Pipeline, group_id: str, prefix_group_id: bool, verify: bool, done_rule: TriggerRule,
           plan_rule: TriggerRule = TriggerRule.ALL_SUCCESS, with_done: bool = True,
           caught_up_ends_run: bool = False) -> tuple[TaskGroup, Any, Any]:
    """The micro-batch TaskGroup, its plan task and its last step's task (finalize, or commit_and_publish).
    `done_rule`: none_failed runs `done` after a caught-up plan (a user's group); none_failed_min_one_success
    skips it when everything before it was skipped. `plan_rule`: when plan runs. Without `with_done` (the
    compact DAG's groups), `done` is a gate that runs no process (the scheduler sets its state): the last step's
    task returns the batch's counts. A caught-up plan skips the group's tasks that take the planned batch
    (a user's group: nothing past `done`), or with `caught_up_ends_run` (the DAG's groups) everything after it in
    the DAG at once: one scheduler loop ends the run, where a cascade of trigger rules took one per level."""
    name = pipeline.name
    retry = _retry(pipeline)
    with TaskGroup(group_id=group_id, prefix_group_id=prefix_group_id, tooltip=f"eosbatch micro-batch of {name}",
                   ) as group:

        @task.short_circuit(task_id=sequence.PLAN.name, ignore_downstream_trigger_rules=caught_up_ends_run,
                            outlets=assets.aliases(pipeline, *sequence.PLAN.announces), doc_md=sequence.PLAN.doc,
                            trigger_rule=plan_rule, **retry)
        def plan() -> int | None:
            return tasks.plan(name, _owner(), _outlet_events())

        @task(task_id="abort", trigger_rule="one_failed", **retry)
        def abort(plan_task: str) -> list[int]:
            """After a failed process or commit: abort the batch unless it committed."""
            context = get_current_context()
            batch_id = context["ti"].xcom_pull(task_ids=plan_task)
            return tasks.abort(name, batch_id, context["run_id"], _owner())

        @task(task_id="done", trigger_rule=done_rule, **retry)
        def done(plan_task: str) -> dict[str, Any]:
            """The batch's counts (read, sink rows, dead letters, published), or `caught_up`."""
            return tasks.summary(name, get_current_context()["ti"].xcom_pull(task_ids=plan_task))

        planned: Any = plan()  # an XComArg: the planned batch id, resolved when each task runs
        batch = planned
        before: Any = planned
        abortable: list[Any] = []
        for step in steps_after_plan(pipeline):  # process -> commit -> publish -> finalize, as declared
            made = _batch_task(pipeline, step, retry)(batch, before if step.takes_previous else None)
            before >> made
            if step.abortable:
                abortable.append(made)
            before = made
        finalized = last = before
        if verify:

            @task(task_id="verify", retries=1, retry_delay=RETRY_DELAY)
            def check(batch_id: int) -> list[str]:
                """The cheap per-batch check: ranges, dead letters, the output records of this batch."""
                return tasks.verify_batch(name, batch_id)

            checked = check(batch)
            finalized >> checked
            last = checked
        aborted = abort(planned.operator.task_id)
        abortable >> aborted
        # Without a `done` task, an empty one in its place (no process): a failed batch still fails the run.
        [last, aborted] >> (done(planned.operator.task_id) if with_done else Gate(
            task_id="done", trigger_rule=done_rule, doc_md="Fails when the batch failed (its counts: the XCom of "
                                                           f"{last.operator.task_id})."))
    return group, planned.operator, finalized.operator


def _batch_task(pipeline: Pipeline, step: sequence.Step, retry: dict[str, Any]) -> Any:
    """The task of one declared step after plan (eosbatch.protocol.sequence): its outlets are the aliases of
    the assets it may add events to; it takes the planned batch and, where declared, what the task before it
    returned."""
    name = pipeline.name
    outlets = assets.aliases(pipeline, *step.announces) if step.announces else None

    @task(task_id=step.name, outlets=outlets, doc_md=step.doc, **retry)
    def run_step(batch_id: int, previous: Any = None) -> Any:
        return tasks.batch_task(step.name, name, batch_id, previous, _owner(),
                                _outlet_events() if step.announces else None)

    return run_step


def schedule(pipeline: Pipeline) -> Any:
    """The micro-batch DAG's schedule: the pipeline's `schedule`, or, with AirflowOptions(trigger="data"), the
    source Asset that the triggerer watches (eosbatch.orchestration.triggers)."""
    if pipeline.airflow.trigger == "data":
        from eosbatch.orchestration import triggers

        return [triggers.source_asset(pipeline)]
    return pipeline.schedule


def microbatch_dag(pipeline: Pipeline) -> DAG:
    """Up to `batches_per_run` micro-batches, one TaskGroup each (`batch_1` ..), one after another: each
    group's plan runs once the batch before it is finalized (neither failed nor skipped after a failure); a plan
    that finds nothing new skips the rest of the run. With AirflowOptions(shape="compact"), a group is
    plan -> process -> commit_and_publish (and `abort`)."""
    name, most = pipeline.name, pipeline.airflow.batches_per_run
    shown = " -> ".join(["plan", *(step.name for step in steps_after_plan(pipeline))])
    with DAG(dag_id=dag_id(name), schedule=schedule(pipeline), start_date=START, catchup=False,
             max_active_runs=pipeline.airflow.max_active_runs, default_args=_defaults(pipeline),
             tags=_tags(pipeline), doc_md=__doc__,
             description=f"eosbatch micro-batches of {name}, up to {most} per run: {shown}") as dag:
        gates: list[Gate] = []
        for number in range(1, most + 1):
            _, plan, finalize = _group(pipeline, f"batch_{number}", True, False,
                                       done_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
                                       plan_rule=TriggerRule.ALL_SKIPPED if gates else TriggerRule.ALL_SUCCESS,
                                       with_done=pipeline.airflow.shape != "compact", caught_up_ends_run=True)
            gates >> plan
            if number < most:
                gates = [Gate(task_id=f"batch_{number}_failed", trigger_rule=TriggerRule.ALL_FAILED,
                              doc_md=f"Success: a task of batch {number} failed, so the run stops here."),
                         # A failed batch's later groups are skipped, one after the other, through this gate:
                         # without it, the group after a skipped one would see only skipped gates and run.
                         Gate(task_id=f"batch_{number}_skipped", trigger_rule=TriggerRule.ALL_SKIPPED,
                              doc_md=f"Success: batch {number} did not run (a batch before it failed), so the "
                                     "run stops here.")]
                finalize >> gates
    return dag


def backfill_dag(pipeline: Pipeline) -> DAG:
    name = pipeline.name
    with DAG(dag_id=dag_id(name, "backfill"), schedule=None, start_date=START, catchup=False,
             max_active_runs=1, default_args=_defaults(pipeline), tags=_tags(pipeline, "backfill"),
             params={key: Param(default, description=text, **schema)
                     for key, (default, schema, text) in params.BACKFILL.items()},
             description=f"eosbatch backfill of {name}: offset ranges or a time window, fill or reprocess",
             doc_md=__doc__) as dag:

        @task(task_id="plan", retries=0)
        def plan() -> list[dict[str, Any]]:
            """A dry run: checks the request with the engine's rules and shows the plan (in the log); changes
            nothing. Its batches become the mapped `batch` instances."""
            return tasks.backfill_plan(name, dict(get_current_context()["params"]),
                                       conf.getint("core", "max_map_length", fallback=1024))

        # The backfill lane has one epoch and one transactional id: its instances run one at a time, in
        # map-index order, and each plans its ranges again before it runs.
        @task(task_id="batch", max_active_tis_per_dagrun=1, map_index_template="{{ eosbatch_batch }}",
              outlets=assets.aliases(pipeline, "sink", "output"))
        def batch(mapped: dict[str, Any]) -> dict[str, Any]:
            """One planned backfill batch: its ranges, minus whatever is committed by now."""
            context = get_current_context()
            context["eosbatch_batch"] = mapped["label"]  # type: ignore[typeddict-unknown-key]
            return tasks.backfill_batch(name, dict(context["params"]), mapped, _outlet_events())

        @task(task_id="done", trigger_rule="none_failed")
        def done(results: list[dict[str, Any]]) -> dict[str, Any]:
            """The backfill's counts, summed over its batches (none for an empty plan)."""
            return tasks.backfill_total(name, list(results or []))

        planned = plan()
        done(batch.expand(mapped=planned))  # type: ignore[arg-type]  # the instances' results, at run time
    return dag


def replay_dag(pipeline: Pipeline) -> DAG:
    name = pipeline.name
    with DAG(dag_id=dag_id(name, "replay"), schedule=None, start_date=START, catchup=False,
             max_active_runs=1, default_args=_defaults(pipeline), tags=_tags(pipeline, "replay"),
             params={"batch_id": Param(description="The batch to replay (aborted) or publish (committed).",
                                       **params.REPLAY_BATCH_ID)},
             description=f"eosbatch replay of one batch of {name}", doc_md=__doc__) as dag:

        @task(task_id="replay", outlets=assets.aliases(pipeline, "sink", "output"))
        def replay() -> dict[str, Any]:
            return tasks.replay(name, int(get_current_context()["params"]["batch_id"]), _outlet_events())

        replay()
    return dag


KINDS = {"": microbatch_dag, "backfill": backfill_dag, "replay": replay_dag}


def build(pipelines: Iterable[Pipeline], only: str | None = None) -> dict[str, DAG]:
    """Every DAG of every pipeline, by dag id; with `only`, just the DAG of that id (if it is one of them)."""
    dags: dict[str, DAG] = {}
    for pipeline in pipelines:
        for kind, make in KINDS.items():
            if only is None or only == dag_id(pipeline.name, kind):
                dag = make(pipeline)
                dags[dag.dag_id] = dag
    return dags


def registered() -> dict[str, DAG]:
    """The DAGs of the pipelines in EOSBATCH_PIPELINES (eosbatch.registry). In a task's process, which parses
    the DAG file before it runs, only the task's own DAG is built (Airflow's parsing context names it): the
    others would cost it three DAGs per pipeline of up to `batches_per_run` groups each. (With the example
    pipelines that is little: most of a task's 0.3-0.9 s parse is importing eosbatch, bench/airflow.py.)"""
    from airflow.sdk import get_parsing_context

    from eosbatch import registry

    return build(registry.load().values(), only=get_parsing_context().dag_id)
