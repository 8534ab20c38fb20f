"""Driving the local Airflow as a user does (the `airflow` CLI) and reading its metadata database."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg2

from eosbatch.config import Settings
from eosbatch.orchestration import local
from eosbatch.stack import processes

FINAL = {"success", "failed"}
# The micro-batch DAG's gates between batches (eosbatch.orchestration.dags): the scheduler sets their state
# without running them, so they have no log and no OpenLineage events.
GATE = re.compile(r"^batch_\d+_(failed|skipped)$")


def run_states(published: int, cap: int, failed: str | None = None) -> dict[str, str]:
    """The task states of a micro-batch DAG run that published `published` batches, then (below the cap)
    found nothing new: that plan skipped everything after it, later groups included."""
    states: dict[str, str] = {}
    for number in range(1, cap + 1):
        group = f"batch_{number}"
        if number <= published:
            states.update({f"{group}.{step}": "success" for step in ("plan", "process", "commit", "publish",
                                                                      "finalize", "done")})
            states[f"{group}.abort"] = "skipped"
        else:  # the caught-up group: only its plan ran; every later group was skipped
            states.update({f"{group}.{step}": "skipped" for step in ("plan", "process", "commit", "publish",
                                                                      "finalize", "abort", "done")})
            if number == published + 1:
                states[f"{group}.plan"] = "success"
        if number < cap:
            states[f"{group}_failed"] = states[f"{group}_skipped"] = "skipped"
    return states


def metadata_query(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows from the local Airflow's metadata database."""
    connection = psycopg2.connect(local.metadata_url().replace("postgresql+psycopg2", "postgresql"))
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql, args)
            return cursor.fetchall()
    finally:
        connection.close()


