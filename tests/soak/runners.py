"""The soak's pipeline: `eosbatch run PIPELINE --max-batches K` CLI processes, one after another, each a real runner
in a session of its own (tests/chaos/control.Runner) that a fault may SIGKILL. While one runs, its peak resident
memory (VmHWM of every process in its session) is read every second, so the runners' memory is known even for
short-lived ones."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.control import Runner, session

KILLED = -9


def rss_kb(pid: int, field_name: str = "VmRSS") -> int:
    """A process's resident memory (VmRSS), or its peak (VmHWM), in kB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def python_stack(pid: int, into: Path) -> str:
    """The Python stack of `pid`'s main thread, read with gdb and CPython's gdb extension (py-bt), written to
    `into`; the innermost frame of eosbatch's code in it ("" when gdb or the extension is missing)."""
    extension = Path(os.path.realpath(sys.executable) + "-gdb.py")
    if not extension.exists() or shutil.which("gdb") is None:
        return ""
    done = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "set auto-load safe-path /", "-ex",
                           f"source {extension}", "-ex", "thread apply 1 py-bt"],
                          capture_output=True, text=True, timeout=120, check=False)
    into.write_text(done.stdout + done.stderr)
    frames = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith('File "')]
    own = [f for f in frames if "/eosbatch/" in f]
    return own[0] if own else (frames[0] if frames else "")


@dataclass
class RunnerRecord:
    pid: int
    started: float                # seconds since the soak started
    ended: float = 0.0
    exit_code: int | None = None
    peak_rss_kb: int = 0          # the most the runner's session held at once, as last read
    last_error: str = ""
    hung_in: str = ""             # killed by the watchdog: the innermost eosbatch frame it was stuck in


@dataclass
class RunnerLoop:
    """Starts runners until stop(); `current()` is the one running now (None between two)."""

    args: list[str]
    env: dict[str, str]
    folder: Path
    origin: float                 # time.monotonic() of the soak's start
    pause_after_failure: float = 1.0
    hang_seconds: float = 300.0   # a runner running longer is stuck: its stack is dumped, then it is killed
    records: list[RunnerRecord] = field(default_factory=list)
    _current: Runner | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="soak-runners", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 900) -> None:
        """Lets the running runner finish (its batches end as they would), starts no other."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                runner = self.current()
                if runner is not None:
                    runner.kill()
                self._thread.join(60)

    def current(self) -> Runner | None:
        with self._lock:
            runner = self._current
        return runner if runner is not None and runner.process.poll() is None else None

    def started_after(self, pid: int) -> int | None:
        """The pid of the runner started next after the one with `pid`; None while there is none yet."""
        with self._lock:
            pids = [r.pid for r in self.records]
        return pids[pids.index(pid) + 1] if pid in pids and pids[-1] != pid else None

    def exits(self) -> Counter[str]:
        """How the runners ended: "0", "3" (transient), "4" (fenced), "killed" (a fault), "hung" (the watchdog)"""
        return Counter("hung" if r.hung_in else "killed" if r.exit_code == KILLED else str(r.exit_code)
                       for r in self.records if r.exit_code is not None)

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            runner = Runner(self.args, self.env, self.folder, f"runner{number:05d}")
            record = RunnerRecord(runner.pid, time.monotonic() - self.origin)
            with self._lock:
                self._current = runner
                self.records.append(record)
            while runner.process.poll() is None:
                record.peak_rss_kb = max(record.peak_rss_kb, sum(rss_kb(p, "VmHWM") for p in session(runner.pid)))
                if time.monotonic() - self.origin - record.started > self.hang_seconds and not record.hung_in:
                    record.hung_in = python_stack(runner.pid, self.folder / f"{runner.name}.stack") or "?"
                    runner.kill()
                try:
                    runner.process.wait(timeout=1.0)
                except Exception:  # noqa: BLE001,S110 - subprocess.TimeoutExpired: read its memory again
                    pass
            record.ended, record.exit_code = time.monotonic() - self.origin, runner.process.returncode
            with self._lock:
                self._current = None
            if record.exit_code not in (0, KILLED):
                lines = runner.stderr.strip().splitlines()
                record.last_error = lines[-1][:300] if lines else ""
                self._stop.wait(self.pause_after_failure)  # a service coming back: do not spin on it
            else:
                runner.out.unlink(missing_ok=True)  # keep the logs of the runners that failed only
                runner.err.unlink(missing_ok=True)
