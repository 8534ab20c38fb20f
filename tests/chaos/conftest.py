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


@pytest.fixture(autouse=True, params=["connect", "submit"])
def engine(request, settings, monkeypatch) -> str:
    """Every chaos test runs against both Spark engines: the long-lived Spark Connect server of the stack, and
    a spark-submit application per batch (EOSBATCH_SPARK_REMOTE unset)."""
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
