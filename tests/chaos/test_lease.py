"""Two runners of one pipeline: started at the same moment, kept running side by side (a CLI beside an
Airflow DAG run's tasks), and one frozen past its lease. Before the lane lease every plan bumped the epoch,
so two runners aborted each other's batches; now the lane has one holder at a time, the other leaves it
(and its epoch) alone, and a frozen holder is taken over after its lease expires and fenced when it wakes.
Each test ends exactly-once (Scenario.assert_exactly_once: sink, dead letters, coverage, output; then eosbatch verify
and the history checker, which must agree: tests/chaos/control.end_exactly_once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from eosbatch.cli import EXIT_FENCED, EXIT_TRANSIENT
from eosbatch.ledger import lanes, store
from tests.chaos.airflow_run import BUSY, CAUGHT_UP
from tests.chaos.control import end_exactly_once
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

DEADLINE = 600  # seconds for a whole test's runners; each spark-submit costs 20-40 s here


def wait_for(what: str, check: Callable[[], object], timeout: float = 120, every: float = 0.2) -> object:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def ledger(scenario: Scenario) -> tuple[int, dict]:
    """The regular lane's epoch (one bump per plan that got the lane) and its lease (owner, takeovers)."""
    with store.transaction(scenario.settings) as cur:
        epoch = lanes.lock_pipeline(cur, scenario.pipeline)
        leases = lanes.lane_leases(cur, scenario.pipeline)
    return epoch, leases


def lane_free(scenario: Scenario) -> bool:
    with store.transaction(scenario.settings) as cur:
        cur.execute("SELECT owner IS NULL OR expires_at <= clock_timestamp() FROM eosbatch.lane_leases "
                    "WHERE pipeline = %s AND lane = 'regular'", (scenario.pipeline,))
        row = cur.fetchone()
    return row is None or bool(row[0])


def cli(scenario: Scenario, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "eosbatch.cli", *args], env=env or scenario.env(), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def assert_one_busy_line(stderr: str, scenario: Scenario) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eosbatch: LaneBusy: "), lines
    assert scenario.pipeline in lines[0] and "held by cli:" in lines[0]


# ---------------------------------------------------------------- a. started at the same moment

def test_two_runners_started_at_the_same_moment(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=2400, batch=1500)
    first, second = cli(scenario, "run", scenario.pipeline), cli(scenario, "run", scenario.pipeline)
    outcomes = [(p.returncode, out, err) for p in (first, second) for out, err in [p.communicate(timeout=DEADLINE)]]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes in ([0, EXIT_TRANSIENT], [0, 0]), outcomes  # nobody fails, nobody loops for ever
    for code, _, err in outcomes:
        if code == EXIT_TRANSIENT:  # the loser leaves the lane alone, says so in one line, at once
            assert_one_busy_line(err, scenario)
    batches = scenario.batches()
    assert batches and all(state == "published" for _, _, state in batches), batches  # nothing aborted
    epoch, leases = ledger(scenario)
    lease, takeovers = leases["regular"]
    # one bump per plan of the runner that did the work (its batches + the caught-up plan); none by the loser
    assert epoch == len(batches) + 1 + (codes == [0, 0]), (epoch, batches)
    assert takeovers == 0 and lease.owner is None  # never taken from a live holder; released at the end
    end_exactly_once(scenario)


# ---------------------------------------------------------------- b. side by side: the CLI and an Airflow run

