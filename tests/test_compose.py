"""Structural checks of docker-compose.yml (no Docker here: read as YAML, its wiring checked)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

pytestmark = pytest.mark.unit

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
AIRFLOW = ["airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
SERVICES = ["kafka", "postgres", "spark-master", "spark-worker", *AIRFLOW]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict), "docker-compose.yml must be a YAML mapping"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict of strings, whichever of the two compose syntaxes it uses."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {key: "" if value is None else str(value) for key, value in raw.items()}


def command(service: dict[str, Any]) -> list[str]:
    raw = service.get("command") or []
    return raw.split() if isinstance(raw, str) else [str(part) for part in raw]


def healthcheck_test(service: dict[str, Any]) -> str:
    test = (service.get("healthcheck") or {}).get("test")
    return " ".join(test) if isinstance(test, list) else str(test or "")


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("depends_on") or {}
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in raw.items()}


def published_host_ports(service: dict[str, Any]) -> list[int]:
    ports = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            if entry.get("published") is not None:
                ports.append(int(entry["published"]))
            continue
        spec = str(entry).split("/")[0]
        parts = spec.rsplit(":", 2)
        if len(parts) >= 2:  # "container" alone publishes a random host port
            ports.append(int(parts[-2]))
    return ports


def volume_sources(service: dict[str, Any]) -> list[str]:
    sources = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            if entry.get("type", "volume") == "volume" and entry.get("source"):
                sources.append(entry["source"])
        elif ":" in str(entry):
            sources.append(str(entry).split(":", 1)[0])
    return sources


def named_volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Named volume -> container path (bind mounts, whose source is a path, are left out)."""
    mounts = {}
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            if entry.get("type", "volume") == "volume" and entry.get("source"):
                mounts[entry["source"]] = entry["target"]
            continue
        source, _, rest = str(entry).partition(":")
        if rest and not source.startswith((".", "/", "~", "$")):
            mounts[source] = rest.split(":")[0]
    return mounts


def project_services(services: dict[str, Any]) -> list[str]:
    """Services built from the project image: they run eosbatch code (tasks, DAG parsing, Spark executors)."""
    return [name for name, svc in services.items() if "build" in svc]


# --- the file and its services


def test_every_service_of_the_stack_is_defined(services: dict[str, Any]) -> None:
    missing = [name for name in SERVICES if name not in services]
    assert not missing, f"missing services: {missing}"


def test_project_image_is_built_from_python_311_with_java_17_and_the_airflow_extra(
    services: dict[str, Any],
) -> None:
    for name in ["spark-master", "spark-worker", *AIRFLOW]:
        build = services[name].get("build")
        assert isinstance(build, dict), f"{name}: expected a build section"
        dockerfile = build.get("dockerfile_inline", "")
        assert re.search(r"^FROM python:3\.11", dockerfile, re.M), f"{name}: base image must be python:3.11"
        assert "openjdk-17-jre-headless" in dockerfile, f"{name}: Spark needs Java 17"
        assert "COPY . /src" in dockerfile, f"{name}: the project source must be copied to /src"
        assert re.search(r"pip install .*/src\[airflow\]", dockerfile), f"{name}: install /src[airflow]"
        assert build.get("context") == ".", f"{name}: the build context must be the repository"


# --- Kafka


def test_kafka_uses_the_official_apache_image(services: dict[str, Any]) -> None:
    assert str(services["kafka"].get("image", "")).startswith("apache/kafka:")


