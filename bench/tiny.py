"""The fixed cost per micro-batch (`python -m bench.run --tiny`): small batches through eosbatch's CLI, within
one run and through Airflow, against the peer's warm triggers."""

from __future__ import annotations

import json
import os
from typing import Any

from bench.harness import _timed
from bench.peer_submit import produce_orders, run_peer
from bench.report import _table
from eosbatch import engine, running, stack
from eosbatch.commands import context
from eosbatch.config import Settings
from eosbatch.context import quiet
from examples.orders.generate import ensure_topics


def through_airflow(settings: Settings, name: str, batches: int, records: int) -> list[dict[str, Any]]:
    """`batches` runs of the pipeline's micro-batch DAG by `dag.test()` (bench/airflow_tiny.py) in a child
    with the local Airflow's environment; each run's wall time and task durations."""
    import subprocess
    import sys

    from eosbatch.orchestration import local

    local.write_config()
    local.ensure_database()
    env = local.environment(os.environ)
    local.migrate_and_connect(env, settings, log=lambda _: None)
    done = subprocess.run([sys.executable, "-m", "bench.airflow_tiny", name, str(batches), str(records)], env=env,
                          cwd=local.REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench.airflow_tiny {name}: exit {done.returncode}: {done.stderr[-3000:]}")
    runs: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])["runs"]
    return runs


def tiny_batches(settings: Settings, name: str, peer_name: str, airflow_name: str, batches: int, records: int
                 ) -> str:
    """The fixed cost of a micro-batch: `batches` batches of `records` records each, for eosbatch through the
    CLI from a fresh process (one batch per run), eosbatch within one run (the further batches), eosbatch
    through Airflow (a `dag.test()` run per batch), and the peer's warm triggers (one application, a
    trigger per batch)."""
    import statistics
    import subprocess
    import sys

    topic = f"{name}_in"
    ensure_topics(settings, {topic: 1, f"{name}_out": 1})
    fresh = []
    for _ in range(batches):
        produce_orders(settings.kafka_bootstrap, topic, records)
        done, seconds = _timed(subprocess.run, [sys.executable, "-m", "eosbatch.cli", "run", name],
                               capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"eosbatch run {name}: {done.stderr[-2000:]}")
        fresh.append(seconds)
    for _ in range(batches):
        produce_orders(settings.kafka_bootstrap, topic, records)
    summary, within = _timed(running.run, context(name, quiet))  # this process's session is warm after the first batch
    if summary.batches < batches:
        raise RuntimeError(f"{name}: expected {batches} batches in one run, got {summary.batches}")
    peer_topic = f"{peer_name}_in"
    ensure_topics(settings, {peer_topic: 1, f"{peer_name}_out": 1})
    result, wall = run_peer(settings, ["tiny", peer_topic, f"{peer_name}_out", peer_name,
                                       str(stack.home() / "bench-checkpoints" / peer_name), str(batches),
                                       str(records)])
    warm = result["triggers_s"][1:] or result["triggers_s"]
    ensure_topics(settings, {f"{airflow_name}_in": 1, f"{airflow_name}_out": 1})
    airflow = through_airflow(settings, airflow_name, batches, records)
    per_airflow = statistics.median(r["wall_s"] for r in airflow)
    task_names = ["plan", "process", "commit", "publish", "finalize"]
    task_medians = {t: statistics.median(r["tasks_s"].get(t, 0.0) for r in airflow) for t in task_names}
    per_fresh, per_within, per_peer = statistics.median(fresh), within / summary.batches, statistics.median(warm)
    rows = [["eosbatch run, fresh process, 1 batch", f"{per_fresh:.2f}", f"{min(fresh):.2f}",
             f"{per_fresh / per_peer:.1f}"],
            [f"eosbatch, one run of {summary.batches} batches (per batch)", f"{per_within:.2f}", "",
             f"{per_within / per_peer:.1f}"],
            ["eosbatch through Airflow, dag.test() per batch", f"{per_airflow:.2f}",
             f"{min(r['wall_s'] for r in airflow):.2f}", f"{per_airflow / per_peer:.1f}"],
            ["peer, warm trigger (per batch)", f"{per_peer:.2f}", f"{min(warm):.2f}", "1.0"],
            ["peer, spark-submit start + session", f"{result['session_s']:.2f}", "", ""]]
    first_airflow = airflow[0]["wall_s"]
    return "\n".join([f"fixed cost per micro-batch of {records} records ({engine.kind(settings)} engine):",
                      _table(["", "median s", "min s", "vs peer trigger"], rows),
                      "through Airflow, median task durations (s): "
                      + ", ".join(f"{t} {task_medians[t]:.2f}" for t in task_names)
                      + f"; the first dag.test() run (DAG import, session open): {first_airflow:.2f} s"])
