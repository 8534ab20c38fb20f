"""Batches on a real Spark standalone cluster (issue 13, item 1): a master and two one-core workers on loopback
(`eosbatch stack up --spark-cluster`), and a Spark Connect server whose master it is, as the long-lived engine.

Unlike local[N], executors run in JVMs of their own: they fetch the connector jars and the pipelines' code from
the driver, keep shuffle files that die with their worker, and a task lost with its worker runs again on the
other one. The cluster and its Connect server start once for this module (the other tests keep the stack's
local[2,3] server) and stop at its end, unless they were running before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import NamedTuple

import pytest
from psycopg2 import sql

from eosbatch import config, stack
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import store
from eosbatch.stack.processes import alive
from eosbatch.stack.spark_cluster import SparkCluster
from tests.chaos.control import Runner, end_exactly_once, wait_until
from tests.chaos.control import session as process_session
from tests.conftest import _unavailable
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

RECORDS = 2400  # ~2,440 offsets over 3 partitions, aborted transactions, repeated ids, malformed records
BATCH = 1500    # two batches


class OnCluster(NamedTuple):
    cluster: SparkCluster
    remote: str  # the Connect server on the cluster


@pytest.fixture(scope="module")
def on_cluster(settings) -> Iterator[OnCluster]:
    cluster, connect = stack._cluster_parts(stack.home())
    was_running = cluster.status().running or connect.pid() is not None
    try:
        stack.cluster_up(log=lambda _: None)
    except Exception as exc:  # noqa: BLE001 - any failure to start it is reported the same way
        _unavailable(f"the Spark cluster did not start: {type(exc).__name__}: {exc}")
    try:
        yield OnCluster(cluster, connect.url)
    finally:
        if not was_running:
            stack.cluster_down(log=lambda _: None)
            assert not cluster.status().running and connect.pid() is None, "cluster_down left something running"


@pytest.fixture
def remote(on_cluster, monkeypatch) -> OnCluster:
    """The scenario's runs (their env copies os.environ) go to the cluster's Connect server."""
    monkeypatch.setenv(config.SPARK_REMOTE, on_cluster.remote)
    return on_cluster


def _executor_logs(cluster: SparkCluster) -> dict[str, str]:
    """Each worker's executor logs (work/<app>/<executor>/stderr), joined."""
    return {name: "\n".join(path.read_text(errors="replace")
                            for path in sorted((cluster.home / name / "work").glob("app-*/*/stderr")))
            for name in cluster.worker_names()}


def test_pipelines_on_the_cluster_end_exactly_once(settings, unique, remote):
    """Both sink modes, two batches each, on executors in the workers' JVMs: the connector jars and the code
    reached them (the Kafka source reads there), and the end state is exactly-once."""
    ran_before = {name: log.count("Finished task") for name, log in _executor_logs(remote.cluster).items()}
    totals = Scenario(settings, unique, "totals", records=RECORDS, batch=BATCH)
    latest = Scenario(settings, unique, "latest", records=0, batch=BATCH)
    for scenario in (totals, latest):
        done = scenario.run()
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(scenario.batches()) == 2, scenario.batches()
        end_exactly_once(scenario, recompute=scenario is totals)  # the verifier's recompute runs there too
    logs = _executor_logs(remote.cluster)
    for name, log in logs.items():
        assert log.count("Finished task") > ran_before[name], f"{name}'s executor ran no task"
        assert "spark-sql-kafka-0-10" in log, f"{name}'s executor did not fetch the Kafka connector"


def _kill_worker(worker: int, whole_session: bool) -> list[int]:
    """SIGKILL a worker: its JVM only, or its whole session (the worker JVM, its executor JVM and that
    executor's Python workers, whose daemon leaves the worker's process group but not its session), as a
    machine dying would. Either way every process of the session ends: an executor exits once its worker's
    connection drops (Spark's WorkerWatcher), and its Python daemon with it. The processes it held."""
    members = process_session(worker)
    for _ in range(3 if whole_session else 1):  # a member may fork while we kill: a few rounds
        for pid in process_session(worker) if whole_session else [worker]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    wait_until(lambda: not process_session(worker), 30, f"the processes of worker session {worker} to end")
    return members


