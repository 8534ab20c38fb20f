"""Lane leases against the ledger: take or renew at recovery, renew while working, release when done.

The decisions are `eosbatch.protocol.lease`'s; this module reads the lease row, asks, and writes. The
lease only keeps runners from taking a lane from each other; the epoch (bumped by every recovery)
still fences every ledger write, so a wrong lease decision can cost time, never exactly-once.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Callable
from datetime import datetime
from types import TracebackType

from eosbatch import config, pids
from eosbatch.exceptions import EosbatchError
from eosbatch.ledger import lanes, store
from eosbatch.ledger.exceptions import LaneBusy, LaneLost
from eosbatch.protocol import lease as rules
from eosbatch.protocol.lease import Lease, LeaseDecision
from eosbatch.protocol.states import Lane

Log = Callable[[str], None]
_TOKEN = secrets.token_hex(4)  # tells two runners of one pid apart (pid reuse, a fork)


def _quiet(_: str) -> None:
    pass


def runner_id() -> str:
    """This process's owner name as a CLI runner: host:pid:random."""
    return rules.cli_owner(socket.gethostname(), os.getpid(), _TOKEN)


def _when(lease: Lease, now: datetime) -> str:
    expires = lease.expires_at.isoformat(timespec="seconds") if lease.expires_at else "?"
    return f"until {expires} (in {rules.remaining(lease, now).total_seconds():.0f} s)"


def acquire(cur: store.Cursor, settings: config.Settings, pipeline: str, in_lane: Lane, owner: str,
            log: Log = _quiet) -> LeaseDecision:
    """Inside recovery's transaction (the pipeline row locked): take the lane's lease or renew it, or
    raise LaneBusy, leaving the lane and its epoch untouched, when another runner holds it."""
    lease, now = lanes.read_lease(cur, pipeline, in_lane)
    holder = rules.parse_cli_owner(lease.owner)
    here = socket.gethostname()
    asked = pids.alive(holder.pid) if holder is not None and holder.host == here else None
    gone = rules.holder_gone(lease.owner, here, os.getpid(), asked)
    ended = rules.superseded(lease.owner, owner)
    decision = rules.decide(lease, owner, now, gone or ended)
    if decision == "busy":
        raise LaneBusy(f"pipeline {pipeline!r}: the {in_lane} lane is held by {lease.owner} {_when(lease, now)}; "
                       "this runner leaves it alone: run again later")
    if decision == "renew":
        lanes.renew_lease(cur, pipeline, in_lane, owner, settings.lease_seconds)
        return decision
    if lease.owner is not None:
        why = "its process is gone" if gone else "its DAG run has ended" if ended else "its lease expired"
        log(f"{pipeline}: taking over the {in_lane} lane from {lease.owner} ({why})")
    lanes.take_lease(cur, pipeline, in_lane, owner, settings.lease_seconds, takeover=lease.owner is not None)
    return decision


def renew(settings: config.Settings, pipeline: str, in_lane: Lane, owner: str) -> Lease:
    """Extend this runner's lease, or raise LaneLost naming who holds the lane now."""
    with store.transaction(settings) as cur:
        renewed = lanes.renew_lease(cur, pipeline, in_lane, owner, settings.lease_seconds)
        if renewed is not None:
            return renewed
        lane_now = lanes.lane_leases(cur, pipeline).get(in_lane)  # (its lease, its takeovers)
    holder = lane_now[0].owner if lane_now else None
    # Only its holder releases a lease: gone from `owner`, it was taken over (and maybe released since).
    now_held = f"another runner ({holder}) took it over" if holder else "another runner took it over (and is done)"
    raise LaneLost(f"pipeline {pipeline!r}: this runner ({owner}) lost the {in_lane} lane: {now_held}, "
                   "its recovery bumped the epoch; this runner stops here")


def release(settings: config.Settings, pipeline: str, in_lane: Lane, owner: str) -> None:
    """Free the lane for the next runner; if the ledger is unreachable the lease simply expires."""
    try:
        with store.transaction(settings) as cur:
            lanes.release_lease(cur, pipeline, in_lane, owner)
    except EosbatchError:
        pass


class Heartbeat:
    """Renews the lease every third of its length from a background thread while a long step runs (the
    Spark job); `check()` renews at once. On leaving, a lease found lost raises LaneLost, ahead of
    whatever error the step hit (a stale epoch in the Spark app, say), so the runner says why it stops."""

    def __init__(self, settings: config.Settings, pipeline: str, in_lane: Lane, owner: str) -> None:
        self.settings, self.pipeline, self.lane, self.owner = settings, pipeline, in_lane, owner
        self.lost: LaneLost | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"eosbatch-lease-{pipeline}-{in_lane}",
                                        daemon=True)

    def check(self) -> None:
        if self.lost is not None:
            raise self.lost
        try:
            renew(self.settings, self.pipeline, self.lane, self.owner)
        except LaneLost as exc:
            self.lost = exc
            raise

    def _beat(self) -> None:
        while not self._stop.wait(rules.heartbeat_interval(self.settings.lease_seconds)):
            try:
                renew(self.settings, self.pipeline, self.lane, self.owner)
            except LaneLost as exc:
                self.lost = exc
                return
            except EosbatchError:
                continue  # the ledger is unreachable for now: try again at the next beat

    def __enter__(self) -> Heartbeat:
        self.check()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        if error is None:
            self.check()
            return
        if isinstance(error, LaneLost) or not isinstance(error, EosbatchError):
            return
        if self.lost is None:  # the step failed: was it because the lane was taken (a stale epoch)?
            try:
                self.check()
            except EosbatchError:
                pass
        if self.lost is not None:
            raise self.lost from error
