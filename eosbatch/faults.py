"""Fault injection for the crash and chaos tests.

`EOSBATCH_FAULT=<point>[@N][:<action>]` acts at the named point, on its first pass (or its Nth pass in this
process):
- `die` (the default): os._exit, a real process death that no cleanup code, finally block or atexit hook
  can soften;
- `stop`: the process SIGSTOPs itself, frozen exactly there, so that a test can do something to another
  component (crash PostgreSQL, kill the broker, start a second runner) and then SIGKILL or SIGCONT it.

With `EOSBATCH_FAULT_FIRED=<file>`, a point that acts first appends "<point> <pid>" to that file, for both
actions: a test asserts that its fault really fired (a moved or renamed point cannot pass by accident), and
learns which process to resume or kill (a Spark executor's Python worker is not the runner).

Executors do not share the runner's environment (a Spark Connect server started them long before), so a
point inside a Spark task reads the fault the driver `carried()` into the task's closure instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import NamedTuple

FAULT = "EOSBATCH_FAULT"
FIRED = "EOSBATCH_FAULT_FIRED"
EXIT_CODE = 86
ACTIONS = ("die", "stop")

POINTS = (
    "plan.after_commit",          # batch planned, nothing processed
    "process.mid_staging",        # a Spark task dies after writing its rows (first attempt only)
    "process.before_staged",      # staging written, batch still planned
    "process.after_staged",       # batch staged, not committed
    "commit.before_commit",       # the commit transaction is built but COMMIT is never sent
    "commit.after_commit",        # COMMIT reached PostgreSQL, the runner dies before it hears back
    "publish.mid_produce",        # inside the Kafka transaction, records produced, not committed
    "publish.before_end_txn",     # the marker sent to the transaction, commit_transaction (EndTxn) not yet
    "publish.after_kafka_commit", # Kafka committed, ledger not finalized
)


class Fault(NamedTuple):
    point: str
    nth: int      # act on this pass of the point in this process
    action: str   # "die" or "stop"


def parse(value: str) -> Fault | None:
    """`<point>[@N][:<action>]`, or None when empty. A malformed value raises ValueError: a test whose fault
    can never fire must fail, not pass."""
    if not value:
        return None
    spec, _, action = value.partition(":")
    name, _, nth = spec.partition("@")
    action = action or "die"
    if not name or action not in ACTIONS or (nth and (not nth.isdigit() or int(nth) < 1)):
        raise ValueError(f"{FAULT}={value!r}: expected <point>[@N][:{'|'.join(ACTIONS)}]")
    return Fault(name, int(nth or 1), action)


_hits: dict[str, int] = {}


def carried(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The fault settings of this (driver) process, to travel with a batch into its Spark tasks."""
    env = os.environ if env is None else env
    return {key: env[key] for key in (FAULT, FIRED) if env.get(key)}


def point(name: str, env: Mapping[str, str] | None = None) -> None:
    """Act here if EOSBATCH_FAULT names this point: `<point>` on its first pass, `<point>@N` on the Nth
    pass in this process (a backfill killed halfway, after some batches finished).

    `env` is a carried fault (a Spark task): there every task is a pass of its own, in one of several
    worker processes, so only the first to claim the point acts (a claim file next to the fired file)."""
    found = os.environ if env is None else env
    raw = found.get(FAULT, "")
    if raw.partition(":")[0].partition("@")[0] != name:
        return  # the common case, and another point's malformed value is not this point's business
    fault = parse(raw)
    assert fault is not None
    # A Spark Python worker is reused by the tasks of many runs: a carried fault counts its passes per run (its
    # fired file names the run), else one run's passes (a task that lost the claim) use up the next run's.
    key = name if env is None else f"{name} {env.get(FIRED, '')}"
    _hits[key] = _hits.get(key, 0) + 1
    if _hits[key] != fault.nth:  # once only: a resumed process passes the point again freely
        return
    if env is not None and not _claim(name, env.get(FIRED)):
        return
    where = name if fault.nth == 1 else f"{name} (pass {_hits[key]})"
    record(name, env)
    if fault.action == "stop":
        stop(where)
    else:
        die(where)


def _claim(name: str, fired: str | None) -> bool:
    """True for the first claimant of a carried point (O_EXCL), or always without a fired file."""
    if not fired:
        return True
    try:
        os.close(os.open(f"{fired}.{name}.claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


def record(name: str, env: Mapping[str, str] | None = None) -> None:
    """Append "<point> <pid>" to the EOSBATCH_FAULT_FIRED file: one O_APPEND write, so concurrent writers
    (Spark tasks, two runners) never interleave within a line."""
    path = (os.environ if env is None else env).get(FIRED)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{name} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def stop(where: str) -> None:
    """Freeze this process until someone sends SIGCONT (then carry on as if nothing happened) or SIGKILL."""
    print(f"eosbatch: fault injected at {where}: pid {os.getpid()} stopped", file=sys.stderr, flush=True)
    # To this thread, not the process: a process-directed SIGSTOP is taken by whichever thread the kernel
    # picks (the main thread first), and a point reached in another thread (an overlapped run's committer)
    # ran on past it, its COMMIT included, until the stop caught up (measured: every time).
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    print(f"eosbatch: pid {os.getpid()} resumed after the fault at {where}", file=sys.stderr, flush=True)


def die(where: str) -> None:
    print(f"eosbatch: fault injected at {where}", file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)
