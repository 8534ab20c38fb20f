"""The supervisor that keeps the long-lived engine running: its decisions, then real processes under it."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from eosbatch.stack import processes
from eosbatch.stack.processes import supervisor_pid_file
from eosbatch.stack.supervisor import HEALTHY_SECONDS, MAX_BACKOFF, after_exit


def test_a_server_that_served_is_restarted_after_the_first_backoff() -> None:
    assert after_exit(HEALTHY_SECONDS + 1, young_deaths=3, backoff=1.0, give_up=5) == (True, 1.0, 0)


def test_a_server_dying_young_is_restarted_later_each_time_then_given_up() -> None:
    delays, deaths = [], 0
    while True:
        decision = after_exit(2.0, deaths, backoff=4.0, give_up=5)
        deaths = decision.young_deaths
        if not decision.restart:
            break
        delays.append(decision.delay)
    assert delays == [4.0, 8.0, 16.0, MAX_BACKOFF] and deaths == 5


def _until(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def _supervise(tmp_path: Path, *server: str, give_up: int = 5) -> tuple[Path, Path]:
    pid_file, log = tmp_path / "server.pid", tmp_path / "server.out"
    processes.spawn([sys.executable, "-m", "eosbatch.stack.supervisor", "--pid-file", str(pid_file),
                     "--backoff", "0.1", "--give-up", str(give_up), "--", *server],
                    log, supervisor_pid_file(pid_file))
    return pid_file, log


def test_a_killed_server_comes_back_and_a_stop_ends_both(tmp_path: Path) -> None:
    pid_file, log = _supervise(tmp_path, sys.executable, "-c", "import time; time.sleep(600)")
    first = _until(lambda: processes.read_pid(pid_file), 10, "the server to start")
    os.kill(first, signal.SIGKILL)
    second = _until(lambda: (pid := processes.read_pid(pid_file)) not in (None, first) and pid, 10,
                    "the supervisor to restart the server")
    assert f"the server (pid {first}) exited with -9; restarting it" in log.read_text()
    supervisor = processes.read_pid(supervisor_pid_file(pid_file))
    assert supervisor is not None
    assert processes.stop(supervisor_pid_file(pid_file), timeout=10)
    _until(lambda: not processes.alive(second), 10, "the server to stop with its supervisor")
    assert not processes.alive(supervisor) and not pid_file.exists(), "a stop left the server's pid file"


def test_a_server_that_cannot_start_is_given_up_with_its_reason_in_the_log(tmp_path: Path) -> None:
    pid_file, log = _supervise(tmp_path, "sh", "-c", "echo port 15002 is taken >&2; exit 7", give_up=3)
    _until(lambda: "giving up" in log.read_text(), 20, "the supervisor to give up")
    _until(lambda: not supervisor_pid_file(pid_file).exists(), 10, "the supervisor to exit")
    text = log.read_text()
    assert text.count("port 15002 is taken") == 3 and text.count("restarting it") == 2, text
    assert "exited with 7, 3 times in a row" in text and processes.read_pid(pid_file) is None, text

