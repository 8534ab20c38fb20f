"""Airflow tests. This process's Airflow (DagBag, dag.test()) reads the local Airflow's airflow.cfg, so
AIRFLOW_HOME is set here, before any test module imports airflow."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest

from eosbatch.orchestration import local
from tests.conftest import _unavailable
from tests.orchestration.helpers import LocalAirflow

os.environ["AIRFLOW_HOME"] = str(local.home())
local.write_config()

# One real Airflow serves the scheduler tests; each gets its own pipelines (tests/pipelines/scheduled.py).
# role -> (starting offsets, max records per batch); the backfills of history and ui map several batches; the
# catch-up test's pipeline runs up to CATCHUP_CAP small batches per run.
ROLES = {"e2e": ("earliest", 100_000), "kill": ("earliest", 100_000), "history": ("latest", 1000),
         "pair": ("earliest", 100_000), "secured": ("earliest", 100_000), "ui": ("latest", 1000),
         "catchup": ("earliest", 300), "compact": ("earliest", 100_000), "data": ("earliest", 100_000)}
CATCHUP_CAP = 4

DOWNSTREAM_DAG = """
from datetime import UTC, datetime

from airflow.sdk import DAG, get_current_context, task

from eosbatch import registry
from eosbatch.orchestration.assets import sink_asset

with DAG(dag_id="downstream_{suffix}", schedule=[sink_asset(registry.get("crash_totals_{suffix}"))],
         start_date=datetime(2024, 1, 1, tzinfo=UTC), catchup=False) as dag:

    @task
    def consume() -> list[int]:
        events = get_current_context()["triggering_asset_events"]
        # the accessor lists an event under each of its asset's keys (name, uri): one per batch
        return sorted({event.extra["batch"] for found in events.values() for event in found})

    consume()
"""


@pytest.fixture(scope="session")
def airflow_db(settings) -> str:
    """The local Airflow's metadata database, migrated, with the two connections (what dag.test() needs)."""
    try:
        local.ensure_database()
        local.migrate_and_connect(local.environment(), settings, log=lambda _: None)
    except Exception as exc:  # noqa: BLE001 - reported like any unavailable service
        _unavailable(f"airflow metadata database: {type(exc).__name__}: {exc}")
    return local.metadata_url()


@pytest.fixture(scope="session")
def scheduler(settings, tmp_path_factory) -> Iterator[LocalAirflow]:
    """`eosbatch airflow up` with the test pipelines; `eosbatch airflow down` at the end of the session."""
    suffixes = {role: uuid.uuid4().hex[:8] for role in ROLES}
    # The kill test's process step sleeps 15 s per Spark task: long enough to kill the scheduler during it;
    # the pair's totals pipeline 8 s: long enough for the other pipeline's process to run beside it.
    slow = {"kill": "15", "pair": "8"}
    cap = {"catchup": str(CATCHUP_CAP)}
    shape = {"compact": "compact", "data": "compact"}  # AirflowOptions(shape="compact")
    trigger = {"data": "data"}  # AirflowOptions(trigger="data"): a run when data arrives
    specs = ",".join(f"{suffixes[role]}:{start}:{batch}:{slow.get(role, '')}:{cap.get(role, '')}:{shape.get(role, '')}"
                     f":{trigger.get(role, '')}" for role, (start, batch) in ROLES.items())
    # A user's downstream DAG, in a DAG bundle of its own, scheduled on the e2e pipeline's sink asset.
    users = tmp_path_factory.mktemp("users_dags")
    (users / "downstream.py").write_text(DOWNSTREAM_DAG.replace("{suffix}", suffixes["e2e"]))
    from airflow.configuration import conf

    bundles = [*json.loads(conf.get("dag_processor", "dag_bundle_config_list")),
               {"name": "users", "kwargs": {"path": str(users), "refresh_interval": 5},
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle"}]
    base = {**os.environ, "EOSBATCH_PIPELINES": "tests.pipelines.scheduled", "EOSBATCH_TEST_SUFFIXES": specs,
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            # OpenLineage's events, as the file transport writes them (one JSON event per line)
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "append": True,
                                                           "log_file_path": str(users / "openlineage.jsonl")}),
            "EOSBATCH_SPARK_MASTER": "local[2,3]",
            # a task whose process died with the scheduler is failed (then retried) after 20 s, not 60 s
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20"}
    try:
        local.up(log=print, base=base)
    except Exception as exc:  # noqa: BLE001
        local.down(log=print)
        _unavailable(f"local airflow: {type(exc).__name__}: {exc}")
    airflow = LocalAirflow(settings, suffixes, base, lineage=users / "openlineage.jsonl")
    try:
        yield airflow
    finally:
        local.down(log=print)
