"""Lane leases: which runner may work a pipeline's lane now. Pure decisions, no I/O.

The epoch fences (every ledger write checks it); the lease only decides who may bump it. Without a
lease every plan bumps the epoch, so two runners of one lane abort each other's batches for ever. With
it, a runner bumps the epoch only when the lane's lease is free, expired, or its own; otherwise it
leaves the lane alone. Times are the database's (`clock_timestamp()`), never a client's clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, NamedTuple

LeaseDecision = Literal["take", "renew", "busy"]
CLI_PREFIX = "cli:"
AIRFLOW_PREFIX = "airflow:"


class Lease(NamedTuple):
    """A lane's lease row: `owner` None when released (or never taken)."""
    owner: str | None
    expires_at: datetime | None


class CliOwner(NamedTuple):
    host: str
    pid: int


def decide(lease: Lease | None, me: str, now: datetime, holder_gone: bool = False) -> LeaseDecision:
    """take: the lane is free, expired, or its holder is known to be dead (bump the epoch, recover);
    renew: it is mine (even expired: nobody took it since, so nothing was written by another runner);
    busy: another owner holds an unexpired lease (leave the epoch alone, come back later)."""
    if lease is None or lease.owner is None:
        return "take"
    if lease.owner == me:
        return "renew"
    if holder_gone or lease.expires_at is None or lease.expires_at <= now:
        return "take"
    return "busy"


def still_mine(lease: Lease | None, me: str) -> bool:
    """A renewal never takes: a runner whose lease was taken, or released, has lost the lane (another
    runner may have bumped the epoch) and must go through recovery again, never quietly continue."""
    return lease is not None and lease.owner == me


def cli_owner(host: str, pid: int, token: str) -> str:
    return f"{CLI_PREFIX}{host}:{pid}:{token}"


def airflow_owner(dag_id: str, run_id: str) -> str:
    """All tasks of one DAG run are one owner: the lease taken by `plan` carries through to `finalize`."""
    return f"{AIRFLOW_PREFIX}{dag_id}:{run_id}"


def parse_cli_owner(owner: str | None) -> CliOwner | None:
    """The host and pid of a CLI owner; None for any other owner (Airflow runs, unknown forms)."""
    if owner is None or not owner.startswith(CLI_PREFIX):
        return None
    parts = owner[len(CLI_PREFIX):].split(":")
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit():
        return None
    return CliOwner(parts[0], int(parts[1]))


def holder_gone(owner: str | None, my_host: str, my_pid: int, pid_alive: bool | None) -> bool:
    """A CLI holder on this very host whose process no longer exists will never renew or release: no
    need to wait for its lease to expire. `pid_alive` is what the OS said about its pid (None: not asked).
    Anything else (another host, an Airflow run, a pid that exists, even if reused) waits for expiry;
    a wrong "gone" would cost only liveness, never safety: the epoch still fences the holder."""
    parsed = parse_cli_owner(owner)
    if parsed is None or parsed.host != my_host or parsed.pid == my_pid:
        return False
    return pid_alive is False


def superseded(owner: str | None, me: str) -> bool:
    """A lease held by an earlier run of my own DAG: the micro-batch DAG runs one run at a time
    (max_active_runs=1), so that run has ended (failed where nothing released its lease) and only its
    zombie tasks may remain, which the epoch bump fences. No need to wait for its expiry."""
    if owner is None or owner == me or not (owner.startswith(AIRFLOW_PREFIX) and me.startswith(AIRFLOW_PREFIX)):
        return False
    held_dag, mine = owner[len(AIRFLOW_PREFIX):].split(":", 1)[0], me[len(AIRFLOW_PREFIX):].split(":", 1)[0]
    return held_dag == mine


def heartbeat_interval(lease_seconds: float) -> float:
    """Renew three times per lease: two renewals may be lost (a slow database) before it expires."""
    return lease_seconds / 3


def remaining(lease: Lease, now: datetime) -> timedelta:
    return max(timedelta(0), (lease.expires_at or now) - now)
