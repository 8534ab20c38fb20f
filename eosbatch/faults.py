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
"""

from __future__ import annotations

import os
import signal
import sys
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


def point(name: str) -> None:
    """Act here if EOSBATCH_FAULT names this point: `<point>` on its first pass, `<point>@N` on the Nth
    pass in this process (a backfill killed halfway, after some batches finished)."""
    raw = os.environ.get(FAULT, "")
    if raw.partition(":")[0].partition("@")[0] != name:
        return  # the common case, and another point's malformed value is not this point's business
    fault = parse(raw)
    assert fault is not None
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] != fault.nth:  # once only: a resumed process passes the point again freely
        return
    where = name if fault.nth == 1 else f"{name} (pass {_hits[name]})"
    record(name)
    if fault.action == "stop":
        stop(where)
    else:
        die(where)


def record(name: str) -> None:
    """Append "<point> <pid>" to the EOSBATCH_FAULT_FIRED file: one O_APPEND write, so concurrent writers
    (Spark tasks, two runners) never interleave within a line."""
    path = os.environ.get(FIRED)
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
    os.kill(os.getpid(), signal.SIGSTOP)
    print(f"eosbatch: pid {os.getpid()} resumed after the fault at {where}", file=sys.stderr, flush=True)


def die(where: str) -> None:
    print(f"eosbatch: fault injected at {where}", file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)
