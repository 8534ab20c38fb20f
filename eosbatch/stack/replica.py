"""The embedded PostgreSQL's streaming replica (`stack up --postgres-replica`): made by pg_basebackup from the
primary, on the primary's port + 1, synchronous by default (the primary's COMMIT returns once the replica has
flushed it), asynchronous on request. Plain functions to promote it, to stop a server immediately, to tell
which one is the primary, and to put the stack back as it was after a failover (tests/chaos/failover.py)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from eosbatch.stack import postgres
from eosbatch.stack.exceptions import StackError, StackNotReady
from eosbatch.stack.postgres import STANDBY_MARK, USER, PostgresCluster

APPLICATION_NAME = "eosbatch_replica"  # how the primary's synchronous_standby_names names the replica
MODES = ("sync", "async")


def multi_host_url(ports: list[int], database: str = postgres.DATABASE, user: str = USER) -> str:
    """A SQLAlchemy URL naming every server (SQLAlchemy 2's `?host=h:p&host=h:p`), with libpq's
    target_session_attrs=read-write: a connection goes to whichever server accepts writes, so the runner
    follows a promoted replica without a new URL (eosbatch.config.to_libpq_url turns it into libpq's
    `postgresql://user@h:p,h:p/db?...`)."""
    hosts = "&".join(f"host=127.0.0.1:{port}" for port in ports)
    return f"postgresql+psycopg2://{user}@/{database}?{hosts}&target_session_attrs=read-write"


def _superuser(cluster: PostgresCluster):  # type: ignore[no-untyped-def]
    import psycopg2

    connection = psycopg2.connect(host="127.0.0.1", port=cluster.port, user=USER, dbname="postgres",
                                  connect_timeout=5)
    connection.autocommit = True
    return connection


def set_synchronous(primary: PostgresCluster, synchronous: bool) -> None:
    """Make the primary's COMMIT wait for the replica's flush (synchronous_standby_names names it), or not."""
    connection = _superuser(primary)
    try:
        with connection.cursor() as cursor:
            if synchronous:
                cursor.execute(f"ALTER SYSTEM SET synchronous_standby_names = '\"{APPLICATION_NAME}\"'")
            else:
                cursor.execute("ALTER SYSTEM RESET synchronous_standby_names")
            cursor.execute("SELECT pg_reload_conf()")
    finally:
        connection.close()


def synchronous(primary: PostgresCluster) -> bool:
    connection = _superuser(primary)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_standby_names")
            return bool(cursor.fetchone()[0].strip())
    finally:
        connection.close()


def make_replica(source: PostgresCluster, replica: PostgresCluster, bindir: Path, timeout: float = 60.0) -> None:
    """(Re)build `replica` as a streaming standby of the running `source`: whatever its folder held is
    replaced by a pg_basebackup (WAL streamed, a fast checkpoint), then it starts and this waits until the
    source streams to it."""
    replica.stop(bindir, mode="immediate")
    replica.home.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(replica.data, ignore_errors=True)
    (replica.home / STANDBY_MARK).write_text("made by pg_basebackup; `start` never initdbs it\n")
    if _as_root(replica):
        shutil.chown(replica.home, "postgres")
    replica._run([str(bindir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(source.port), "-U", USER,
                  "-D", str(replica.data), "-X", "stream", "--checkpoint=fast", "--no-sync"], "pg_basebackup")
    # The source's postgresql.auto.conf came along: it may name a synchronous standby, which a promoted replica
    # would then wait for forever. The replica's own settings are only these.
    _write_owned(replica, replica.data / "postgresql.auto.conf",
                 f"primary_conninfo = 'host=127.0.0.1 port={source.port} user={USER} "
                 f"application_name={APPLICATION_NAME}'\n")
    _write_owned(replica, replica.data / "standby.signal", "")
    _start(replica, bindir)
    wait_streaming(source, timeout)


def streams(primary: PostgresCluster, timeout: float = 5.0) -> bool:
    """Whether the primary streams WAL to the replica (waiting up to `timeout` for it to start)."""
    try:
        wait_streaming(primary, timeout)
    except StackNotReady:
        return False
    return True


def wait_streaming(primary: PostgresCluster, timeout: float = 60.0) -> None:
    """Until the primary streams WAL to the replica."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection = _superuser(primary)
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1 FROM pg_stat_replication WHERE application_name = %s "
                                   "AND state = 'streaming'", (APPLICATION_NAME,))
                    if cursor.fetchone():
                        return
            finally:
                connection.close()
        except Exception:  # noqa: BLE001 - not answering yet is the same as not streaming yet
            pass
        if time.monotonic() > deadline:
            raise StackNotReady(f"postgres: the replica does not stream from port {primary.port} after "
                                f"{timeout:.0f}s; see {primary.log}")
        time.sleep(0.1)


