"""Fixtures of the chaos suite: the services it crashes (restored after each test, pass or fail, so that later
tests keep a working stack), runners started in sessions of their own (killed after each test, so no frozen
runner outlives it), and the end-of-test checks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.control import Runner, Services
from tests.scenario import Scenario

# The chaos cases that also run on the spark-submit engine (ids without the engine); the Connect engine runs
# them all. One PostgreSQL crash at each step of the protocol (eosbatch/faults.py): what is left of the batch
# there is recovered through a spark-submit application like any other. Early publish has no fault points of its
# own (it runs at the commit's and publish's), and the broker, zombie and lease cases test Kafka and the ledger,
# which do not depend on the engine.
SUBMIT_CASES = frozenset({
    "test_postgres_crash_at_fault_point_then_recovery[plan.after_commit-run]",  # plan
    # process: the stop is in the spark-submit driver; Airflow's retry of the task submits again over the
    # staging the crash emptied, and the verifier's Spark recompute runs as an application too
    "test_postgres_crash_at_fault_point_then_recovery[process.after_staged-retry]",
    "test_postgres_crash_at_fault_point_then_recovery[commit.after_commit-run]",  # commit
    "test_postgres_crash_at_fault_point_then_recovery[publish.mid_produce-run]",  # publish
    "test_postgres_crash_at_fault_point_then_recovery[publish.after_kafka_commit-run]",  # finalize
})


# Sink kinds whose crash cases recover by `eosbatch run` only: Airflow's retry of a task takes the same steps
# whatever the sink (the totals and latest cases cover it); only the commit's SQL differs.
RUN_ONLY_KINDS = frozenset({"events", "deletes", "evolving"})


def chaos_case(item: pytest.Item) -> str:
    """The item's id without its engine: test_x[plan.after_commit-run] for test_x[submit-plan.after_commit-run]."""
    engine = item.callspec.params["engine"]
    return item.name.replace(f"[{engine}]", "").replace(f"[{engine}-", "[")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects the spark-submit runs of the chaos cases outside SUBMIT_CASES, and the Airflow-retry runs of the
    RUN_ONLY_KINDS cases."""
    chaos = Path(__file__).parent
    dropped = [item for item in items if item.path.is_relative_to(chaos) and hasattr(item, "callspec")
               and ((item.callspec.params.get("engine") == "submit" and chaos_case(item) not in SUBMIT_CASES)
                    or (item.callspec.params.get("kind") in RUN_ONLY_KINDS
                        and item.callspec.params.get("recovery") == "retry"))]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        left = set(items) - set(dropped)
        items[:] = [item for item in items if item in left]


@pytest.fixture(autouse=True, params=["connect", "submit"])
def engine(request, settings, monkeypatch) -> str:
    """Every chaos test runs against the long-lived Spark Connect server of the stack; the cases of SUBMIT_CASES
    also run with a spark-submit application per batch (EOSBATCH_SPARK_REMOTE unset)."""
    if request.param == "connect" and not settings.spark_remote:
        reason = "EOSBATCH_SPARK_REMOTE is not set (the stack's Spark Connect server is not running)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    if request.param == "submit":
        monkeypatch.setenv("EOSBATCH_SPARK_REMOTE", "")
    return str(request.param)


@pytest.fixture
def services(settings) -> Iterator[Services]:
    found = Services()
    if not found.embedded(settings.database_url, settings.kafka_bootstrap):
        reason = "chaos tests crash and restart the embedded stack's services; the settings name other servers"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    try:
        yield found
    finally:
        found.restore()


class Runners:
    """Starts `eosbatch` commands for a scenario; every one still alive at the end of the test is killed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[Runner] = []

    def start(self, scenario: Scenario, *args: str, fault: str | None = None, name: str = "runner",
              env: dict[str, str] | None = None) -> Runner:
        runner = Runner([*args] if args else ["run", scenario.pipeline], {**scenario.env(fault), **(env or {})},
                        self.folder, f"{name}{len(self.started)}")
        self.started.append(runner)
        return runner

    def cleanup(self) -> None:
        for runner in self.started:
            if runner.process.poll() is None:
                runner.kill()


@pytest.fixture
def runners(tmp_path) -> Iterator[Runners]:
    found = Runners(tmp_path)
    try:
        yield found
    finally:
        found.cleanup()
