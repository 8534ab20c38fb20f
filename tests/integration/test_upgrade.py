"""Upgrading eosbatch with batches in flight: the previous release (the last commit before the durable
outbox) leaves one pipeline's batch `staged` and another's `committed`, each by a runner killed there; the
new release's `eosbatch run` settles both exactly-once. (The ledger goes down to the previous schema for
the old release and back up: this test wipes nothing, but batches of other pipelines that are in flight
meanwhile would lose their outbox; tests run one at a time.) A batch staged without per-writer counts cannot be
proven complete, so it is aborted and planned again; a committed one is published from staging, as it was
committed, and its marker (written without a batch id) is matched by offsets."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from eosbatch import faults
from eosbatch.ledger import migrate, store
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

PREVIOUS_RELEASE = "7269d97"  # main before the durable outbox
PREVIOUS_SCHEMA = "0002"       # its ledger revision


@pytest.fixture(scope="module")
def previous_release():
    with tempfile.TemporaryDirectory(prefix="eosbatch-previous-") as folder:
        archive = Path(folder) / "previous.tar"
        done = subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), PREVIOUS_RELEASE,
                               "eosbatch", "spark_apps"], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"the previous release is not in this clone's history: {done.stderr}"
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
        yield Path(folder)


def _states_on_the_old_schema(settings, pipeline: str) -> list[str]:
    connection = store.connect(settings, check_schema=False)  # this eosbatch refuses the old ledger otherwise
    try:
        with connection, connection.cursor() as cur:
            cur.execute("SELECT state FROM eosbatch.batches WHERE pipeline = %s ORDER BY id", (pipeline,))
            return [row[0] for row in cur.fetchall()]
    finally:
        connection.close()


def _run_previous(scenario: Scenario, code: Path, fault: str) -> subprocess.CompletedProcess[str]:
    env = {**scenario.env(fault), "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, "-m", "eosbatch.cli", "run", scenario.pipeline, "--max-batches", "1"],
                          env=env, capture_output=True, text=True, timeout=900, cwd=code)


def test_batches_left_in_flight_by_the_previous_release_end_exactly_once(settings, unique, previous_release):
    """As an operator upgrades: the old release runs on its ledger schema (0002) and dies with a batch in
    flight; the new release is installed, `eosbatch db upgrade` runs, and the new runner settles it."""
    staged = Scenario(settings, f"{unique}s", "latest", records=1200, batch=800)
    committed = Scenario(settings, f"{unique}c", "totals", records=1200, batch=800)
    scenarios = [(staged, "process.after_staged", "staged"), (committed, "commit.after_commit", "committed")]
    migrate.downgrade(settings.database_url, PREVIOUS_SCHEMA)
    try:
        for scenario, fault, left in scenarios:
            crashed = _run_previous(scenario, previous_release, fault)
            assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-2000:]
            assert _states_on_the_old_schema(settings, scenario.pipeline) == [left]
    finally:
        migrate.upgrade(settings.database_url, "head")
    for scenario, _, _ in scenarios:
        recovered = scenario.run()
        assert recovered.returncode == 0, recovered.stderr[-3000:]
        scenario.assert_exactly_once()
        verified = scenario.cli("verify", scenario.pipeline, "--no-recompute")
        assert verified.returncode == 0, verified.stdout
