"""Keep one server process running: restart it when it dies, stop it when told to.

`python -m eosbatch.stack.supervisor --pid-file F [--backoff S] [--give-up N] -- COMMAND...`

The long-lived Spark engine must come back after an OOM kill or a crash without an operator: batches that
fail meanwhile are transient errors, and a retry (Airflow's, or the next scheduled run) must find an engine.
docker-compose does this with `restart: unless-stopped`; on the embedded stack this process does it.

The server's pid goes to the pid file (what `stack status` shows and what a chaos test kills); this process's
own pid goes next to it (`<pid file>.supervisor`). SIGTERM stops the server, then this process. A server that
keeps dying young (shorter than HEALTHY_SECONDS) is restarted after a doubling backoff, and given up after
`--give-up` such deaths in a row, so a server that cannot start (port taken, bad jar) ends in its log rather
than in an endless loop.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from eosbatch.stack.processes import supervisor_pid_file

HEALTHY_SECONDS = 60.0  # a run this long resets the backoff: the server had started and served
MAX_BACKOFF = 30.0


class Decision(NamedTuple):
    restart: bool
    delay: float  # seconds before the restart
    young_deaths: int  # deaths in a row of a server younger than HEALTHY_SECONDS


def after_exit(ran_for: float, young_deaths: int, backoff: float, give_up: int) -> Decision:
    """What to do once the server exited on its own after `ran_for` seconds (pure, tested without processes)."""
    if ran_for >= HEALTHY_SECONDS:
        return Decision(True, backoff, 0)
    young_deaths += 1
    if young_deaths >= give_up:
        return Decision(False, 0.0, young_deaths)
    return Decision(True, min(backoff * 2 ** (young_deaths - 1), MAX_BACKOFF), young_deaths)


def _say(message: str) -> None:
    # stdout is the server's output file (spawned with it): the restarts stand next to the server's own words
    print(f"{datetime.now():%y/%m/%d %H:%M:%S} eosbatch-supervisor: {message}", flush=True)


def supervise(command: list[str], pid_file: Path, backoff: float, give_up: int) -> int:
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    young_deaths = 0
    try:
        while True:
            started = time.monotonic()
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
            pid_file.write_text(str(child.pid))
            if stopping:  # SIGTERM arrived between the check and Popen: the handler saw no child
                child.terminate()
            code = child.wait()  # a signal's handler runs inside it; the wait goes on until the server is gone
            if stopping:
                _say(f"stopped the server (pid {child.pid}, exit {code})")
                return 0
            decision = after_exit(time.monotonic() - started, young_deaths, backoff, give_up)
            young_deaths = decision.young_deaths
            if not decision.restart:
                _say(f"the server (pid {child.pid}) exited with {code}, {young_deaths} times in a row within "
                     f"{HEALTHY_SECONDS:.0f}s of its start: giving up; `eosbatch stack up` starts it again")
                return 1
            _say(f"the server (pid {child.pid}) exited with {code}; restarting it in {decision.delay:.1f}s")
            deadline = time.monotonic() + decision.delay
            while not stopping and time.monotonic() < deadline:
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            if stopping:
                return 0
    finally:
        pid_file.unlink(missing_ok=True)  # no server of ours runs any more


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eosbatch.stack.supervisor")
    parser.add_argument("--pid-file", type=Path, required=True, help="where the server's pid is written")
    parser.add_argument("--backoff", type=float, default=1.0, help="seconds before the first restart")
    parser.add_argument("--give-up", type=int, default=5, help="young deaths in a row before giving up")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("the server's command is missing (after --)")
    if args.give_up < 1 or args.backoff < 0:
        parser.error("--give-up must be >= 1 and --backoff >= 0")
    supervisor_pid_file(args.pid_file).write_text(str(os.getpid()))
    try:
        return supervise(command, args.pid_file, args.backoff, args.give_up)
    finally:
        supervisor_pid_file(args.pid_file).unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
