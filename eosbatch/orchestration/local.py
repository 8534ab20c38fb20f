"""A real local Airflow on the embedded stack: API server, scheduler, DAG processor and triggerer (LocalExecutor),
the metadata database `airflow` in the stack's PostgreSQL, DAGs from the repository's `dags/`.

State lives in `<stack home>/airflow` (AIRFLOW_HOME): airflow.cfg, generated secrets, task logs, and each
component's pid file and log under `processes/`. Ports: the API server on EOSBATCH_AIRFLOW_PORT (18080),
the scheduler's health check on the next port, the task log server on the one after, the triggerer's log
server on the one after that. The triggerer runs the watchers of event-driven pipelines (AirflowOptions(
trigger="data"), eosbatch/orchestration/triggers.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from eosbatch import config, stack
from eosbatch.orchestration import connections
from eosbatch.orchestration.exceptions import AirflowNotReady, AirflowSetupError
from eosbatch.stack import processes

PORT = "EOSBATCH_AIRFLOW_PORT"
DEFAULT_PORT = 18080
DATABASE = "airflow"
DEFAULT_PIPELINES = "examples.orders.pipeline"
REPO = Path(__file__).resolve().parents[2]
# Started in this order: tasks report to the API server (execution API), so it comes first.
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
Log = Callable[[str], None]


def home() -> Path:
    return stack.home() / "airflow"


def api_port(env: Mapping[str, str] | None = None) -> int:
    raw = (os.environ if env is None else env).get(PORT, str(DEFAULT_PORT))
    if not raw.isdigit() or not 1024 <= int(raw) <= 65532:  # it and the next three (see above)
        raise config.ConfigError(PORT, f"must be a port number between 1024 and 65532, got {raw!r}")
    return int(raw)


def _pg_port() -> int:
    return stack._port("EOSBATCH_POSTGRES_PORT", 15432)


def metadata_url() -> str:
    from eosbatch.stack.postgres import USER

    return f"postgresql+psycopg2://{USER}@127.0.0.1:{_pg_port()}/{DATABASE}"


def airflow_cfg(airflow_home: Path, dags_folder: Path, port: int, database_url: str,
                keys: Mapping[str, str]) -> str:
    """airflow.cfg for the local Airflow (pure). Everything binds to 127.0.0.1."""
    base = f"http://127.0.0.1:{port}"
    return f"""\
# Written by `eosbatch airflow up` (rewritten on each up); AIRFLOW__* environment variables override it.
[core]
dags_folder = {dags_folder}
executor = LocalExecutor
load_examples = False
parallelism = 8
dags_are_paused_at_creation = True
execution_api_server_url = {base}/execution/
simple_auth_manager_all_admins = True
fernet_key = {keys["fernet_key"]}

[database]
sql_alchemy_conn = {database_url}

[api]
host = 127.0.0.1
port = {port}
base_url = {base}
secret_key = {keys["secret_key"]}
workers = 1

[api_auth]
jwt_secret = {keys["jwt_secret"]}

[scheduler]
enable_health_check = True
scheduler_health_check_server_host = 127.0.0.1
scheduler_health_check_server_port = {port + 1}
# A task whose process died is failed, then retried, after this long.
task_instance_heartbeat_timeout = 60
# After a scheduler crash, the restarted scheduler resets the dead one's tasks (then runs them again) at
# its next orphan check: every 30 s instead of 300 s.
orphaned_tasks_check_interval = 30
# An idle scheduler loop sleeps this long (Airflow's default: 1 s). A task's end is seen, and the next task
# queued, at the next loop: each step of a micro-batch waited up to this long for it (bench/airflow.py).
scheduler_idle_sleep_time = 0.2

[logging]
base_log_folder = {airflow_home / "logs"}
worker_log_server_port = {port + 2}
trigger_log_server_port = {port + 3}

[dag_processor]
refresh_interval = 30

