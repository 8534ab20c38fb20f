"""One run of the micro-batch DAG, task by task, as Airflow's tasks call the engine (eosbatch.orchestration.tasks),
in a process of its own: `python -m tests.chaos.airflow_run PIPELINE RUN_ID`. All tasks share the run's
lease owner. Exit 0: a batch went through; 10: caught up; 3: the lane is busy (Airflow would retry plan)."""

from __future__ import annotations

import sys

from eosbatch.ledger.exceptions import LaneBusy
from eosbatch.orchestration import tasks

CAUGHT_UP, BUSY = 10, 3


def main(pipeline: str, run_id: str) -> int:
    owner = tasks.run_owner(f"eosbatch__{pipeline}", run_id)
    try:
        batch_id = tasks.plan(pipeline, owner)
    except LaneBusy as exc:
        print(f"plan: LaneBusy: {exc}", file=sys.stderr, flush=True)
        return BUSY
    if batch_id is None:
        return CAUGHT_UP
    try:
        tasks.process(pipeline, batch_id, owner)
        tasks.commit(pipeline, batch_id, owner)
    except Exception:
        tasks.abort(pipeline, batch_id, run_id, owner)  # the abort task, trigger rule one_failed
        raise
    produced = tasks.publish(pipeline, batch_id, owner)
    tasks.finalize(pipeline, batch_id, produced, owner)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
