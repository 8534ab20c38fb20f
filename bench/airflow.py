"""A micro-batch through the real Airflow scheduler, trigger to done, and where its time goes.

    python -m bench.airflow [--runs 5] [--records 100] [--pipeline order_totals|order_totals_compact]
                            [--no-restart] [--json]

`eosbatch airflow up` (LocalExecutor; restarted first unless --no-restart, so that the first run after `up` is
measured), serving examples.orders' pipelines and order_totals_compact (bench/airflow_pipelines.py: the same
pipeline in the compact DAG shape), the pipeline caught up beforehand with the CLI; then runs+1 times: RECORDS
orders into the topic, a run of `eosbatch__<pipeline>` triggered through the REST API, waited for in the metadata
database. Each run's breakdown comes from Airflow's own records (task_instance: scheduled, queued, start, end;
dag_run: end):

- publish: trigger -> the end of the task that published the batch (finalize, or commit_and_publish);
- done: trigger -> the run's success, as Airflow records it;
- tasks: the time some task of the run was running (start..end, overlaps counted once);
- gaps: done - tasks, the scheduler's and the executor's share: trigger -> first task start, each task's
  end -> the next one's start (scheduled -> queued -> started), the last task's end -> the run's end.

The first run after `up` is shown apart from the warm ones; the per-task table is the warm runs' median.
Uses the embedded stack (EOSBATCH_HOME and the EOSBATCH_*_PORT variables choose which one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from typing import Any, NamedTuple

import psycopg2

from eosbatch import config, stack
from eosbatch.orchestration import dags, local

FINAL = {"success", "failed"}
PUBLISHING = ("finalize", "commit_and_publish")  # the task whose end is the batch's publication
COMPACT_PIPELINES = "bench.airflow_pipelines"  # order_totals_compact: order_totals, AirflowOptions(shape="compact")


class Task(NamedTuple):
    task_id: str
    state: str
    scheduled: datetime | None
    queued: datetime | None
    start: datetime | None
    end: datetime | None


class Run(NamedTuple):
    run_id: str
    trigger: float  # epoch seconds, when the REST call was made
    end: float
    tasks: list[Task]

    def done_s(self) -> float:
        return self.end - self.trigger

    def publish_s(self) -> float:
        ends = [t.end.timestamp() for t in self.tasks if t.end and t.task_id.rsplit(".", 1)[-1] in PUBLISHING]
        return max(ends) - self.trigger if ends else float("nan")

    def ran(self) -> list[Task]:
        return sorted((t for t in self.tasks if t.start and t.end), key=lambda t: t.start)  # type: ignore[arg-type,return-value]

    def busy_s(self) -> float:
        """Seconds during which a task of the run was running (the union of their spans)."""
        total, reach = 0.0, self.trigger
        for task in self.ran():
            start, end = task.start.timestamp(), task.end.timestamp()  # type: ignore[union-attr]
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total


def _query(sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    connection = psycopg2.connect(config.to_libpq_url(local.metadata_url()), connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql, args)
            return cursor.fetchall()
    finally:
        connection.close()


def _api(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    base = f"http://127.0.0.1:{local.api_port()}"
    with urllib.request.urlopen(f"{base}/auth/token", timeout=30) as reply:  # noqa: S310 - loopback
        token = json.loads(reply.read())["access_token"]
    request = urllib.request.Request(f"{base}/api/v2/{path}", method=method,  # noqa: S310 - loopback
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310 - loopback
        text = reply.read()
    return json.loads(text) if text else None


def _cli(*args: str, env: dict[str, str], unless: str = "") -> None:
    """`eosbatch ARGS`; a failure raises, unless its error names `unless`."""
    done = subprocess.run([sys.executable, "-m", "eosbatch.cli", *args], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0 and not (unless and unless in done.stderr):
        raise RuntimeError(f"eosbatch {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")


def _wait_parsed_and_unpause(dag: str) -> None:
    local.wait_parsed([dag])
    _api("PATCH", f"dags/{dag}", {"is_paused": False})


def trigger_and_wait(dag: str, run_id: str, timeout: float = 300) -> Run:
    triggered = time.time()
    _api("POST", f"dags/{dag}/dagRuns", {"dag_run_id": run_id, "logical_date": None})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _query("SELECT state, end_date FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag, run_id))
        if rows and rows[0][0] in FINAL:
            state, end = rows[0]
            if state != "success":
                raise RuntimeError(f"{dag} {run_id}: {state}; see the task logs under {local.home() / 'logs'}")
            tasks = [Task(*row) for row in _query(
                "SELECT task_id, state, scheduled_dttm, queued_dttm, start_date, end_date FROM task_instance "
                "WHERE dag_id = %s AND run_id = %s", (dag, run_id))]
            return Run(run_id, triggered, end.timestamp(), tasks)
        time.sleep(0.1)
    raise RuntimeError(f"{dag} {run_id}: not done after {timeout:.0f}s")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def per_task(runs: list[Run]) -> list[tuple[str, float, float, float]]:
    """(task, median wait before it: the previous task's end (or the trigger) -> its queued; queued -> start;
    its run time) over `runs`, in the order the tasks ran."""
    waits: dict[str, list[tuple[float, float, float]]] = {}
    for run in runs:
        before = run.trigger
        for task in run.ran():
            queued = task.queued.timestamp() if task.queued else task.start.timestamp()  # type: ignore[union-attr]
            start, end = task.start.timestamp(), task.end.timestamp()  # type: ignore[union-attr]
            waits.setdefault(task.task_id, []).append((queued - before, start - queued, end - start))
            before = max(before, end)
        waits.setdefault("(run's end)", []).append((run.end - before, 0.0, 0.0))
    return [(task, *(_median([w[i] for w in found]) for i in range(3))) for task, found in waits.items()]


def table(first: Run | None, warm: list[Run]) -> str:
    lines = ["| run | trigger -> published | trigger -> done | tasks running | gaps (scheduler) | tasks run |",
             "|---|---|---|---|---|---|"]
    for label, run in ([("first after up", first)] if first else []) + [(f"warm {i + 1}", r) for i, r in
                                                                        enumerate(warm)]:
        lines.append(f"| {label} | {run.publish_s():.2f} s | {run.done_s():.2f} s | {run.busy_s():.2f} s | "
                     f"{run.done_s() - run.busy_s():.2f} s | {len(run.ran())} |")
    if warm:
        done = [r.done_s() for r in warm]
        lines.append(f"| **warm median** | {_median([r.publish_s() for r in warm]):.2f} s | {_median(done):.2f} s "
                     f"(min {min(done):.2f}, max {max(done):.2f}) | {_median([r.busy_s() for r in warm]):.2f} s | "
                     f"{_median([r.done_s() - r.busy_s() for r in warm]):.2f} s | |")
        lines += ["", "| task (warm medians) | before it: previous end -> queued | queued -> start | its run time |",
                  "|---|---|---|---|"]
        lines += [f"| {task} | {before:.2f} s | {queued:.2f} s | {took:.2f} s |"
                  for task, before, queued, took in per_task(warm)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="warm runs (after the first one after `up`)")
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--pipeline", default="order_totals",
                        help="comma-separated: their runs alternate, in one sitting (e.g. "
                             "order_totals,order_totals_compact)")
    parser.add_argument("--no-restart", action="store_true", help="keep a running Airflow (no first-run figure)")
    parser.add_argument("--json", action="store_true", help="also print every run's task records as JSON")
    args = parser.parse_args(argv)
    from bench.peer_submit import produce_orders
    from eosbatch import registry

    info = stack.up(log=lambda line: print(line, file=sys.stderr))
    os.environ.update(info.env())
    env = dict(os.environ)
    _cli("db", "upgrade", env=env)
    os.environ[config.PIPELINES] = env[config.PIPELINES] = f"{local.DEFAULT_PIPELINES},{COMPACT_PIPELINES}"
    names = [name.strip() for name in args.pipeline.split(",") if name.strip()]
    pipelines = [registry.load()[name] for name in names]
    settings = config.load()
    for pipeline in pipelines:
        produce_orders(settings.kafka_bootstrap, pipeline.source.topics[0], 1)  # the topic exists
        if pipeline.output is not None:  # an existing one, whatever its partitions, is fine
            _cli("topic", "create", pipeline.output.topic, "--partitions", "4", env=env, unless="TopicExists")
    if not args.no_restart:
        local.down(log=lambda line: print(line, file=sys.stderr))
    for name in names:
        _cli("run", name, env=env)  # caught up: each measured run has RECORDS new records, no more
    started = time.monotonic()
    local.up(log=lambda line: print(line, file=sys.stderr))
    print(f"airflow up: {time.monotonic() - started:.1f}s", file=sys.stderr)
    for name in names:
        _wait_parsed_and_unpause(dags.dag_id(name))
    runs: dict[str, list[Run]] = {name: [] for name in names}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for number in range(args.runs + (0 if args.no_restart else 1)):
        for pipeline in pipelines:
            produce_orders(settings.kafka_bootstrap, pipeline.source.topics[0], args.records)
            run = trigger_and_wait(dags.dag_id(pipeline.name), f"bench_{stamp}_{number}")
            runs[pipeline.name].append(run)
            print(f"{pipeline.name} {run.run_id}: done in {run.done_s():.2f}s (published at {run.publish_s():.2f}s)",
                  file=sys.stderr)
    load = os.getloadavg()
    for name in names:
        first, warm = (None, runs[name]) if args.no_restart else (runs[name][0], runs[name][1:])
        print(f"\n{args.records} records per run through {dags.dag_id(name)}, LocalExecutor; load average "
              f"{load[0]:.1f} on {os.cpu_count()} cores\n")
        print(table(first, warm))
    if args.json:
        print(json.dumps([{"run_id": r.run_id, "trigger": r.trigger, "end": r.end, "tasks": [
            {**t._asdict(), **{k: v.isoformat() for k, v in t._asdict().items() if isinstance(v, datetime)}}
            for t in r.tasks]} for found in runs.values() for r in found]))


if __name__ == "__main__":
    main()
