"""What each Airflow task does: resolve the connections, call one engine function, map its errors.

Plain functions, importable without Airflow at parse time: the engine (steps, commands: Spark, Kafka and
PostgreSQL clients) is imported inside each call. Errors: a TerminalError becomes AirflowFailException
(the task fails for good, no retries); a TransientError (or any other error) propagates, so Airflow
retries the task. Every step is safe to re-run, so retries and re-runs never change the outcome.

The lane's lease: all tasks of one DAG run are one owner (`run_owner`). `plan` takes the lease (or fails
with LaneBusy, transient, so Airflow retries it later, while a CLI runner holds the lane); the following
tasks renew it (`process` with a heartbeat during Spark); `finalize`, `abort` and a caught-up `plan`
release it. A run that stops elsewhere leaves it to expire (EOSBATCH_LEASE_SECONDS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from eosbatch.context import Context
from eosbatch.orchestration import connections, params
from eosbatch.protocol import sequence
from eosbatch.protocol.lease import airflow_owner
from eosbatch.protocol.sequence import LeaseWork
from eosbatch.protocol.states import Lane

Log = Callable[[str], None]


def _log(line: str) -> None:
    print(line, flush=True)


@contextmanager
def _terminal_fails_for_good(step: str) -> Iterator[None]:
    from eosbatch.exceptions import TerminalError

    try:
        yield
    except TerminalError as exc:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(f"{step}: {type(exc).__name__}: {exc} (terminal: no retry)") from exc


def _prepare(step: str, pipeline: str) -> Context:
    """The task's edge: its settings from the Airflow connections (and the environment's other settings), its
    pipeline from the registry, its log the task log, its meter the one EOSBATCH_METRICS names."""
    from eosbatch import registry, telemetry

    with _terminal_fails_for_good(step):
        settings = connections.settings(_log, pipeline=pipeline)
        return Context(settings, registry.get(pipeline), _log, telemetry.metrics(settings))


@contextmanager
def _announced(ctx: Context, outlet_events: Any, in_lane: Lane | None) -> Iterator[None]:
    """Asset events for what the body really did, read from the ledger (see orchestration/assets.py): the
    batches of `in_lane` (None: either) committed, and published, between entering and leaving; and the same
    as OpenLineage inputs and outputs (orchestration/lineage.py). Nothing when the body fails (Airflow records
    no events for a failed task), and nothing without `outlet_events` (a direct call)."""
    if outlet_events is None:
        yield
        return
    from eosbatch.ledger import store
    from eosbatch.orchestration import assets, lineage

    settings, pipeline = ctx.settings, ctx.pipeline
    lineage.start_task()
    with _terminal_fails_for_good("assets"), store.transaction(settings) as cur:
        mark = store.watermark(cur, pipeline.name)
    yield
    with _terminal_fails_for_good("assets"), store.transaction(settings) as cur:
        changed = store.changed_since(cur, pipeline.name, mark)
    found = assets.events(settings, pipeline, changed, mark.unpublished, in_lane)
    assets.emit(outlet_events, pipeline, found)
    for event in found:
        _log(f"asset event: {event.uri} batch {event.extra['batch']}")
    for which in ("sink", "output"):  # OpenLineage (when installed): the ranges read, what they changed
        lineage.report(settings, pipeline, [b for b in changed if any(
            e.which == which and e.extra["batch"] == b.id for e in found)], **{which: True})


# ---------------------------------------------------------------- the micro-batch DAG

def run_owner(dag_id: str, run_id: str) -> str:
    """The lease owner of one DAG run: every task of the run renews the lease that `plan` took."""
    return airflow_owner(dag_id, run_id)


@contextmanager
def _lease_held(ctx: Context, owner: str | None, lease: LeaseWork) -> Iterator[None]:
    """Renew the regular lane's lease first (LaneLost, terminal, if another runner took it), and with
    "heartbeat" keep renewing it while the step runs. No owner (a direct call): no lease work."""
    if owner is None or lease == "none":
        yield
        return
    from eosbatch import lease as leases

    if lease == "renew":
        leases.renew(ctx.settings, ctx.pipeline.name, "regular", owner)
        yield
        return
    with leases.Heartbeat(ctx.settings, ctx.pipeline.name, "regular", owner):
        yield


def _release(ctx: Context, owner: str | None) -> None:
    if owner is not None:
        from eosbatch import lease as leases

        leases.release(ctx.settings, ctx.pipeline.name, "regular", owner)


@contextmanager
def _task(step: str, pipeline: str, owner: str | None = None, lease: LeaseWork = "none",
          outlet_events: Any = None, in_lane: Lane | None = "regular") -> Iterator[Context]:
    """What every task does around its step: resolve its Context, hold the lane's lease (`lease`: nothing,
    renew it first, or keep renewing it), announce the asset events of what the step changed in `in_lane`,
    and fail for good on a terminal error."""
    from eosbatch import telemetry

    try:
        with _terminal_fails_for_good(step):
            ctx = _prepare(step, pipeline)
            with _lease_held(ctx, owner, lease), _announced(ctx, outlet_events, in_lane):
                yield ctx
    finally:
        telemetry.flush()  # the task's process ends by os._exit, which runs no exit handler


def plan(pipeline: str, owner: str | None = None, outlet_events: Any = None) -> int | None:
    """Recover, then plan the next batch; its id, or None when caught up (the rest of the run is skipped).
    Takes the lane's lease for `owner` (the DAG run); LaneBusy (retried) while another runner holds it."""
    from eosbatch import steps

    with _task("plan", pipeline, outlet_events=outlet_events) as ctx:  # a roll-forward publishes
        batch = steps.plan(ctx, owner)
        if batch is None:
            _release(ctx, owner)
    if batch is None:
        _log(f"{pipeline}: caught up, nothing to plan")
        return None
    return batch.id