def test_cli_and_airflow_runs_side_by_side_share_the_lane_without_ping_pong(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=2400, batch=900)
    env = scenario.env()
    runs: dict[str, list[str]] = {"cli": [], "airflow": []}  # per runner: "batch", "busy", "caught up"
    errors: list[str] = []

    def keep_running(name: str, attempt: Callable[[int], str]) -> None:
        """Like a scheduler: run again and again; when busy, come back once the lane is free; stop when
        caught up. Bounded: a runner that never gets the lane (ping-pong, a stuck lease) fails the test."""
        try:
            for number in range(25):
                outcome = attempt(number)
                runs[name].append(outcome)
                if outcome == "caught up":
                    return
                if outcome == "busy":
                    wait_for(f"{name}: the lane to be free", lambda: lane_free(scenario), timeout=180)
            errors.append(f"{name}: not caught up after 25 runs: {runs[name]}")
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread below
            errors.append(f"{name}: {type(exc).__name__}: {exc}")

    def cli_run(_: int) -> str:  # `eosbatch run --max-batches 1`, as a cron job would, over and over
        done = subprocess.run([sys.executable, "-m", "eosbatch.cli", "run", scenario.pipeline, "--max-batches", "1"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE)
        if done.returncode == EXIT_TRANSIENT:
            assert "LaneBusy" in done.stderr, done.stderr[-2000:]
            return "busy"
        assert done.returncode == 0, done.stderr[-3000:]
        return "caught up" if done.stdout.strip().splitlines()[-1].startswith("0 batches") else "batch"

    def airflow_run(number: int) -> str:  # one DAG run's tasks, all under the run's owner
        done = subprocess.run([sys.executable, "-m", "tests.chaos.airflow_run", scenario.pipeline,
                               f"scheduled__{unique}_{number}"], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=DEADLINE)
        outcome = {0: "batch", CAUGHT_UP: "caught up", BUSY: "busy"}.get(done.returncode)
        assert outcome is not None, done.stderr[-3000:]
        return outcome

    threads = [threading.Thread(target=keep_running, args=("airflow", airflow_run)),
               threading.Thread(target=keep_running, args=("cli", cli_run))]
    threads[0].start()  # the DAG run first, so that the CLI meets a lane held by Airflow, then both race
    wait_for("the Airflow run's first batch", scenario.batches, timeout=120)
    threads[1].start()
    for thread in threads:
        thread.join(timeout=DEADLINE)
    assert not any(t.is_alive() for t in threads), f"runners still going after {DEADLINE} s: {runs}"
    assert not errors, (errors, runs)

    batches = scenario.batches()
    did = sum(outcome == "batch" for outcome in runs["cli"] + runs["airflow"])
    assert did == len(batches) >= 3, (runs, batches)  # all input processed, in several batches
    assert "batch" in runs["airflow"], runs  # the DAG run's lease went through all its tasks
    assert all(state == "published" for _, _, state in batches), batches  # nobody aborted anybody's batch
    planned = sum(outcome != "busy" for outcome in runs["cli"] + runs["airflow"])
    epoch, leases = ledger(scenario)
    lease, takeovers = leases["regular"]
    assert epoch == planned <= len(batches) + 2, (epoch, runs)  # a busy lane's epoch is never bumped
    assert takeovers == 0 and lease.owner is None, leases
    end_exactly_once(scenario)
    print(f"runs: {runs}; epoch {epoch}")


# ---------------------------------------------------------------- c. a holder frozen past its lease

def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_a_holder_frozen_past_its_lease_is_taken_over_and_fenced_when_it_wakes(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=1000, batch=1500)
    env = {**scenario.env(), "EOSBATCH_LEASE_SECONDS": "5"}
    holder = cli(scenario, "run", scenario.pipeline, env=env)
    try:
        wait_for("the holder's batch to be planned", lambda: scenario.states() == ["planned"], timeout=120)
        os.killpg(holder.pid, signal.SIGSTOP)  # the runner, its heartbeat and its spark-submit: all frozen
        wait_for("the holder to be stopped", lambda: _state(holder.pid) == "T", timeout=10)
        _, before = ledger(scenario)
        assert before["regular"][0].owner.startswith("cli:") and before["regular"][1] == 0
        wait_for("the frozen holder's lease to expire", lambda: lane_free(scenario), timeout=30)
        assert _state(holder.pid) == "T" and scenario.states() == ["planned"]  # the fault really fired

        second = subprocess.run([sys.executable, "-m", "eosbatch.cli", "run", scenario.pipeline], env=env, cwd=ROOT,
                                capture_output=True, text=True, timeout=DEADLINE)
        assert second.returncode == 0, second.stderr[-3000:]
        assert f"taking over the regular lane from {before['regular'][0].owner} (its lease expired)" in second.stdout
        assert [state for state in scenario.states()] == ["aborted", "published"], scenario.batches()
        _, after = ledger(scenario)
        assert after["regular"][1] == 1 and after["regular"][0].owner is None  # one takeover; released
    finally:
        os.killpg(holder.pid, signal.SIGCONT)
    out, err = holder.communicate(timeout=DEADLINE)
    assert holder.returncode == EXIT_FENCED, (out, err[-3000:])  # LaneLost is a way of being fenced
    last = err.strip().splitlines()[-1]
    assert last.startswith("eosbatch: fenced: ") and "lost the regular lane" in last, err[-3000:]
    assert scenario.states() == ["aborted", "published"]  # the woken holder wrote nothing more
    end_exactly_once(scenario)
