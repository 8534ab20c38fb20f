"""Fault points: the process really dies (os._exit) at the named point, on the pass asked for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from eosbatch import faults
from tests.chaos import control
from tests.chaos.control import wait_until

pytestmark = pytest.mark.unit
SCRIPT = ("from eosbatch import faults\n"
          "for i in range(3):\n"
          "    print('pass', i + 1, flush=True)\n"
          "    faults.point('commit.after_commit')\n"
          "print('survived', flush=True)\n")


@pytest.mark.parametrize(("fault", "passes", "code"), [
    ("commit.after_commit", 1, faults.EXIT_CODE),
    ("commit.after_commit@2", 2, faults.EXIT_CODE),
    ("publish.mid_produce", 3, 0),
])
def test_fault_point_dies_on_the_pass_asked_for(fault, passes, code):
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={faults.FAULT: fault}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == code
    assert done.stdout.count("pass") == passes
    assert ("survived" in done.stdout) == (code == 0)


def test_both_actions_record_that_the_fault_fired(tmp_path):
    fired = tmp_path / "fired"
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={faults.FAULT: "commit.after_commit@2",
                                                              faults.FIRED: str(fired)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == faults.EXIT_CODE
    [(point, pid)] = control.fired(fired)
    assert point == "commit.after_commit" and pid > 0


def test_stop_freezes_the_process_at_the_point_until_sigcont(tmp_path):
    """`:stop` records the point, then SIGSTOPs itself: the test finds it stopped exactly there (one pass
    printed, not two), and after SIGCONT it carries on as if nothing happened."""
    fired = tmp_path / "fired"
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], env={faults.FAULT: "commit.after_commit:stop",
                                                                    faults.FIRED: str(fired)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = wait_until(lambda: dict(control.fired(fired)).get("commit.after_commit"), 30, "the fault to fire")
        assert pid == process.pid
        wait_until(lambda: control.state(pid) == "T", 30, "the process to stop")
        os.kill(pid, signal.SIGCONT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.split("\n")[:4] == ["pass 1", "pass 2", "pass 3", "survived"]
    assert "commit.after_commit: pid" in err and "resumed" in err
    assert control.fired(fired) == [("commit.after_commit", pid)]  # it fires once, on the pass asked for


THREADED = ("import sys, threading, time\n"
            "from eosbatch import faults\n"
            "def work():\n"
            "    faults.point('commit.before_commit')\n"
            "    open(sys.argv[1], 'w').close()\n"
            "threading.Thread(target=work).start()\n"
            "while True:\n"
            "    time.sleep(0.001)\n")


def test_stop_reached_in_another_thread_freezes_that_thread_at_the_point(tmp_path):
    """An overlapped run reaches its commit and publish points in threads of their own. A process-directed
    SIGSTOP let such a thread run on past the point (a COMMIT that the test believed frozen went through) until
    the stop caught up: the file written after the point appeared every time. Frozen, it must not appear;
    resumed, it does."""
    fired, after = tmp_path / "fired", tmp_path / "after"
    process = subprocess.Popen([sys.executable, "-c", THREADED, str(after)],
                               env={faults.FAULT: "commit.before_commit:stop", faults.FIRED: str(fired)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: control.fired(fired), 30, "the fault to fire")
        wait_until(lambda: control.state(process.pid) == "T", 30, "the process to stop")
        with pytest.raises(AssertionError):  # still frozen at the point after a while: nothing written
            wait_until(after.exists, 1.0, "the thread to run past its fault point")
        os.kill(process.pid, signal.SIGCONT)
        wait_until(after.exists, 30, "the resumed thread to carry on")
    finally:
        process.kill()
        process.wait()


def test_no_fired_file_no_record_and_other_points_do_not_act(tmp_path):
    fired = tmp_path / "fired"
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={faults.FAULT: "publish.mid_produce:stop"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "survived" in done.stdout
    other = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60,
                           env={faults.FAULT: "publish.mid_produce:stop", faults.FIRED: str(fired)})
    assert other.returncode == 0 and "survived" in other.stdout
    assert not fired.exists(), "a point that did not act recorded itself"


def test_a_carried_fault_acts_in_a_python_worker_that_passed_the_point_in_an_earlier_run(tmp_path):
    """A Spark Python worker serves the tasks of run after run: a task of the first run passed the point and
    lost the claim to another worker; the point must still act for the next run (its own fired file)."""
    first, second = tmp_path / "first.fired", tmp_path / "second.fired"
    (tmp_path / "first.fired.process.mid_staging.claim").touch()  # another worker of the first run claimed it
    script = ("from eosbatch import faults\n"
              f"faults.point('process.mid_staging', {{'{faults.FAULT}': 'process.mid_staging', "
              f"'{faults.FIRED}': {str(first)!r}}})\n"
              "print('first run passed', flush=True)\n"
              f"faults.point('process.mid_staging', {{'{faults.FAULT}': 'process.mid_staging', "
              f"'{faults.FIRED}': {str(second)!r}}})\n"
              "print('survived', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], env={}, capture_output=True, text=True, timeout=60)
    assert done.returncode == faults.EXIT_CODE, done.stdout + done.stderr
    assert "first run passed" in done.stdout and "survived" not in done.stdout
    assert [point for point, _ in control.fired(second)] == ["process.mid_staging"]


@pytest.mark.parametrize("value", ["commit.after_commit:pause", "commit.after_commit@0", "commit.after_commit@x",
                                   ":stop"])
def test_a_malformed_fault_is_refused_not_ignored(value):
    with pytest.raises(ValueError, match="EOSBATCH_FAULT"):
        faults.parse(value)


def test_parse():
    assert faults.parse("") is None
    assert faults.parse("process.mid_staging") == faults.Fault("process.mid_staging", 1, "die")
    assert faults.parse("commit.after_commit@3:stop") == faults.Fault("commit.after_commit", 3, "stop")