def _batch_step(name: str, pipeline: str, batch_id: int, previous: Any = None, owner: str | None = None,
                outlet_events: Any = None) -> Any:
    """One declared step of a planned batch (eosbatch.protocol.sequence) as a task: the lease work and asset
    events it declares; the run's last step releases the lane's lease."""
    from eosbatch.steps import sequence as bound

    step = sequence.step(name)
    with _task(name, pipeline, owner, step.lease, outlet_events if step.announces else None) as ctx:
        if step is sequence.COMMIT and ctx.settings.early_publish and ctx.pipeline.output is not None:
            ctx.log(f"batch {batch_id}: not published early (this DAG's steps shape commits and publishes in "
                    "tasks of their own; AirflowOptions(shape=\"compact\") publishes early)")
        done = bound.call(step, ctx, batch_id, previous)
        if step.releases:
            _release(ctx, owner)
    return done


def process(pipeline: str, batch_id: int, owner: str | None = None) -> None:
    _batch_step("process", pipeline, batch_id, owner=owner)


def commit(pipeline: str, batch_id: int, owner: str | None = None, outlet_events: Any = None) -> dict[str, Any]:
    batch = _batch_step("commit", pipeline, batch_id, owner=owner, outlet_events=outlet_events)
    return {"batch": batch.id, "state": batch.state, "records_read": batch.records_read,
            "sink_rows": batch.sink_rows, "dead_letters": batch.dead_letters, "output_records": batch.outbox_records,
            "commit_seq": batch.commit_seq}


def publish(pipeline: str, batch_id: int, owner: str | None = None) -> int | None:
    produced: int | None = _batch_step("publish", pipeline, batch_id, owner=owner)
    return produced


def finalize(pipeline: str, batch_id: int, produced: int | None, owner: str | None = None,
             outlet_events: Any = None) -> str:
    """Mark the batch published; the run is done, so the lane's lease is released for the next runner."""
    state: str = _batch_step("finalize", pipeline, batch_id, produced, owner, outlet_events).state
    return state


