"""Start, find and stop the stack's background servers through pid files."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from eosbatch.pids import alive

__all__ = ["alive", "read_pid", "spawn", "stop", "supervisor_pid_file", "tail", "wait_dead"]


def read_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) else None


def supervisor_pid_file(pid_file: Path) -> Path:
    """Where the supervisor (eosbatch.stack.supervisor) of the server with `pid_file` writes its own pid."""
    return pid_file.with_name(pid_file.name + ".supervisor")


def spawn(command: list[str], log: Path, pid_file: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> int:
    """Start a server detached from this process group, so that it outlives the command that started it."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env, cwd=cwd,
        )
    pid_file.write_text(str(process.pid))
    return process.pid


def stop(pid_file: Path, timeout: float = 30.0) -> bool:
    """SIGTERM, then SIGKILL after `timeout`; True when something was running."""
    pid = read_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


def wait_dead(pid: int, timeout: float, what: str) -> None:
    """Return once `pid` is gone; StackError naming `what` after `timeout`."""
    from eosbatch.stack.exceptions import StackError

    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            raise StackError(f"{what}: process {pid} still running after {timeout:.0f}s")
        time.sleep(0.05)


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
