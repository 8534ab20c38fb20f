"""PostgreSQL failover on the embedded stack's streaming replica (`stack up --postgres-replica`): stop the primary
immediately, promote the replica, hold the replica back so that it misses commits, and put the stack back as it
was. Stable names: tests/soak uses them too. Every wait is bounded."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from eosbatch import stack
from eosbatch.stack import replica
from eosbatch.stack.postgres import PostgresCluster, find_bindir
from tests.chaos.control import wait_until


@contextmanager
def _connect(server: PostgresCluster) -> Iterator:  # type: ignore[type-arg]
    import psycopg2

    connection = psycopg2.connect(host="127.0.0.1", port=server.port, user="eosbatch", dbname="postgres",
                                  connect_timeout=5)
    connection.autocommit = True
    try:
        with connection.cursor() as cur:
            yield cur
    finally:
        connection.close()


class Failover:
    """The stack's primary (EOSBATCH_POSTGRES_PORT) and replica (the next port), and what a test does to them."""

    def __init__(self) -> None:
        self.primary, self.replica = stack.postgres_servers()
        bindir = find_bindir()
        assert bindir is not None, "PostgreSQL is not installed"
        self.bindir = bindir
        self.started_replica = False

    @property
    def url(self) -> str:
        """The multi-host URL (target_session_attrs=read-write) a runner must use to follow a failover."""
        return replica.multi_host_url([self.primary.port, self.replica.port])

    def ensure_replica(self, mode: str = "sync") -> None:
        """The replica running and streaming (made when missing), `mode` sync or async; the stack's roles as
        set up (the primary on its own port), restoring them first if an earlier failover left them swapped."""
        if replica.role(self.replica) == "stopped" and replica.role(self.primary) == "primary":
            self.started_replica = True
        replica.restore_primary(self.primary, self.replica, self.bindir, mode)

    def set_mode(self, mode: str) -> None:
        replica.set_synchronous(self.current_primary(), mode == "sync")

    def current_primary(self) -> PostgresCluster:
        for server in (self.primary, self.replica):
            if replica.role(server) == "primary":
                return server
        raise AssertionError("no PostgreSQL server of the stack is a primary")

    def stop_primary_immediately(self) -> int:
        """`pg_ctl stop -m immediate` on the current primary; its postmaster's pid (gone on return)."""
        return replica.stop_immediately(self.current_primary(), self.bindir)

    def current_replica(self) -> PostgresCluster:
        for server in (self.replica, self.primary):
            if replica.role(server) == "replica":
                return server
        raise AssertionError("no PostgreSQL server of the stack is a replica")

    def promote_replica(self) -> PostgresCluster:
        """`pg_ctl promote` on whichever server is the replica (the stack's replica, unless roles were swapped by an
        earlier failover and `rebuild_replica`); returns it once it accepts writes."""
        promoted = self.current_replica()
        replica.promote(promoted, self.bindir)
        return promoted

    def rebuild_replica(self, mode: str = "sync") -> PostgresCluster:
        """After a failover, without stopping the new primary: the stopped server made again, by pg_basebackup, as
        a `mode` replica of the current primary (the roles stay swapped; `restore` swaps them back). For a soak
        that fails over again and again; returns the new replica."""
        primary = self.current_primary()
        stopped = self.replica if primary is self.primary else self.primary
        replica.make_replica(primary, stopped, self.bindir)
        replica.set_synchronous(primary, mode == "sync")
        return stopped

    def caught_up(self) -> None:
        """Until the replica has replayed everything the primary wrote so far."""
        def replayed() -> bool:
            with _connect(self.primary) as cur:
                cur.execute("SELECT pg_current_wal_lsn()")
                target = cur.fetchone()[0]
            with _connect(self.replica) as cur:
                cur.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))
                return bool(cur.fetchone()[0])

        wait_until(replayed, 60, "the replica to replay the primary's WAL", interval=0.1)

    def detach_replica(self) -> None:
        """The replica stops receiving WAL (its primary_conninfo points nowhere, reloaded: its walreceiver ends and
        cannot connect again). An asynchronous primary commits on without it: what it commits from now on, the
        replica misses. Unlike a SIGSTOP, nothing is left in a socket buffer for the replica to read later."""
        with _connect(self.replica) as cur:
            cur.execute("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 connect_timeout=1'")
            cur.execute("SELECT pg_reload_conf()")

        def gone() -> bool:
            with _connect(self.primary) as cur:
                cur.execute("SELECT count(*) FROM pg_stat_replication WHERE application_name = %s",
                            (replica.APPLICATION_NAME,))
                return cur.fetchone()[0] == 0

        wait_until(gone, 30, "the replica to stop streaming", interval=0.1)

    def restore(self) -> None:
        """The stack as before the test: the primary on its own port with everything the promoted replica holds,
        a fresh synchronous replica; stopped again if this test started it."""
        if replica.role(self.primary) == "stopped" and replica.role(self.replica) == "stopped":
            replica._start(self.primary, self.bindir)
            self.primary.wait_ready()
        replica.restore_primary(self.primary, self.replica, self.bindir, "sync")
        if self.started_replica:
            replica.set_synchronous(self.primary, False)
            self.replica.stop(self.bindir)