def promote(replica: PostgresCluster, bindir: Path) -> None:
    """`pg_ctl promote`: the standby ends recovery and accepts writes (a new timeline); waits until it does."""
    replica._run([str(bindir / "pg_ctl"), "-D", str(replica.data), "-w", "-t", "60", "promote"], "pg_ctl promote")
    (replica.home / STANDBY_MARK).unlink(missing_ok=True)
    deadline = time.monotonic() + 60
    while replica.in_recovery() is not False:
        if time.monotonic() > deadline:
            raise StackNotReady(f"postgres: port {replica.port} still in recovery 60 s after its promotion")
        time.sleep(0.05)


def stop_immediately(cluster: PostgresCluster, bindir: Path) -> int:
    """`pg_ctl stop -m immediate` (no checkpoint, every backend ends at once: a crash as the server sees it);
    the postmaster's pid, gone when this returns."""
    pid = cluster.pid()
    if pid is None:
        raise StackError(f"postgres on port {cluster.port} is not running")
    cluster.stop(bindir, mode="immediate")
    return pid


def _start(cluster: PostgresCluster, bindir: Path, timeout: float = 90.0) -> None:
    """Start it, again after a failed start, for up to `timeout`: a port in the ephemeral range may be held, while
    the server was down, by a client's connection elsewhere ("could not bind ... Address already in use"; seen
    here with the stack on port 33432), until that connection and its TIME-WAIT end."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.start(bindir)
            return
        except StackError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2.0)


def role(cluster: PostgresCluster) -> str:
    """"primary", "replica", or "stopped" (also a server that does not answer)."""
    if cluster.pid() is None:
        return "stopped"
    found = cluster.in_recovery()
    return "stopped" if found is None else ("replica" if found else "primary")


def restore_primary(primary: PostgresCluster, replica: PostgresCluster, bindir: Path, mode: str = "sync") -> None:
    """After a failover (the replica promoted, the primary stopped): the stack as it was, the primary on its own
    port with everything the promoted replica holds, and a fresh replica of it. A clean stop of the promoted
    server, a copy of its data folder into the primary's (no standby.signal: it starts as a primary), then a
    new pg_basebackup for the replica. Nothing is lost: the copy is of a cleanly stopped server."""
    if role(primary) == "primary" and role(replica) in ("replica", "stopped"):
        if role(replica) == "stopped" or not streams(primary):  # stopped, or detached (a test's doing): rebuilt
            make_replica(primary, replica, bindir)
        set_synchronous(primary, mode == "sync")
        return
    if role(replica) != "primary":
        raise StackError(f"postgres: neither port {primary.port} nor {replica.port} is a primary")
    primary.stop(bindir, mode="immediate")
    replica.stop(bindir, mode="fast")
    shutil.rmtree(primary.data, ignore_errors=True)
    primary._run(["cp", "-a", str(replica.data), str(primary.data)], "copy the promoted replica's data")
    for leftover in ("standby.signal", "postmaster.pid"):
        (primary.data / leftover).unlink(missing_ok=True)
    _write_owned(primary, primary.data / "postgresql.auto.conf", "")
    (primary.home / STANDBY_MARK).unlink(missing_ok=True)
    _start(primary, bindir)
    primary.wait_ready()
    set_synchronous(primary, mode == "sync")
    make_replica(primary, replica, bindir)


def _as_root(cluster: PostgresCluster) -> bool:
    return cluster._as_owner(["x"])[0] == "runuser"  # as root the servers run as the `postgres` user


def _write_owned(cluster: PostgresCluster, path: Path, text: str) -> None:
    path.write_text(text)
    if _as_root(cluster):
        shutil.chown(path, "postgres")