def test_kafka_is_a_single_kraft_node_acting_as_broker_and_controller(services: dict[str, Any]) -> None:
    kafka = env(services["kafka"])
    roles = {role.strip() for role in kafka.get("KAFKA_PROCESS_ROLES", "").split(",")}
    assert {"broker", "controller"} <= roles
    assert "KAFKA_ZOOKEEPER_CONNECT" not in kafka, "KRaft mode: no ZooKeeper"
    node_id = kafka.get("KAFKA_NODE_ID")
    assert node_id, "KAFKA_NODE_ID must be set"
    voters = kafka.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")
    assert [voter.split("@")[0] for voter in voters.split(",")] == [node_id], (
        "the node must be the only voter"
    )
    controller = kafka.get("KAFKA_CONTROLLER_LISTENER_NAMES", "")
    listener_names = [item.split("://")[0] for item in kafka.get("KAFKA_LISTENERS", "").split(",")]
    assert controller and controller in listener_names, (
        "the controller listener must be among KAFKA_LISTENERS"
    )
    voter_port = voters.rsplit(":", 1)[-1]
    controller_listener = next(
        i for i in kafka["KAFKA_LISTENERS"].split(",") if i.startswith(controller + "://")
    )
    assert controller_listener.rsplit(":", 1)[-1] == voter_port, (
        "the quorum voter must use the controller port"
    )


def test_kafka_internal_state_topics_fit_one_broker(services: dict[str, Any]) -> None:
    kafka = env(services["kafka"])
    for key in [
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
    ]:
        assert kafka.get(key) == "1", f"{key} must be 1 on a single broker, got {kafka.get(key)!r}"