[openlineage]
# In effect once a transport is configured (AIRFLOW__OPENLINEAGE__TRANSPORT); without one OpenLineage is off.
custom_run_facets = eosbatch.orchestration.lineage.batch_facets
"""


def _keys(folder: Path) -> dict[str, str]:
    """The secrets the components share (JWT signing, API session, Fernet), generated once, mode 600."""
    path = folder / "secrets.json"
    try:
        keys = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        keys = {}
    if not {"jwt_secret", "secret_key", "fernet_key"} <= set(keys):
        from cryptography.fernet import Fernet

        keys = {"jwt_secret": secrets.token_urlsafe(32), "secret_key": secrets.token_urlsafe(32),
                "fernet_key": Fernet.generate_key().decode()}
        path.touch(mode=0o600, exist_ok=True)
        path.write_text(json.dumps(keys))
    return keys


def write_config() -> Path:
    """Write AIRFLOW_HOME/airflow.cfg; the same file serves the components and the `airflow` CLI."""
    folder = home()
    (folder / "processes").mkdir(parents=True, exist_ok=True)
    cfg = folder / "airflow.cfg"
    text = airflow_cfg(folder, REPO / "dags", api_port(), metadata_url(), _keys(folder))
    cfg.touch(mode=0o600, exist_ok=True)  # it holds the generated secrets
    if cfg.read_text() != text:
        cfg.write_text(text)
    return cfg


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the Airflow components, and so of their task processes and spark-submit."""
    env = dict(os.environ if base is None else base)
    bin_dir = str(Path(sys.executable).parent)  # `airflow` starts its parts by bare name: the venv's bin/
    rest = [p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *rest])
    env["AIRFLOW_HOME"] = str(home())
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO)]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *paths])  # pipeline modules such as examples.orders
    env.setdefault(config.PIPELINES, DEFAULT_PIPELINES)
    return env


def _fingerprint(env: Mapping[str, str]) -> str:
    """What the running components were started with (hashed: the values may hold secrets)."""
    relevant = {k: v for k, v in env.items() if k.startswith(("EOSBATCH_", "AIRFLOW__")) or k == "PYTHONPATH"}
    text = json.dumps(relevant, sort_keys=True) + (home() / "airflow.cfg").read_text()
    return hashlib.sha256(text.encode()).hexdigest()


def _command(component: str) -> list[str]:
    if component == "api-server":
        return [component, "--host", "127.0.0.1", "--port", str(api_port())]
    return [component]


def pid_file(component: str) -> Path:
    return home() / "processes" / f"{component}.pid"


def log_file(component: str) -> Path:
    return home() / "processes" / f"{component}.log"


def pids() -> dict[str, int | None]:
    return {name: processes.read_pid(pid_file(name)) for name in COMPONENTS}


def _airflow(env: Mapping[str, str]) -> str:
    return str(Path(env["PATH"].split(os.pathsep)[0]) / "airflow")