def _staged_writers(settings, scenario: Scenario, batch_id: int) -> dict[str, int]:
    """The batch's rows in the sink's staging table, per writer tag (task attempt)."""
    stage = sql.Identifier("eosbatch", f"stage_{scenario.pipeline}")
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("SELECT _eosbatch_writer, count(*) FROM {} WHERE _eosbatch_batch = %s "
                            "GROUP BY 1").format(stage), (batch_id,))
        return dict(cur.fetchall())


@pytest.mark.parametrize("whole_session", [True, False], ids=["worker-session", "worker-jvm"])
def test_a_worker_sigkilled_mid_batch_is_rescheduled_exactly_once(settings, unique, remote, tmp_path,
                                                                  whole_session):
    """A staging task has written its rows when its worker dies (SIGKILL of the worker, its executor and the
    Python worker frozen there; or of the worker's JVM only, which takes the others down): Spark runs the lost
    work again on the other worker (and the map stage whose shuffle files died with it), and the batch commits
    only the successful attempts' rows, so the dead attempt's rows, still in staging, count for nothing."""
    cluster = remote.cluster
    scenario = Scenario(settings, unique, "totals", records=RECORDS // 2, batch=BATCH)  # one batch
    runner = Runner(["run", scenario.pipeline], scenario.env("process.mid_staging:stop"), tmp_path, "runner")
    try:
        frozen = runner.stopped_at("process.mid_staging", timeout=180)
        workers = {name: cluster.pid(name) for name in cluster.worker_names()}
        [victim] = [name for name, pid in workers.items() if pid and frozen in process_session(pid)]
        victim_pid = workers[victim]
        assert victim_pid is not None
        [(batch_id, _, state)] = scenario.batches()
        assert state == "planned", f"batch {batch_id} is {state} at the kill: not mid-batch"
        dead_attempt = _staged_writers(settings, scenario, batch_id)
        assert dead_attempt, "the frozen attempt's rows are not in staging"
        killed = _kill_worker(victim_pid, whole_session)
        assert len(killed) >= 3 and frozen in killed, f"{victim}'s session held {killed}: no executor?"
        assert not alive(victim_pid) and not alive(frozen)
        wait_until(lambda: cluster.alive_workers() == 1, 30, f"the master to count {victim} lost")
        killed_at = time.monotonic()
        code = runner.wait(timeout=240)
        assert code == 0, runner.tail()
        assert time.monotonic() - killed_at < 120, "the retry waited for a timeout"
        [(_, _, state)] = scenario.batches()
        assert state == "published", f"batch {batch_id} is {state}: the engine, not eosbatch, had to retry"
        with store.transaction(settings) as cur:
            batch = store.get_batch(cur, batch_id)
        committed = batch.writer_tags("sink")
        assert committed and not set(dead_attempt) & set(committed), (dead_attempt, committed)
        # the map tasks that ran twice counted their records twice in the observation: not in the ledger
        assert batch.records_read == len(read_topic(settings, scenario.input))
        end_exactly_once(scenario)
    finally:
        if runner.process.poll() is None:
            runner.kill()
        stack.cluster_up(log=lambda _: None)  # the lost worker comes back, as a second `stack up` brings it


def _stack_status() -> str:
    done = subprocess.run([sys.executable, "-m", "eosbatch.cli", "stack", "status"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_status_shows_the_cluster_and_up_restarts_a_lost_worker(on_cluster):
    """`eosbatch stack status` shows the master, its workers (as the master counts them) and the Connect server
    on them; a worker that died is started again by the next `up` (what it calls: stack.cluster_up)."""
    cluster = on_cluster.cluster
    before = cluster.worker_pids()
    shown = _stack_status()
    assert f"cluster:  {cluster.master_url} pid={cluster.pid('master')} ui={cluster.web_ui} workers alive=2/2" \
        in shown, shown
    assert f"worker-1: pid={before[0]}" in shown and f"connect:  {on_cluster.remote} pid=" in shown, shown
    assert before[0] is not None
    _kill_worker(before[0], whole_session=True)
    wait_until(lambda: cluster.alive_workers() == 1, 30, "the master to count worker-1 lost")
    shown = _stack_status()
    assert "workers alive=1/2" in shown and "worker-1: pid=stopped" in shown, shown
    stack.cluster_up(log=lambda _: None)
    after = cluster.worker_pids()
    assert after[0] not in (None, before[0]) and after[1] == before[1], (before, after)
    assert cluster.alive_workers() == 2