def test_kafka_advertises_an_internal_and_a_host_listener(services: dict[str, Any]) -> None:
    service = services["kafka"]
    kafka = env(service)
    protocol_map = dict(item.split(":") for item in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    listeners = {item.split("://")[0]: item.rsplit(":", 1)[1] for item in kafka["KAFKA_LISTENERS"].split(",")}
    advertised = dict(item.split("://") for item in kafka["KAFKA_ADVERTISED_LISTENERS"].split(","))
    for name in [*listeners, *advertised]:
        assert name in protocol_map, f"listener {name} has no security protocol"
    assert set(advertised) <= set(listeners), "every advertised listener must be a listener"
    assert advertised.get(kafka["KAFKA_INTER_BROKER_LISTENER_NAME"]) == "kafka:9092"
    host_side = [name for name, address in advertised.items() if address.startswith("localhost:")]
    assert len(host_side) == 1, "one listener must be advertised to the host as localhost"
    host_port = int(advertised[host_side[0]].rsplit(":", 1)[1])
    assert host_port == 29092
    assert host_port in published_host_ports(service), "the host listener's port must be published"
    assert listeners[host_side[0]] == str(host_port), "the host listener must listen on the published port"


def test_kafka_keeps_its_log_dirs_on_a_named_volume_and_has_a_healthcheck(services: dict[str, Any]) -> None:
    service = services["kafka"]
    log_dirs = env(service).get("KAFKA_LOG_DIRS")
    assert log_dirs, "KAFKA_LOG_DIRS must be set (the image default is under /tmp)"
    assert log_dirs in named_volume_mounts(service).values()
    assert "9092" in healthcheck_test(service)


# --- PostgreSQL


def test_postgres_is_15_with_a_data_volume_and_a_pg_isready_healthcheck(services: dict[str, Any]) -> None:
    service = services["postgres"]
    assert service.get("image") == "postgres:15"
    assert "/var/lib/postgresql/data" in named_volume_mounts(service).values()
    assert "pg_isready" in healthcheck_test(service)


def test_postgres_init_creates_the_eosbatch_and_airflow_databases(compose: dict[str, Any]) -> None:
    service = compose["services"]["postgres"]
    mounted = [
        entry
        for entry in service.get("configs") or []
        if isinstance(entry, dict) and str(entry.get("target", "")).startswith("/docker-entrypoint-initdb.d/")
    ]
    assert mounted, "an init script must be mounted under /docker-entrypoint-initdb.d/"
    assert mounted[0]["target"].endswith(".sql")
    sql = compose["configs"][mounted[0]["source"]]["content"]
    created = set(re.findall(r"CREATE DATABASE (\w+)", sql, re.I))
    assert {"eosbatch", "airflow"} <= created


def test_database_urls_use_roles_and_databases_the_init_script_creates(compose: dict[str, Any]) -> None:
    sql = compose["configs"]["postgres-init"]["content"]
    roles = dict(re.findall(r"CREATE ROLE (\w+) LOGIN PASSWORD '([^']*)'", sql, re.I))
    databases = set(re.findall(r"CREATE DATABASE (\w+)", sql, re.I))
    urls = []
    for name, service in compose["services"].items():
        variables = env(service)
        for key in ["EOSBATCH_DATABASE_URL", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]:
            if key in variables:
                urls.append((name, key, urlsplit(variables[key])))
    assert urls
    for name, key, url in urls:
        assert url.hostname == "postgres" and url.port == 5432, f"{name} {key}: must point at postgres:5432"
        assert roles.get(url.username) == url.password, f"{name} {key}: role/password not created by init"
        assert url.path.lstrip("/") in databases, f"{name} {key}: database not created by init"


# --- Airflow


def test_airflow_uses_local_executor_and_its_own_postgres_metadata_db(services: dict[str, Any]) -> None:
    for name in AIRFLOW:
        variables = env(services[name])
        assert variables.get("AIRFLOW__CORE__EXECUTOR") == "LocalExecutor", name
        meta = urlsplit(variables.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", ""))
        assert meta.scheme.startswith("postgresql"), f"{name}: the metadata DB must be PostgreSQL"
        ledger = urlsplit(variables["EOSBATCH_DATABASE_URL"])
        assert meta.path != ledger.path, f"{name}: Airflow's metadata must not live in the eosbatch database"
        assert variables.get("AIRFLOW__CORE__DAGS_FOLDER") == "/src/dags", name
        assert variables.get("AIRFLOW__CORE__LOAD_EXAMPLES", "").lower() == "false", name


def test_airflow_components_share_jwt_secret_and_reach_the_api_server(services: dict[str, Any]) -> None:
    secrets = {env(services[name]).get("AIRFLOW__API_AUTH__JWT_SECRET") for name in AIRFLOW}
    assert len(secrets) == 1 and None not in secrets, "scheduler and API server must share one JWT secret"
    for name in AIRFLOW:
        url = urlsplit(env(services[name]).get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", ""))
        assert url.hostname == "airflow-apiserver", (
            f"{name}: the execution API is the airflow-apiserver service"
        )


def test_airflow_commands(services: dict[str, Any]) -> None:
    assert command(services["airflow-init"])[-2:] == ["db", "migrate"]
    assert command(services["airflow-apiserver"])[:2] == ["airflow", "api-server"]
    assert command(services["airflow-scheduler"])[:2] == ["airflow", "scheduler"]
    assert command(services["airflow-dag-processor"])[:2] == ["airflow", "dag-processor"]
    assert command(services["airflow-triggerer"])[:2] == ["airflow", "triggerer"]  # event-driven runs' triggers
    assert str(services["airflow-init"].get("restart", "no")) == "no", "the one-shot init must not restart"


def test_airflow_waits_for_healthy_kafka_and_postgres_and_a_migrated_db(services: dict[str, Any]) -> None:
    for name in ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor"]:
        deps = depends_on(services[name])
        assert deps.get("kafka") == "service_healthy", name
        assert deps.get("postgres") == "service_healthy", name
        assert deps.get("airflow-init") == "service_completed_successfully", name
    assert depends_on(services["airflow-init"]).get("postgres") == "service_healthy"


def test_healthy_conditions_only_name_services_with_a_healthcheck(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for dependency, condition in depends_on(service).items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            if condition == "service_healthy":
                assert healthcheck_test(services[dependency]), f"{name} waits for {dependency}'s healthcheck"


# --- eosbatch settings and Spark


def test_every_service_running_eosbatch_code_gets_its_settings(services: dict[str, Any]) -> None:
    runners = project_services(services)
    assert set(runners) >= {"spark-master", "spark-worker", *AIRFLOW}
    for name in runners:
        variables = env(services[name])
        ledger = urlsplit(variables.get("EOSBATCH_DATABASE_URL", ""))
        assert ledger.scheme.startswith("postgresql") and ledger.path == "/eosbatch", name
        assert variables.get("EOSBATCH_KAFKA_BOOTSTRAP") == "kafka:9092", name
        assert variables.get("EOSBATCH_SPARK_MASTER") == "spark://spark-master:7077", name


def test_spark_master_and_worker(services: dict[str, Any]) -> None:
    master = command(services["spark-master"])
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    worker = command(services["spark-worker"])
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    master_url = env(services["spark-worker"])["EOSBATCH_SPARK_MASTER"]
    assert worker[-1] == master_url, "the worker must register with the master eosbatch submits to"
    port = int(master[master.index("--port") + 1]) if "--port" in master else 7077
    assert master_url == f"spark://spark-master:{port}"
    assert "spark-master" in depends_on(services["spark-worker"])


# --- volumes and ports


def test_named_volumes_are_declared_at_top_level(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    used = {source for service in compose["services"].values() for source in named_volume_mounts(service)}
    assert used, "kafka and postgres need named volumes"
    assert used <= declared, f"undeclared named volumes: {sorted(used - declared)}"
    for name in ["kafka", "postgres"]:
        assert volume_sources(compose["services"][name]), f"{name} needs a volume"


def test_published_host_ports_do_not_collide(services: dict[str, Any]) -> None:
    published = [port for service in services.values() for port in published_host_ports(service)]
    duplicates = [port for port, count in Counter(published).items() if count > 1]
    assert not duplicates, f"host ports published twice: {duplicates}"
    assert {29092, 25432, 8080} <= set(published)
    assert published_host_ports(services["postgres"]) == [25432]
    assert published_host_ports(services["airflow-apiserver"]) == [8080]


def test_airflow_connections_are_the_ones_the_dags_resolve(services: dict[str, Any]) -> None:
    """The DAG tasks read `eosbatch_postgres` and `eosbatch_kafka`; compose defines them as AIRFLOW_CONN_*,
    and they convert to the same settings as the services' EOSBATCH_* variables."""
    import json
    from types import SimpleNamespace

    from eosbatch.orchestration import connections

    for name in AIRFLOW:
        variables = env(services[name])
        pg = urlsplit(variables[f"AIRFLOW_CONN_{connections.POSTGRES_CONN_ID.upper()}"])
        as_conn = SimpleNamespace(conn_type=pg.scheme, host=pg.hostname, port=pg.port, login=pg.username,
                                  password=pg.password, schema=pg.path.lstrip("/"), extra=None)
        assert connections.postgres_env(as_conn).env == {"EOSBATCH_DATABASE_URL": variables["EOSBATCH_DATABASE_URL"]}
        kafka = json.loads(variables[f"AIRFLOW_CONN_{connections.KAFKA_CONN_ID.upper()}"])
        assert kafka["conn_type"] == "kafka"
        as_conn = SimpleNamespace(conn_type="kafka", host=None, port=None, login=None, password=None, schema=None,
                                  extra=json.dumps(kafka["extra"]))
        assert connections.kafka_env(as_conn).env["EOSBATCH_KAFKA_BOOTSTRAP"] == variables["EOSBATCH_KAFKA_BOOTSTRAP"]


def test_spark_connect_server_is_the_airflow_tasks_engine(services: dict[str, Any]) -> None:
    """The long-lived engine runs on the Spark master, on no host port, and Airflow's tasks reach it."""
    server = " ".join(command(services["spark-connect"]))
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in server
    assert "--master spark://spark-master:7077" in server and "binding.port=15002" in server
    assert not services["spark-connect"].get("ports"), "a Connect server runs any client's code: not on the host"
    assert "spark-master" in depends_on(services["spark-connect"])
    for name in AIRFLOW:
        assert env(services[name]).get("EOSBATCH_SPARK_REMOTE") == "sc://spark-connect:15002", name