def run_airflow(args: list[str], env: Mapping[str, str] | None = None, log_name: str = "cli",
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`airflow <args>` with the local Airflow's environment; output appended to processes/<log_name>.log."""
    env = environment() if env is None else dict(env)
    done = subprocess.run([_airflow(env), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=REPO)
    with log_file(log_name).open("a") as out:
        out.write(f"$ airflow {shlex.join(args)}  (exit {done.returncode})\n{done.stdout}{done.stderr}\n")
    return done


def ensure_database() -> None:
    """The metadata database `airflow` in the stack's cluster (its owner role connects with trust auth)."""
    import psycopg2

    from eosbatch.stack.postgres import USER

    connection = psycopg2.connect(host="127.0.0.1", port=_pg_port(), user=USER, dbname="postgres",
                                  connect_timeout=10)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{DATABASE}"')  # a constant, not input
    finally:
        connection.close()


def connections_file(settings: config.Settings) -> dict[str, dict[str, object]]:
    """The two connections, in the shape `airflow connections import` reads."""
    return {connections.POSTGRES_CONN_ID: connections.postgres_connection(settings.database_url),
            connections.KAFKA_CONN_ID: connections.kafka_connection(settings.kafka_bootstrap,
                                                                    settings.kafka_config)}


def _check(done: subprocess.CompletedProcess[str], step: str) -> None:
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise AirflowSetupError(f"airflow: {step} failed (exit {done.returncode}); see "
                                f"{log_file('cli')}:\n{tail}")


def migrate_and_connect(env: Mapping[str, str], settings: config.Settings, log: Log) -> None:
    started = time.monotonic()
    _check(run_airflow(["db", "migrate"], env), "db migrate")
    log(f"airflow: metadata database migrated ({time.monotonic() - started:.1f}s)")
    path = home() / "connections.json"
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(json.dumps(connections_file(settings)))
    try:
        _check(run_airflow(["connections", "import", "--overwrite", str(path)], env), "connections import")
    finally:
        path.unlink(missing_ok=True)  # it holds the database password, if there is one
    log(f"airflow: connections {connections.POSTGRES_CONN_ID} and {connections.KAFKA_CONN_ID} written")


def health(port: int | None = None, timeout: float = 3.0) -> dict[str, str] | None:
    """Component -> status from the API server's health endpoint; None when it does not answer."""
    url = f"http://127.0.0.1:{port or api_port()}/api/v2/monitor/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback, fixed URL
            body = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return {name: (part or {}).get("status") or "none" for name, part in body.items()}


def wait_healthy(timeout: float = 180.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    last: dict[str, str] | None = None
    while time.monotonic() < deadline:
        for name, pid in pids().items():
            if pid is None:
                raise AirflowSetupError(f"airflow: the {name} exited during start; see {log_file(name)}:\n"
                                        f"{processes.tail(log_file(name))}")
        last = health()
        wanted = ("metadatabase", "scheduler", "dag_processor", "triggerer")
        if last and all(last.get(part) == "healthy" for part in wanted):
            return last
        time.sleep(1)
    seen = last or "the API server does not answer"
    raise AirflowNotReady(f"airflow: not healthy after {timeout:.0f}s ({seen}); see {home() / 'processes'}")


def wait_parsed(dag_ids: list[str], timeout: float = 120.0) -> None:
    """Until the DAG processor has recorded every one of `dag_ids` in the metadata database: before that,
    `airflow dags unpause` or `trigger` says the DAG is not found. A module that fails to import in the DAG
    processor never gets there: the error names its log."""
    import psycopg2

    deadline = time.monotonic() + timeout
    found: set[str] = set()
    while time.monotonic() < deadline:
        connection = psycopg2.connect(config.to_libpq_url(metadata_url()), connect_timeout=10)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute("SELECT dag_id FROM dag WHERE dag_id = ANY(%s)", (dag_ids,))
                found = {row[0] for row in cursor.fetchall()}
        finally:
            connection.close()
        if found >= set(dag_ids):
            return
        time.sleep(1)
    raise AirflowNotReady(f"airflow: the DAG processor has not parsed {sorted(set(dag_ids) - found)} after "
                          f"{timeout:.0f}s; see {log_file('dag-processor')} and the import errors in the UI")


class AirflowInfo(NamedTuple):
    home: Path
    url: str
    pids: dict[str, int | None]
    health: dict[str, str] | None
    env: dict[str, str]  # what a shell needs for the `airflow` CLI and `airflow dags test`

    def exports(self) -> dict[str, str]:
        return self.env


def status(base: Mapping[str, str] | None = None) -> AirflowInfo:
    env = environment(base)
    exports = {"AIRFLOW_HOME": env["AIRFLOW_HOME"], config.PIPELINES: env[config.PIPELINES],
               "PYTHONPATH": env["PYTHONPATH"]}
    running = pids()
    return AirflowInfo(home(), f"http://127.0.0.1:{api_port()}", running,
                       health() if running["api-server"] else None, exports)


def _stop(component: str, timeout: float = 30.0) -> bool:
    """SIGTERM to the component's process group (its workers and task processes), SIGKILL after `timeout`."""
    path = pid_file(component)
    pid = processes.read_pid(path)
    if pid is None:
        path.unlink(missing_ok=True)
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)  # spawned with a session of its own: its pgid is its pid
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout
        while processes.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever of the group outlived its leader
    except ProcessLookupError:
        pass
    path.unlink(missing_ok=True)
    return True


def down(log: Log = print) -> None:
    for component in reversed(COMPONENTS):
        log(f"airflow {component}: stopped" if _stop(component) else f"airflow {component}: was not running")


def up(log: Log = print, wait: bool = True, base: Mapping[str, str] | None = None) -> AirflowInfo:
    """Start what is stopped (the stack first); idempotent. Components started with another environment
    (other pipelines, ports, settings) are restarted with this one. `base`: the environment to start them
    with (this process's by default)."""
    started = time.monotonic()
    base = dict(os.environ if base is None else base)
    info = stack.up(log)
    settings = config.load({**info.env(), **base})
    ensure_database()
    write_config()
    env = environment(base)
    env.setdefault(config.DATABASE_URL, settings.database_url)  # the fallback when a connection is absent
    env.setdefault(config.KAFKA_BOOTSTRAP, settings.kafka_bootstrap)
    fingerprint = _fingerprint(env)
    stamp = home() / "processes" / "fingerprint"
    running = {name for name, pid in pids().items() if pid is not None}
    if running and (not stamp.exists() or stamp.read_text() != fingerprint):
        log("airflow: running with another environment or configuration; restarting")
        down(log)
        running = set()
    if running != set(COMPONENTS):
        migrate_and_connect(env, settings, log)
        stamp.write_text(fingerprint)
        for component in COMPONENTS:
            if component not in running:
                command = [_airflow(env), *_command(component)]
                processes.spawn(command, log_file(component), pid_file(component), env)
                log(f"airflow {component}: started (log {log_file(component)})")
    if wait:
        wait_healthy()
        log(f"airflow: healthy at http://127.0.0.1:{api_port()} ({time.monotonic() - started:.1f}s)")
    return status(base)
