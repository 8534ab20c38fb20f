"""What `eosbatch status` shows: one pipeline in detail, or every registered pipeline at once (its lag, its last
batch, and its lanes, with the errors of those that are blocked or failing)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

from eosbatch.config import Settings
from eosbatch.exceptions import EosbatchError
from eosbatch.kafka import offsets
from eosbatch.ledger import lanes, positions, store
from eosbatch.pipeline import Pipeline
from eosbatch.protocol import sources
from eosbatch.protocol.lease import Lease
from eosbatch.protocol.states import Lane, lane

LaneState = dict[str, Any]
LANES: tuple[Lane, ...] = get_args(Lane)


def pipeline_status(settings: Settings, pipeline: Pipeline, limit: int = 10) -> dict[str, Any]:
    """Recent batches, per partition next offset, last stable offset and lag, the source topics' IDs, any
    source change that stops the pipeline, the resets recorded, and each lane's state."""
    topic_ids, bounds = offsets.source_state(settings, pipeline.source.topics)
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, pipeline.name)
        where = positions.incarnations(cur, pipeline.name)
        known = positions.source_topics(cur, pipeline.name)
        resets = positions.resets(cur, pipeline.name)
        batches = store.recent_batches(cur, pipeline.name, limit)
        unfinished = store.open_batches(cur, pipeline.name)
        last = store.last_of_each_lane(cur, pipeline.name)
        leases = lanes.lane_leases(cur, pipeline.name)
    check = sources.check_sources(known, topic_ids, {tp: w.next_offset for tp, w in where.items()}, bounds)
    # A partition whose source changed has no meaningful lag: its offsets are not the ledger's any more.
    unsure = {p.topic for p in check.problems if p.kind == "new_topic_id"}
    unsure_tps = {(p.topic, p.partition) for p in check.problems if p.partition is not None}
    partitions = []
    for tp, bound in sorted(bounds.items()):
        now = where.get(tp)
        next_offset = now.next_offset if now is not None else None
        lag = (None if next_offset is None or tp.topic in unsure or (tp.topic, tp.partition) in unsure_tps
               else max(0, bound.stable - next_offset))
        partitions.append({"partition": str(tp), "next_offset": next_offset, "log_start": bound.low,
                           "last_stable_offset": bound.stable, "lag": lag,
                           "incarnation": now.incarnation if now is not None else None})
    problems = [p.describe(pipeline.name) for p in check.problems]
    return {"pipeline": pipeline.name, "partitions": partitions,
            "topics": {t: {"topic_id": topic_ids.get(t), "ledger_topic_id": known[t].topic_id if t in known else None,
                           "incarnation": known[t].incarnation if t in known else 0}
                       for t in pipeline.source.topics},
            "source_problems": problems,
            "resets": [{"id": i, "at": when.isoformat(timespec="seconds"), "reset": str(r), "reason": reason}
                       for i, when, reason, r in resets],
            "batches": [batch_line(b) for b in batches],
            "lanes": lane_states(problems, unfinished, last, {name: lease for name, (lease, _) in leases.items()})}


def batch_line(batch: store.Batch) -> dict[str, Any]:
    return {"id": batch.id, "kind": batch.kind, "state": batch.state, "ranges": [str(r) for r in batch.ranges],
            "records_read": batch.records_read, "sink_rows": batch.sink_rows, "dead_letters": batch.dead_letters,
            "published": batch.published_records, "error": batch.error,
            "updated": batch.updated_at.isoformat(timespec="seconds")}


def lane_states(source_problems: list[str], unfinished: Iterable[store.Batch], last: Iterable[store.Batch],
                leases: dict[str, Lease]) -> list[LaneState]:
    """Each lane's state, worst first within a lane:
    - blocked: it cannot go on until an operator acts. A source topic changed (both lanes stop at their next
      plan: eosbatch reset), or a committed batch's publish failed for good (its error recorded on it:
      eosbatch publish --published/--republish);
    - failing: its newest batch was aborted (the error says why); the next run plans its ranges again;
    - busy: it has an unfinished batch, or a runner holds its lease;
    - idle."""
    newest = {lane(b.kind): b for b in last}
    states: list[LaneState] = []
    for name in LANES:
        owner = leases[name].owner if name in leases else None
        stuck = [b for b in unfinished if lane(b.kind) == name and b.state == "committed" and b.error]
        found = newest.get(name)
        state: LaneState = {"lane": name, "state": "idle", "batch": None, "error": None, "lease_owner": owner}
        if source_problems:
            state.update(state="blocked", error="; ".join(source_problems))
        elif stuck:
            state.update(state="blocked", batch=stuck[0].id, error=stuck[0].error)
        elif found is not None and found.state == "aborted":
            state.update(state="failing", batch=found.id, error=found.error)
        elif owner is not None or any(lane(b.kind) == name for b in unfinished):
            state.update(state="busy", batch=found.id if found is not None else None)
        states.append(state)
    return states


def every_pipeline(settings: Settings, pipelines: dict[str, Pipeline]) -> list[dict[str, Any]]:
    """One line of status per pipeline, by name. A pipeline whose status cannot be read (its topic is missing,
    the broker refuses it) says why, and the others are still shown."""
    return [_summary(settings, pipelines[name]) for name in sorted(pipelines)]


def _summary(settings: Settings, pipeline: Pipeline) -> dict[str, Any]:
    try:
        found = pipeline_status(settings, pipeline, limit=1)
    except EosbatchError as exc:
        return {"pipeline": pipeline.name, "error": f"{type(exc).__name__}: {exc}", "lag": None, "partitions": [],
                "last_batch": None, "lanes": [], "blocked": []}
    lags = [p["lag"] for p in found["partitions"]]
    known = [n for n in lags if n is not None]
    return {"pipeline": pipeline.name, "error": None,
            # None when no partition's lag is known (a pipeline that has not planned yet, a changed source)
            "lag": sum(known) if known else None,
            "partitions": [{k: p[k] for k in ("partition", "lag", "next_offset", "last_stable_offset")}
                           for p in found["partitions"]],
            "last_batch": found["batches"][0] if found["batches"] else None,
            "lanes": found["lanes"],
            "blocked": [s for s in found["lanes"] if s["state"] in ("blocked", "failing")]}

