"""Workers share nothing but the ledger: with the Celery or Kubernetes executor each task of a batch may run
on another machine. Here each step runs in a process of its own, as a separate worker would: its own working
directory, HOME, TMPDIR and log folder, deleted when the step ends, so that no step can read a file an
earlier step wrote locally; services, jars and code are reached through settings only. The batch ends
exactly-once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from eosbatch.protocol.lease import airflow_owner
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# The Airflow tasks' own functions (eosbatch.orchestration.tasks), called as a worker's task process would.
WORKER = """
import json, sys

from eosbatch.orchestration import tasks

step, pipeline, owner, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
result = getattr(tasks, step)(pipeline, *args, owner=owner)
print("RESULT " + json.dumps(result))
"""


def test_each_step_on_its_own_worker_with_nothing_local_carried_over(settings, unique, tmp_path) -> None:
    scenario = Scenario(settings, unique, "totals", batch=100_000)
    owner = airflow_owner(f"eosbatch__{scenario.pipeline}", "shared-nothing-1")  # one DAG run's tasks

    def on_a_worker(step: str, *args: object) -> object:
        home = tmp_path / step
        home.mkdir()
        env = {**scenario.env(), "HOME": str(home), "TMPDIR": str(home), "XDG_STATE_HOME": str(home / "state"),
               "EOSBATCH_LOG_DIR": str(home / "logs")}
        env.pop("EOSBATCH_HOME", None)  # the embedded stack's folder is a development convenience, not a setting
        done = subprocess.run([sys.executable, "-c", WORKER, step, scenario.pipeline, owner, json.dumps(args)],
                              env=env, cwd=home, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{step}: exit {done.returncode}\n{done.stderr[-3000:]}"
        left = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
        print(f"{step}: wrote locally {left or 'nothing'}; removed with its worker")
        shutil.rmtree(home)  # the worker is gone: whatever it wrote locally is gone with it
        line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
        return json.loads(line.removeprefix("RESULT "))

    batch = on_a_worker("plan")
    assert isinstance(batch, int)
    on_a_worker("process", batch)
    committed = on_a_worker("commit", batch)
    assert isinstance(committed, dict) and committed["state"] == "committed"
    produced = on_a_worker("publish", batch)
    assert on_a_worker("finalize", batch, produced) == "published"
    assert scenario.batches() == [(batch, "regular", "published")]
    scenario.assert_exactly_once()
