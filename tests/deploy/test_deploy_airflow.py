"""docs/deploy-airflow.md, followed: the wheel with `[airflow]` in a venv of stock Airflow (.venv-oldest: the
oldest supported versions), no checkout on its sys.path (it runs from a temporary folder, PYTHONPATH naming
only the user's pipeline folder); a dags folder holding only the page's DAG file; the page's connection
commands and `eosbatch db upgrade`; the real scheduler (LocalExecutor), DAG processor and API server of that
venv run one micro-batch, on the Spark Connect server of the venv's PySpark; this process counts the result
itself (sink rows, the output topic read with read_committed)."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from cryptography.fernet import Fernet
from sqlalchemy.engine import make_url

from eosbatch import config
from eosbatch.ledger import revisions
from eosbatch.orchestration import local
from tests.deploy import oldest
from tests.deploy.conftest import user_pipeline
from tests.packaging import own_database
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

DOC = ROOT / "docs" / "deploy-airflow.md"
COMPONENTS = ("api-server", "scheduler", "dag-processor")
FINAL = {"success", "failed"}


def doc_block(name: str) -> str:
    """The code block the page marks `<!-- tested: name -->`."""
    found = re.findall(rf"<!-- tested: {re.escape(name)} -->\n```[a-z]*\n(.*?)```", DOC.read_text(), re.S)
    assert len(found) == 1, f"{DOC.name}: {len(found)} blocks marked {name!r}"
    return found[0]


@pytest.fixture
def metadata_db(settings, unique) -> Iterator[str]:
    """A metadata database of this test's own in the stack's PostgreSQL (its Airflow is a fresh install)."""
    with own_database(settings, f"airflow_deploy_{unique}") as url:
        yield url


class Airflow:
    """The venv's Airflow: its CLI, its components (each in a session of its own), its metadata database."""

    def __init__(self, folder: Path, env: dict[str, str], database_url: str, port: int) -> None:
        self.folder, self.env, self.port = folder, env, port
        self.dsn = database_url.replace("postgresql+psycopg2", "postgresql")
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def cli(self, *args: str) -> str:
        return oldest.run([str(oldest.VENV / "bin" / "airflow"), *args], env=self.env, cwd=self.folder,
                          timeout=300).stdout

    def start(self) -> None:
        for component in COMPONENTS:
            extra = ["--host", "127.0.0.1", "--port", str(self.port)] if component == "api-server" else []
            with (self.folder / f"{component}.log").open("ab") as out:
                self.running[component] = subprocess.Popen(
                    [str(oldest.VENV / "bin" / "airflow"), component, *extra], env=self.env, cwd=self.folder,
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        for process in self.running.values():
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(timeout=20)
                    break
                except subprocess.TimeoutExpired:
                    continue

    def logs(self) -> str:
        return "\n".join(f"--- {c}.log\n{log_tail(self.folder / f'{c}.log')}" for c in COMPONENTS)

    def query(self, statement: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        connection = psycopg2.connect(self.dsn)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute(statement, args)
                return cursor.fetchall()
        finally:
            connection.close()

    def wait(self, what: str, ready, timeout: float) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for component, process in self.running.items():
                assert process.poll() is None, f"airflow {component} exited ({process.returncode}):\n{self.logs()}"
            if ready():
                return
            time.sleep(1)
        raise AssertionError(f"{what}: not after {timeout:.0f}s\n{self.logs()}")


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def test_deployed_into_stock_airflow_the_scheduler_runs_a_batch_exactly_once(
        settings, oldest_connect, metadata_db, tmp_path, unique) -> None:
    timings: dict[str, float] = {}
    mark = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        timings[name] = round(time.monotonic() - mark, 1)
        mark = time.monotonic()

    scenario = Scenario(settings, unique, "totals", batch=100_000)
    dags, pipelines, home = tmp_path / "dags", tmp_path / "pipelines", tmp_path / "airflow"
    for folder in (dags, home):
        folder.mkdir()
    dag_file = doc_block("dag-file")
    assert dag_file == (ROOT / "dags" / "eosbatch_dags.py").read_text(), "the page's DAG file is not the repository's"
    (dags / "eosbatch_dags.py").write_text(dag_file)
    module = user_pipeline(pipelines, unique)
    port = oldest.free_port(span=3)  # the API server, the scheduler's health check, the task log server
    keys = {"jwt_secret": secrets.token_urlsafe(32), "secret_key": secrets.token_urlsafe(32),
            "fernet_key": Fernet.generate_key().decode()}
    (home / "airflow.cfg").write_text(local.airflow_cfg(home, dags, port, metadata_db, keys))
    # The components' environment: EOSBATCH_PIPELINES and the pipeline folder, nothing of the checkout, and
    # none of the stack's settings: the tasks take them from the connections.
    env = oldest.clean_env({"AIRFLOW_HOME": str(home), config.PIPELINES: module, "PYTHONPATH": str(pipelines)})
    for name in (config.DATABASE_URL, config.KAFKA_BOOTSTRAP, config.SPARK_REMOTE):
        env.pop(name, None)
    airflow = Airflow(tmp_path, env, metadata_db, port)
    probe = json.loads(oldest.run([str(oldest.python()), "-c", "import eosbatch, json, sys; "
                                   "print(json.dumps([eosbatch.__file__, sys.path]))"], env=env, cwd=tmp_path).stdout)
    checkout = [p for p in probe[1] if p and Path(p).resolve().is_relative_to(ROOT)
                and not Path(p).resolve().is_relative_to(oldest.VENV)]
    assert Path(probe[0]).is_relative_to(oldest.VENV) and not checkout, probe

    airflow.cli("db", "migrate")
    lap("airflow db migrate")
    url = make_url(settings.database_url)
    doc_env = {**env, "PG_HOST": url.host, "PG_PORT": str(url.port), "PG_DATABASE": url.database,
               "PG_USER": url.username, "PG_PASSWORD": url.password or "", "KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
               "SPARK_CONNECT_HOST": "127.0.0.1", "SPARK_CONNECT_PORT": str(oldest_connect.port),
               "LEDGER_URL": settings.database_url}
    oldest.run(["bash", "-euo", "pipefail", "-c", doc_block("connections")], env=doc_env, cwd=tmp_path)
    lap("connections (3 x airflow connections add)")
    upgraded = oldest.run(["bash", "-euo", "pipefail", "-c", doc_block("db-upgrade")], env=doc_env, cwd=tmp_path)
    assert upgraded.stdout.strip().splitlines()[-1] == f"ledger at revision {revisions.head()}"
    lap("eosbatch db upgrade")

    dag = f"eosbatch__{scenario.pipeline}"
    airflow.start()
    try:
        airflow.wait("API server, scheduler and DAG processor healthy", lambda: (
            (health := local.health(port)) is not None
            and all(health.get(part) == "healthy" for part in ("metadatabase", "scheduler", "dag_processor"))), 180)
        lap("components healthy")
        airflow.wait(f"{dag} parsed", lambda: airflow.query("SELECT 1 FROM dag WHERE dag_id = %s", (dag,)), 120)
        errors = airflow.query("SELECT filename, stacktrace FROM import_error")
        assert errors == [], errors
        lap("DAG parsed")
        airflow.cli("dags", "unpause", dag)
        airflow.cli("dags", "trigger", dag, "--run-id", "deploy-1")

        def state() -> object:
            rows = airflow.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = 'deploy-1'", (dag,))
            return rows[0][0] if rows else None

        airflow.wait("the run finished", lambda: state() in FINAL, 300)
        tasks = dict(airflow.query("SELECT task_id, state FROM task_instance WHERE dag_id = %s AND run_id = "
                                   "'deploy-1'", (dag,)))
        lap("the DAG run (trigger to end)")
    finally:
        airflow.stop()
    assert state() == "success", f"{tasks}\n{airflow.logs()}"
    # The batch in the run's first group; the second group's plan finds nothing new and ends the run.
    first = {f"batch_1.{task}": tasks.pop(f"batch_1.{task}") for task in
             ("plan", "process", "commit", "publish", "finalize", "abort", "done")}
    assert first == {"batch_1.plan": "success", "batch_1.process": "success", "batch_1.commit": "success",
                     "batch_1.publish": "success", "batch_1.finalize": "success", "batch_1.abort": "skipped",
                     "batch_1.done": "success"}
    assert tasks.pop("batch_2.plan") == "success"
    assert {task for task, state in tasks.items() if state not in ("skipped", "success")} == set(), tasks
    assert {task.split(".")[0] for task, state in tasks.items() if "." in task and state != "skipped"} == set(), tasks
    assert scenario.states() == ["published"]
    scenario.assert_exactly_once()
    print(f"deployed: one batch exactly-once through the scheduler of {oldest.VENV.name}; {timings}")
