"""An Airflow-style retry, without a scheduler: `python -m tests.chaos.dag_retry PIPELINE BATCH_ID STEP`.

A new process does what Airflow does after the task running STEP died with its worker: it runs that task again,
calling the same function the DAG task calls (eosbatch.orchestration.tasks), then the downstream tasks of the
micro-batch DAG in order, with the DAG's rules (eosbatch.orchestration.dags.microbatch_dag):
- a task that raises AirflowFailException (a TerminalError) fails for good; any other error is retried up to
  `RETRIES` times (without the delay: nothing here waits for a service to come back);
- a failed task fails its downstream tasks (upstream_failed); `abort` (trigger rule one_failed) runs when
  `process` or `commit` failed; `plan` returning None skips the rest (short circuit);
- `finalize` gets what `publish` returned (its XCom).
The last stdout line is a JSON list of {"task", "state", "attempts", "error"}, for the test to judge.
"""

from __future__ import annotations

import json
import sys
import traceback
from functools import partial
from typing import Any

from eosbatch.orchestration import tasks
from eosbatch.orchestration.dags import RETRIES

STEPS = ("plan", "process", "commit", "publish", "finalize")


def _attempt(call: Any) -> tuple[str, int, str | None, Any]:
    from airflow.sdk.exceptions import AirflowFailException

    error = None
    for attempt in range(1, RETRIES + 2):
        try:
            return "success", attempt, None, call()
        except AirflowFailException as exc:  # terminal: Airflow does not retry it
            return "failed", attempt, f"AirflowFailException: {exc}", None
        except Exception as exc:  # noqa: BLE001 - Airflow retries any other error; the test judges its type
            error = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
            print(traceback.format_exc(), file=sys.stderr, flush=True)
    return "failed", RETRIES + 1, error, None


def retry(pipeline: str, batch_id: int | None, step: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    xcom: dict[str, Any] = {}
    failed: set[str] = set()

    def run(task: str, call: Any) -> Any:
        state, attempts, error, value = _attempt(call)
        results.append({"task": task, "state": state, "attempts": attempts, "error": error})
        if state == "failed":
            failed.add(task)
        xcom[task] = value
        return value

    for task in STEPS[STEPS.index(step):]:
        if failed:  # every task downstream of a failure is upstream_failed
            results.append({"task": task, "state": "upstream_failed", "attempts": 0, "error": None})
            continue
        if task == "plan":
            batch_id = run("plan", lambda: tasks.plan(pipeline))
            if batch_id is None and "plan" not in failed:
                results.append({"task": "process..finalize", "state": "skipped", "attempts": 0, "error": None})
                return results
            continue
        assert batch_id is not None, "a DAG run past plan has a batch"
        if task == "finalize":
            run("finalize", partial(tasks.finalize, pipeline, batch_id, xcom.get("publish")))
        else:
            run(task, partial(getattr(tasks, task), pipeline, batch_id))
    if failed & {"process", "commit"}:
        run("abort", partial(tasks.abort, pipeline, batch_id, "chaos-retry"))
    return results


def main() -> int:
    pipeline, batch, step = sys.argv[1:4]
    results = retry(pipeline, int(batch) if batch.isdigit() else None, step)
    print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
