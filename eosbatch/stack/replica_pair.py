"""The stack's PostgreSQL with a streaming replica (`--postgres-replica`, EOSBATCH_POSTGRES_REPLICA): the two
servers, which one waits for which, and the replica's start and stop (eosbatch.stack.replica does the work)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from eosbatch import config
from eosbatch.stack import places, replica
from eosbatch.stack.exceptions import StackError
from eosbatch.stack.postgres import PostgresCluster, find_bindir

POSTGRES_REPLICA = "EOSBATCH_POSTGRES_REPLICA"  # sync (or 1) / async: `up` also starts a streaming replica


def postgres_servers(root: Path | None = None) -> tuple[PostgresCluster, PostgresCluster]:
    """The stack's PostgreSQL server (home/postgres, EOSBATCH_POSTGRES_PORT) and its replica's
    (home/postgres-replica, the next port). Which one is the primary is what `replica.role` answers: after
    a failover it is the replica's."""
    port = places.port("EOSBATCH_POSTGRES_PORT", 15432)
    root = root or places.home()
    return PostgresCluster(root, port), PostgresCluster(root, port + 1, folder="postgres-replica")


def replica_wanted() -> str:
    """EOSBATCH_POSTGRES_REPLICA: "" (none), "sync" (1, sync) or "async"."""
    raw = os.environ.get(POSTGRES_REPLICA, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return ""
    if raw in ("1", "true", "yes", "sync"):
        return "sync"
    if raw == "async":
        return "async"
    raise config.ConfigError(POSTGRES_REPLICA, f"must be sync (or 1), async or 0, got {raw!r}")


def replica_up(mode: str = "sync", log=print) -> str:  # type: ignore[no-untyped-def]
    """Start the replica (made by pg_basebackup from the primary the first time, or when its folder holds no
    server), and make the primary wait for it (`mode` sync) or not (async); the multi-host URL."""
    if mode not in replica.MODES:
        raise config.ConfigError(POSTGRES_REPLICA, f"must be one of {', '.join(replica.MODES)}, got {mode!r}")
    first, second = postgres_servers()
    bindir = find_bindir()
    if bindir is None:
        raise StackError("postgres: not installed; run `eosbatch stack up` first")
    started = time.monotonic()
    primary, standby = (second, first) if replica.role(second) == "primary" else (first, second)
    if replica.role(primary) != "primary":
        raise StackError(f"postgres: no primary answers on port {first.port} or {second.port}")
    if standby.pid() is None:
        if (standby.data / "PG_VERSION").exists() and (standby.data / "standby.signal").exists():
            standby.start(bindir)
            replica.wait_streaming(primary)
        else:
            replica.make_replica(primary, standby, bindir)
    replica.set_synchronous(primary, mode == "sync")
    log(f"postgres-replica: {mode} replica on 127.0.0.1:{standby.port} of the primary on {primary.port} "
        f"({time.monotonic() - started:.1f}s)")
    return replica.multi_host_url([first.port, second.port])


def no_waiting_for_a_stopped_replica(log=print) -> None:  # type: ignore[no-untyped-def]
    """A primary left synchronous (ALTER SYSTEM outlives restarts) whose replica is not running would make
    every COMMIT wait forever: asynchronous then, said in the log."""
    first, second = postgres_servers()
    for primary, standby in ((first, second), (second, first)):
        if (replica.role(primary) == "primary" and standby.pid() is None and replica.synchronous(primary)):
            replica.set_synchronous(primary, False)
            log(f"postgres: the replica is not running; the primary on {primary.port} no longer waits for it")


def replica_down(log=print) -> bool:  # type: ignore[no-untyped-def]
    """Stop whichever server is the replica (the primary keeps running, and stops waiting for it)."""
    first, second = postgres_servers()
    bindir = find_bindir()
    for primary, standby in ((first, second), (second, first)):
        if replica.role(standby) == "replica":
            if replica.role(primary) == "primary":
                replica.set_synchronous(primary, False)
            standby.stop(bindir)
            log("postgres-replica: stopped")
            return True
    return False
