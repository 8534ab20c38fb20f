"""Upgrading eosbatch with batches in flight: a previous release leaves one pipeline's batch `staged` and
another's `committed`, each by a runner killed there; the new release's `eosbatch run` settles both
exactly-once. (The ledger goes down to the previous schema for the old release and back up: this test wipes
nothing, but batches of other pipelines that are in flight meanwhile would lose their outbox; tests run one
at a time.) Three previous releases:
- the last before the durable outbox: a batch staged without per-writer counts cannot be proven complete,
  so it is aborted and planned again; a committed one is published from staging, as it was committed, and
  its marker (written without a batch id) is matched by offsets;
- the last before the typed outbox: its committed batch's records wait as JSON in eosbatch.outbox and are
  published from there; its staged batch is committed into the typed outbox;
- the last before redrive batches (ledger revision 0011): its staged dead letters have no timestamp columns
  (they stay null), and its batches settle as before."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from eosbatch import faults
from eosbatch.engine.submit import CONNECT_MODE
from eosbatch.ledger import migrate, store
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

PREVIOUS_RELEASES = {  # main before a change of what a batch in flight leaves -> its ledger revision
    "7269d97": "0002",  # before the durable outbox
    "a6c4c5d": "0007",  # before the typed outbox
    "f61e3de": "0010",  # before redrive batches (0011: the redriven mark, the dead letters' timestamps)
}


@pytest.fixture(scope="module", params=sorted(PREVIOUS_RELEASES))
def previous_release(request):
    with tempfile.TemporaryDirectory(prefix="eosbatch-previous-") as folder:
        archive = Path(folder) / "previous.tar"
        done = subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), request.param,
                               "eosbatch", "spark_apps"], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"the previous release is not in this clone's history: {done.stderr}"
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
        yield request.param, Path(folder)


def _states_on_the_old_schema(settings, pipeline: str) -> list[str]:
    connection = store.connect(settings, check_schema=False)  # this eosbatch refuses the old ledger otherwise
    try:
        with connection, connection.cursor() as cur:
            cur.execute("SELECT state FROM eosbatch.batches WHERE pipeline = %s ORDER BY id", (pipeline,))
            return [row[0] for row in cur.fetchall()]
    finally:
        connection.close()


def _json_outbox_records(settings, pipeline: str) -> int:
    connection = store.connect(settings, check_schema=False)
    try:
        with connection, connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM eosbatch.outbox o JOIN eosbatch.batches b ON b.id = o.batch_id "
                        "WHERE b.pipeline = %s", (pipeline,))
            return int(cur.fetchone()[0])
    finally:
        connection.close()


def _run_previous(scenario: Scenario, code: Path, fault: str) -> subprocess.CompletedProcess[str]:
    env = {**scenario.env(fault), "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}
    for name in CONNECT_MODE:  # left by PySpark once this process opened a Connect session; the old release's
        env.pop(name, None)   # spark-submit driver would take itself for a Connect client (CONNECT_URL_NOT_SET)
    return subprocess.run([sys.executable, "-m", "eosbatch.cli", "run", scenario.pipeline, "--max-batches", "1"],
                          env=env, capture_output=True, text=True, timeout=900, cwd=code)


def _logs_named_in(done: subprocess.CompletedProcess[str]) -> str:
    """The tail of each log file the run's error names (the spark-submit log), for the failure's message."""
    tails = []
    for path in re.findall(r"\(log: ([^)]+)\)", done.stderr):
        log = Path(path)
        tails.append(f"--- {path}\n" + (log.read_text(errors="replace")[-3000:] if log.exists() else "(gone)"))
    return "\n".join(tails)


def test_batches_left_in_flight_by_the_previous_release_end_exactly_once(settings, unique, previous_release):
    """As an operator upgrades: the old release runs on its ledger schema and dies with a batch in flight;
    the new release is installed, `eosbatch db upgrade` runs, and the new runner settles it."""
    release, code = previous_release
    staged = Scenario(settings, f"{unique}s", "latest", records=1200, batch=800)
    committed = Scenario(settings, f"{unique}c", "totals", records=1200, batch=800)
    scenarios = [(staged, "process.after_staged", "staged"), (committed, "commit.after_commit", "committed")]
    migrate.downgrade(settings.database_url, PREVIOUS_RELEASES[release])
    try:
        for scenario, fault, left in scenarios:
            crashed = _run_previous(scenario, code, fault)
            assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-2000:] + _logs_named_in(crashed)
            assert _states_on_the_old_schema(settings, scenario.pipeline) == [left]
        if "0003" <= PREVIOUS_RELEASES[release] < "0008":  # the committed batch's records wait in the JSON outbox
            # (from 0008 on in the typed outbox, which the new release reads as the previous one wrote it)
            assert _json_outbox_records(settings, committed.pipeline) > 0
    finally:
        migrate.upgrade(settings.database_url, "head")
    for scenario, _, _ in scenarios:
        recovered = scenario.run()
        assert recovered.returncode == 0, recovered.stderr[-3000:]
        scenario.assert_exactly_once()
        verified = scenario.cli("verify", scenario.pipeline, "--no-recompute")
        assert verified.returncode == 0, verified.stdout