def commit_and_publish(pipeline: str, batch_id: int, owner: str | None = None, outlet_events: Any = None
                       ) -> dict[str, Any]:
    """The compact shape's last task: commit, publish and finalize the batch, its records produced into the
    Kafka transaction while PostgreSQL commits (early publish; as commit, then publish, where that does not
    apply: the log says why). A retry does what is left: the batch's state in the ledger says what. The run is
    done: the lane's lease is released."""
    batch = _batch_step("commit_and_publish", pipeline, batch_id, owner=owner, outlet_events=outlet_events)
    return {"batch": batch.id, "state": batch.state, "records_read": batch.records_read,
            "sink_rows": batch.sink_rows, "dead_letters": batch.dead_letters, "published": batch.published_records,
            "commit_seq": batch.commit_seq}


BATCH_TASKS: dict[str, Callable[..., Any]] = {"process": process, "commit": commit, "publish": publish,
                                              "finalize": finalize, "commit_and_publish": commit_and_publish}


def batch_task(name: str, pipeline: str, batch_id: int, previous: Any, owner: str | None, outlet_events: Any
               ) -> Any:
    """The DAG's task of the declared step `name` after plan: its task function, given what the step takes
    (what the task before it returned) and, where it adds asset events, the task's outlet events."""
    step = sequence.step(name)
    extra = {"outlet_events": outlet_events} if step.announces else {}
    return BATCH_TASKS[name](pipeline, batch_id, *([previous] if step.takes_previous else []), owner=owner, **extra)


def abort(pipeline: str, batch_id: int | None, run_id: str, owner: str | None = None) -> list[int]:
    """Abort the run's batch if it is still abortable (planned/staged); a committed batch rolls forward
    in the next run instead. Nothing planned: nothing to do. The run ends here: its lease is released."""
    if batch_id is None:
        _log(f"{pipeline}: no batch was planned in this run; nothing to abort")
        return []
    from eosbatch import steps

    with _task("abort", pipeline) as ctx:
        aborted = steps.abort(ctx, batch_id, reason=f"aborted by Airflow: a task of run {run_id} failed")
        _release(ctx, owner)
    return aborted


def summary(pipeline: str, batch_id: int | None) -> dict[str, Any]:
    """What a micro-batch run did, from the ledger: the batch's state and counts, or that it was caught up."""
    if batch_id is None:
        return {"pipeline": pipeline, "caught_up": True}
    from eosbatch.ledger import store

    with _task("done", pipeline) as ctx, store.transaction(ctx.settings) as cur:
        batch = store.get_batch(cur, batch_id)
    counts = {"pipeline": pipeline, "caught_up": False, "batch": batch.id, "state": batch.state,
              "ranges": [str(r) for r in batch.ranges], "records_read": batch.records_read,
              "sink_rows": batch.sink_rows, "dead_letters": batch.dead_letters,
              "published": batch.published_records}
    _log(f"batch {batch.id}: {batch.state}; read {batch.records_read}, sink rows {batch.sink_rows}, "
         f"dead letters {batch.dead_letters}, published {batch.published_records}")
    return counts


def verify_batch(pipeline: str, batch_id: int) -> list[str]:
    """`eosbatch verify PIPELINE --batch N` as a task: the findings as lines; a violation fails the task
    for good (AirflowFailException), naming what broke."""
    from eosbatch.verify import audit_batch

    with _task("verify", pipeline) as ctx:
        audit = audit_batch(ctx, batch_id)
    lines = [finding.line() for finding in audit.findings]
    for line in lines:
        _log(line)
    if not audit.ok:
        from airflow.sdk.exceptions import AirflowFailException

        broke = "; ".join(f"{f.check}: {f.detail}" for f in audit.violations)
        raise AirflowFailException(f"verify {audit.pipeline}: VIOLATION: {broke}")
    return lines