def asset_events(uri: str) -> list[dict[str, Any]]:
    """The extras of the asset events Airflow recorded for `uri`, oldest first."""
    return [extra for (extra,) in metadata_query("SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                                                 "WHERE a.uri = %s ORDER BY e.id", (uri,))]


class LocalAirflow:
    def __init__(self, settings: Settings, suffixes: dict[str, str], base: Mapping[str, str],
                 lineage: Path | None = None) -> None:
        self.settings, self.suffixes, self.base = settings, suffixes, dict(base)
        self.lineage = lineage  # where OpenLineage's file transport writes the tasks' events

    def lineage_events(self, dag_id: str, run_id: str, timeout: float = 60) -> dict[str, dict[str, Any]]:
        """task id -> the COMPLETE OpenLineage event of that task in the run, once every successful task of
        the run has one (the listener writes them as the tasks end)."""
        done = {task for task, (state, _, _) in self.tasks(dag_id, run_id).items() if state == "success"
                and not GATE.match(task)}
        deadline = time.monotonic() + timeout
        found: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            lines = self.lineage.read_text().splitlines() if self.lineage and self.lineage.exists() else []
            found = {}
            for line in filter(None, map(str.strip, lines)):
                event = json.loads(line)
                task = event.get("job", {}).get("name", "")
                airflow = event.get("run", {}).get("facets", {}).get("airflow", {})
                if (event.get("eventType") == "COMPLETE" and task.startswith(f"{dag_id}.")
                        and airflow.get("dagRun", {}).get("run_id") == run_id):
                    found[task.removeprefix(f"{dag_id}.")] = event
            if done <= set(found):
                return found
            time.sleep(1)
        raise AssertionError(f"{dag_id} {run_id}: OpenLineage COMPLETE events for {sorted(found)}, expected "
                             f"{sorted(done)} (in {self.lineage})")

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = local.run_airflow(list(args), local.environment(self.base))
        if check:
            assert done.returncode == 0, f"airflow {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}"
        return done

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return metadata_query(sql, args)

    def wait_parsed(self, *dag_ids: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = {row[0] for row in self.query("SELECT dag_id FROM dag WHERE dag_id = ANY(%s)", (list(dag_ids),))}
            if found == set(dag_ids):
                return
            time.sleep(1)
        raise AssertionError(f"the DAG processor did not parse {sorted(set(dag_ids) - found)} in {timeout:.0f}s")

    def unpause(self, dag_id: str) -> None:
        self.wait_parsed(dag_id)
        self.cli("dags", "unpause", dag_id)

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any] | None = None) -> None:
        args = ["dags", "trigger", dag_id, "--run-id", run_id]
        self.cli(*args, *(["--conf", json.dumps(conf)] if conf is not None else []))

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
        return rows[0][0] if rows else None

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in FINAL:
                return state
            time.sleep(1)
        raise AssertionError(f"{dag_id} {run_id}: still {state} after {timeout:.0f}s; tasks: "
                             f"{self.tasks(dag_id, run_id)}")

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A call to the API server's REST API (/api/v2), as the UI makes it (all users are admins here)."""
        import urllib.request

        base = f"http://127.0.0.1:{local.api_port()}"
        with urllib.request.urlopen(f"{base}/auth/token", timeout=30) as reply:
            token = json.loads(reply.read())["access_token"]
        request = urllib.request.Request(f"{base}/api/v2/{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(), headers={
                                             "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            text = reply.read()
        return json.loads(text) if text else None

    def clear(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> None:
        """Clear one (mapped) task instance as the grid's Clear button does (the REST API: the CLI clears
        every map index), so the scheduler runs it again."""
        body = {"dry_run": False, "only_failed": False, "dag_run_id": run_id, "task_ids": [[task_id, map_index]],
                "reset_dag_runs": True}
        cleared = self.api("POST", f"dags/{dag_id}/clearTaskInstances", body)["task_instances"]
        assert [(t["task_id"], t["map_index"]) for t in cleared] == [(task_id, map_index)], cleared

    def add_connection(self, conn_id: str, fields: dict[str, Any]) -> None:
        """As a user adds one in the UI (Admin > Connections): into the metadata database, read by the tasks."""
        self.api("POST", "connections", {"connection_id": conn_id, **fields})

    def runs(self, dag_id: str) -> list[tuple[str, str]]:
        """(run id, run type) of the DAG's runs, oldest first."""
        return [tuple(row) for row in self.query("SELECT run_id, run_type FROM dag_run WHERE dag_id = %s ORDER BY id",
                                                 (dag_id,))]

    def wait_runs(self, dag_id: str, count: int, timeout: float = 120) -> list[tuple[str, str]]:
        """The DAG's runs once there are `count` (e.g. created by the scheduler on an asset event)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.runs(dag_id)
            if len(found) >= count:
                return found
            time.sleep(1)
        raise AssertionError(f"{dag_id}: {len(self.runs(dag_id))} runs after {timeout:.0f}s, expected {count}")

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        rows = self.query("SELECT value FROM xcom WHERE dag_id = %s AND run_id = %s AND task_id = %s "
                          "AND key = 'return_value'", (dag_id, run_id, task_id))
        assert rows, f"{dag_id} {run_id} {task_id}: no return value"
        value = rows[0][0]
        return json.loads(value) if isinstance(value, str) else value

    def tasks(self, dag_id: str, run_id: str) -> dict[str, tuple[str | None, int, float | None]]:
        """task id -> (state, try number, duration in seconds) from the task_instance table."""
        rows = self.query("SELECT task_id, state, try_number, EXTRACT(EPOCH FROM end_date - start_date) "
                          "FROM task_instance WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
        return {task: (state, tries, None if took is None else round(float(took), 2)) for task, state, tries, took
                in rows}

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        return self.tasks(dag_id, run_id).get(task_id, (None, 0, None))[0]

    def timeline(self, dag_id: str, run_id: str) -> str:
        """The run's tasks in start order, for the test output (and the closing note)."""
        rows = self.query("SELECT task_id, state, try_number, start_date, end_date FROM task_instance "
                          "WHERE dag_id = %s AND run_id = %s ORDER BY start_date NULLS LAST, task_id", (dag_id, run_id))
        run = self.query("SELECT state, start_date, end_date FROM dag_run WHERE dag_id = %s AND run_id = %s",
                         (dag_id, run_id))[0]
        lines = [f"{dag_id} {run_id}: {run[0]} in {(run[2] - run[1]).total_seconds():.1f}s"]
        for task, state, tries, start, end in rows:
            took = f"{(end - start).total_seconds():6.2f}s" if start and end else "      -"
            offset = f"+{(start - run[1]).total_seconds():5.1f}s" if start else "      "
            lines.append(f"  {task:<9} {state or '-':<16} try {tries}  start {offset}  took {took}")
        return "\n".join(lines)

    def kill_scheduler(self) -> int:
        """SIGKILL the scheduler's process group: the scheduler, its executor workers and their task
        supervisors. Task processes (and their Spark drivers) run in process groups of their own and live on,
        orphaned, like the work of a crashed scheduler on a surviving machine."""
        pid = processes.read_pid(local.pid_file("scheduler"))
        assert pid is not None, "the scheduler is not running"
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while processes.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes.alive(pid)
        return pid
