"""Operators can see it: the metrics a real run exports through the OpenTelemetry SDK's own exporter (the console
exporter appending JSON lines to a file, EOSBATCH_METRICS=file:PATH) match the ledger and Kafka, and
`eosbatch status` without a pipeline shows every registered pipeline at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eosbatch import config, metrics
from eosbatch.kafka import offsets
from eosbatch.ledger import store
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark]

Points = dict[tuple[str, str, frozenset[tuple[str, Any]]], dict[str, Any]]
# An Airflow task of the micro-batch DAG, as its task process runs it (tasks.batch_task's functions), ending as
# that process ends: by os._exit, which runs no exit handler.
TASK = """
import json, os, sys
from eosbatch.orchestration import tasks
name, pipeline, *args = sys.argv[1:]
print(json.dumps(getattr(tasks, name)(pipeline, *map(json.loads, args), owner=tasks.run_owner("dag", "run"))))
sys.stdout.flush()
os._exit(0)
"""


def exported(path: Path) -> Points:
    """Every data point the exporter wrote, by (process, metric, attributes): the newest one of each (the SDK
    exports cumulative sums and histograms, so the newest is that process's total)."""
    found: Points = {}
    for line in path.read_text().splitlines():
        for resource in json.loads(line)["resource_metrics"]:
            assert resource["resource"]["attributes"]["service.name"] == "eosbatch"
            process = resource["resource"]["attributes"]["service.instance.id"]
            for scope in resource["scope_metrics"]:
                assert scope["scope"]["name"] == metrics.METER
                for metric in scope["metrics"]:
                    for point in metric["data"]["data_points"]:
                        found[process, metric["name"], frozenset(point["attributes"].items())] = point
    return found


def of(points: Points, name: str, **attributes: Any) -> list[dict[str, Any]]:
    """The points of metric `name` whose attributes include `attributes`, each with its attributes."""
    return [{**point, "attributes": dict(attrs)} for (_, metric, attrs), point in points.items()
            if metric == name and set(attributes.items()) <= attrs]


def ledger_counts(settings: config.Settings, pipeline: str) -> tuple[int, int, int, int]:
    """The published batches of `pipeline`, and the records they read, their sink rows and dead letters."""
    with store.transaction(settings) as cur:
        cur.execute("SELECT count(*), sum(records_read), sum(sink_rows), sum(dead_letters) FROM eosbatch.batches "
                    "WHERE pipeline = %s AND state = 'published'", (pipeline,))
        return tuple(cur.fetchone())  # type: ignore[return-value]


def counted(points: list[Points], pipeline: str) -> tuple[int, ...]:
    return tuple(sum(p["value"] for found in points for p in of(found, name, pipeline=pipeline, kind="regular"))
                 for name in (metrics.BATCHES_COMMITTED, metrics.RECORDS_READ, metrics.SINK_ROWS,
                              metrics.DEAD_LETTERS))


def test_a_run_exports_its_lag_step_durations_and_counts_as_the_ledger_has_them(settings, unique, tmp_path):
    scenario = Scenario(settings, unique, "totals", records=2400, batch=1500)
    first, rest = tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    stable = {str(tp): b.stable for tp, b in offsets.bounds(settings, [scenario.input]).items()}

    scenario.env_overrides = {config.METRICS: f"file:{first}"}
    ran = scenario.run(None, "--max-batches", "1")
    assert ran.returncode == 0, ran.stderr[-2000:]
    scenario.env_overrides = {config.METRICS: f"file:{rest}"}
    ran = scenario.run()
    assert ran.returncode == 0, ran.stderr[-2000:]
    scenario.assert_exactly_once()
    runs = [exported(first), exported(rest)]

    # The lag each run's plans saw: the first plan, before anything was read, the whole log (the pipeline
    # reads from offset 0); the last plan of the second run, caught up, none. `status` says the same now.
    lag = [{f"{p['attributes']['topic']}:{p['attributes']['partition']}": p["value"]
            for p in of(points, metrics.LAG, pipeline=scenario.pipeline)} for points in runs]
    assert lag[0] == stable and all(n > 0 for n in stable.values())
    status = json.loads(scenario.cli("status", scenario.pipeline, "--json").stdout)
    assert lag[1] == {p["partition"]: p["lag"] for p in status["partitions"]} == {tp: 0 for tp in stable}

    batches, read, sink_rows, dead = ledger_counts(settings, scenario.pipeline)
    assert batches >= 2 and dead > 0  # 2400 records in batches of 1500; the generator writes malformed ones
    assert counted(runs, scenario.pipeline) == (batches, read, sink_rows, dead)

    # One duration per step and batch; plan also once more per run, when it finds nothing left to do.
    def durations(step: str) -> list[dict[str, Any]]:
        return [p for points in runs for p in of(points, metrics.STEP_DURATION, pipeline=scenario.pipeline,
                                                  step=step)]

    for step in ("process", "commit", "publish", "finalize"):
        [*found] = durations(step)
        assert sum(p["count"] for p in found) == batches, (step, found)
        assert all("error.type" not in p["attributes"] and p["sum"] > 0 for p in found)
    assert sum(p["count"] for p in durations("plan")) == batches + 1  # the first run stopped after one batch
    assert not [p for points in runs for p in of(points, metrics.TERMINAL_ERRORS)]


def test_a_terminal_error_is_counted_and_status_shows_every_pipeline_with_its_blocked_lane(settings, unique,
                                                                                          tmp_path):
    """The output topic deleted after a commit: publish fails for good (tests/integration/test_stuck_lane.py),
    its terminal error is counted, and the overview shows the lane blocked with that error."""
    from confluent_kafka.admin import AdminClient

    from eosbatch import faults

    scenario = Scenario(settings, unique, "latest", records=600, batch=2000)
    crashed = scenario.run("commit.after_commit")
    assert crashed.returncode == faults.EXIT_CODE and scenario.states() == ["committed"]
    admin = AdminClient(settings.kafka())
    admin.delete_topics([scenario.output])[scenario.output].result(30)

    path = tmp_path / "stuck.jsonl"
    scenario.env_overrides = {config.METRICS: f"file:{path}"}
    stuck = scenario.run()
    assert stuck.returncode == 2, stuck.stderr[-2000:]
    [line] = [x for x in stuck.stderr.splitlines() if x.startswith("eosbatch: ")]
    error_type = line.split(":")[1].strip()  # "eosbatch: <type>: <message>"
    [counted] = of(exported(path), metrics.TERMINAL_ERRORS, pipeline=scenario.pipeline)
    # The committed batch is rolled forward by the plan step's recovery, where its publish fails.
    assert counted["attributes"] == {"pipeline": scenario.pipeline, "step": "plan", "error.type": error_type}
    assert counted["value"] == 1

    every = json.loads(scenario.cli("status", "--json").stdout)
    by_name = {p["pipeline"]: p for p in every}
    # EOSBATCH_PIPELINES=tests.pipelines.crash registers both of the scenario's pipelines; the other never ran.
    assert {scenario.pipeline, f"crash_totals_{unique}"} <= set(by_name)
    mine = by_name[scenario.pipeline]
    [batch_id] = [i for i, _, _ in scenario.batches()]
    assert mine["last_batch"]["id"] == batch_id and mine["last_batch"]["state"] == "committed"
    with store.transaction(settings) as cur:
        [ledger] = store.recent_batches(cur, scenario.pipeline, 1)
    assert (mine["last_batch"]["records_read"], mine["last_batch"]["sink_rows"]) == (ledger.records_read,
                                                                                       ledger.sink_rows)
    assert [(b["lane"], b["state"], b["batch"]) for b in mine["blocked"]] == [("regular", "blocked", batch_id)]
    assert error_type in mine["blocked"][0]["error"] and scenario.output in mine["blocked"][0]["error"]
    assert mine["lag"] == 0  # its offsets moved with the commit; only the publish is stuck
    other = by_name[f"crash_totals_{unique}"]
    assert other["last_batch"] is None and other["blocked"] == [] and other["error"] is None

    text = scenario.cli("status")
    assert text.returncode == 0, text.stderr[-2000:]
    assert f"BLOCKED regular lane batch {batch_id}: " in text.stdout


def test_the_airflow_tasks_export_their_steps_before_their_process_ends(settings, unique, tmp_path):
    """The DAG's tasks, each in a process of its own that ends by os._exit as Airflow's task processes do: each
    exports its step (the task flushes the meter provider) and the commit's counts, as the ledger has them."""
    scenario = Scenario(settings, unique, "totals", records=600, batch=1500)
    path = tmp_path / "tasks.jsonl"
    scenario.env_overrides = {config.METRICS: f"file:{path}"}

    def task(name: str, *args: Any) -> Any:
        done = subprocess.run([sys.executable, "-c", TASK, name, scenario.pipeline, *map(json.dumps, args)],
                              env=scenario.env(), capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.splitlines()[-1])

    batch = task("plan")
    task("process", batch)
    task("commit", batch)
    task("finalize", batch, task("publish", batch))
    points = exported(path)
    steps = {p["attributes"]["step"]: p["count"] for p in of(points, metrics.STEP_DURATION,
                                                               pipeline=scenario.pipeline)}
    assert steps == {"plan": 1, "process": 1, "commit": 1, "publish": 1, "finalize": 1}
    assert counted([points], scenario.pipeline) == ledger_counts(settings, scenario.pipeline)
    assert ledger_counts(settings, scenario.pipeline)[0] == 1