# ---------------------------------------------------------------- backfill and replay

def _backfill(pipeline: str, conf: dict[str, Any], dry_run: bool, outlet_events: Any = None) -> Any:
    request = params.backfill_request(conf)
    from eosbatch import backfill as history
    from eosbatch.backfill import describe

    with _task("backfill", pipeline, outlet_events=outlet_events, in_lane="backfill") as ctx:
        report = history.backfill(ctx, ranges=request.ranges, time_from=request.time_from,
                                  time_to=request.time_to, mode=request.mode, publish=request.publish,
                                  dry_run=dry_run)
    if dry_run:
        for line in describe(report.plan):
            _log(line)
    else:
        _log(f"{report.batches} batches: {report.records} records read, {report.sink_rows} sink rows, "
             f"{report.dead_letters} dead letters, {report.published} records published")
    return report


def _counts(report: Any) -> dict[str, Any]:
    from eosbatch.backfill import describe

    return {"dry_run": report.dry_run, "plan": describe(report.plan), "batches": report.batches,
            "records": report.records, "sink_rows": report.sink_rows, "dead_letters": report.dead_letters,
            "published": report.published}


def backfill(pipeline: str, conf: dict[str, Any], dry_run: bool, outlet_events: Any = None) -> dict[str, Any]:
    """Backfill the conf's ranges or time window. `dry_run` validates the request with the engine's rules
    and shows the plan, changing nothing."""
    return _counts(_backfill(pipeline, conf, dry_run, outlet_events))


def backfill_plan(pipeline: str, conf: dict[str, Any], most: int) -> list[dict[str, Any]]:
    """The backfill DAG's first task: a dry run (changes nothing; the plan goes to the log) whose planned
    batches become the mapped `batch` instances, at most `most` of them (consecutive batches grouped when
    there are more). Each: {"label": what the grid shows, "ranges": [...]}."""
    from eosbatch.protocol.backfill import map_batches

    planned = _backfill(pipeline, conf, dry_run=True).plan.batches
    mapped = map_batches(planned, most)
    if len(mapped) < len(planned):
        _log(f"{len(planned)} batches are more than [core] max_map_length ({most}): each mapped instance runs "
             f"up to {mapped[0].last - mapped[0].first + 1} consecutive batches")
    return [{"label": m.label(), "ranges": [str(r) for r in m.ranges]} for m in mapped]


def backfill_batch(pipeline: str, conf: dict[str, Any], mapped: dict[str, Any], outlet_events: Any = None
                   ) -> dict[str, Any]:
    """One mapped instance: a backfill of its planned batch's ranges with the run's mode. It plans them again
    first, so whatever is committed by now (an earlier try, another runner) drops out; the batches it runs
    are new ones, committed and published after every earlier batch, never out of order."""
    request = params.backfill_request(conf)
    return backfill(pipeline, {**conf, "ranges": mapped["ranges"], "from": None, "to": None,
                               "mode": request.mode, "publish": request.publish}, dry_run=False,
                    outlet_events=outlet_events)


def backfill_total(pipeline: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of the mapped instances' counts (none ran: an empty plan)."""
    keys = ("batches", "records", "sink_rows", "dead_letters", "published")
    total = {key: sum(result[key] for result in results) for key in keys}
    _log(f"{pipeline}: backfill done: {len(results)} mapped instances; " +
         ", ".join(f"{key} {total[key]}" for key in keys))
    return {"pipeline": pipeline, "instances": len(results), **total}


def replay(pipeline: str, batch_id: int, outlet_events: Any = None) -> dict[str, Any]:
    from eosbatch import backfill as history

    with _task("replay", pipeline, outlet_events=outlet_events, in_lane=None) as ctx:  # either lane
        result = history.replay(ctx, batch_id)
    _log(f"batch {batch_id}: {result.action}: {result.message}")
    return {"action": result.action, "message": result.message, "batches": list(result.batches)}
