"""Connections to the ledger's database: opening one (checking the ledger's revision), the connections kept
between transactions, and the transaction every ledger read and write runs in."""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
import time
from collections.abc import Iterator
from typing import Any, TypeAlias

import psycopg2
import psycopg2.extensions

from eosbatch.config import Settings, redact
from eosbatch.ledger import errors as ledger_errors
from eosbatch.ledger import revisions

Cursor: TypeAlias = psycopg2.extensions.cursor


def where(settings: Settings) -> str:
    return redact(settings.database_url)  # names the address, never the password


def wait(connection: Any, timeout_s: float | None = None) -> None:
    """Until the asynchronous connection's pending work (connecting, a query) is done; its errors raise.
    `timeout_s` bounds the whole wait (libpq does not enforce connect_timeout on an asynchronous connect)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        state = connection.poll()
        if state == psycopg2.extensions.POLL_OK:
            return
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise psycopg2.OperationalError(f"timeout expired after {timeout_s:.0f} s")
        if state == psycopg2.extensions.POLL_READ:
            select.select([connection.fileno()], [], [], left)
        elif state == psycopg2.extensions.POLL_WRITE:
            select.select([], [connection.fileno()], [], left)
        else:  # pragma: no cover - psycopg2 documents only the three states above
            raise psycopg2.OperationalError(f"unexpected poll state {state}")


def connect(settings: Settings, check_schema: bool = True, asynchronous: bool = False
            ) -> psycopg2.extensions.connection:
    """A connection to the ledger's database, opened within the connect timeout (EOSBATCH_CONNECT_TIMEOUT_S;
    a connect_timeout in the URL wins). The first connection of a process also checks the ledger's
    revision, so that a database without the ledger, or with an older one, says "run eosbatch db upgrade"
    before anything else happens. `asynchronous`: a psycopg2 asynchronous connection, ready (see
    eosbatch.ledger.stream), without the revision check."""
    timeout = max(2, math.ceil(settings.connect_timeout_s))  # libpq: whole seconds, at least 2
    options: dict[str, Any] = {} if "connect_timeout=" in settings.psycopg_dsn else {"connect_timeout": timeout}
    try:
        if asynchronous:
            connection = psycopg2.connect(settings.psycopg_dsn, application_name="eosbatch", async_=1, **options)
            try:
                wait(connection, timeout)
            except BaseException:
                connection.close()  # its socket, half-connected, would stay open until the object is collected
                raise
            return connection
        connection = psycopg2.connect(settings.psycopg_dsn, application_name="eosbatch", **options)
    except psycopg2.Error as exc:
        # libpq's message can include the URL; say where without the password.
        raise ledger_errors.connect_error(exc, where(settings), timeout) from None
    if check_schema:
        revisions.check_once(connection, settings, where(settings))
    return connection


# Connections a finished transaction left open, per process and database: a runner makes about a dozen
# short transactions per batch, and a new connection (a backend process) costs ~5 ms of it each time.
_IDLE_KEPT = 2
_idle_lock = threading.Lock()
_idle: dict[tuple[int, str], list[psycopg2.extensions.connection]] = {}
_inherited: list[Any] = []  # a forked child's copies of its parent's connections: never used, never closed


def _after_fork() -> None:
    # Closing (or freeing) a copy would send the server a Terminate on the parent's socket.
    _inherited.extend(_idle.values())
    _idle.clear()


os.register_at_fork(after_in_child=_after_fork)


def _take(settings: Settings) -> psycopg2.extensions.connection:
    """An idle connection that still answers (the server may have restarted since), else a new one."""
    with _idle_lock:
        kept = _idle.get((os.getpid(), settings.psycopg_dsn))
        connection = kept.pop() if kept else None
    if connection is not None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            connection.rollback()
        except psycopg2.Error:
            connection.close()
            return connect(settings)
        # A migration may have run since: as connect does.
        revisions.check_once(connection, settings, where(settings))
        return connection
    return connect(settings)


def _give_back(settings: Settings, connection: psycopg2.extensions.connection) -> None:
    if not connection.closed and connection.status == psycopg2.extensions.STATUS_READY:
        with _idle_lock:
            kept = _idle.setdefault((os.getpid(), settings.psycopg_dsn), [])
            if len(kept) < _IDLE_KEPT:
                kept.append(connection)
                return
    connection.close()


@contextlib.contextmanager
def transaction(settings: Settings, dry_run: bool = False) -> Iterator[Cursor]:
    """One PostgreSQL transaction: committed when the block ends, rolled back on any exception. A `dry_run`
    transaction is rolled back when the block ends too: what it wrote is seen inside it only.

    Errors about the database itself (unreachable, busy, access, no ledger) leave as eosbatch errors;
    constraint violations and data errors stay psycopg2's, for the caller to decide. The connection is
    kept for the process's next transaction when this one ended well, closed otherwise."""
    connection = _take(settings)
    ended_well = False
    try:
        with connection, connection.cursor() as cursor:
            yield cursor
            if dry_run:
                connection.rollback()
        ended_well = True
    except psycopg2.Error as exc:
        mapped = ledger_errors.to_eosbatch(exc, where(settings))
        if mapped is None:
            raise
        raise mapped from exc
    finally:
        if ended_well:
            _give_back(settings, connection)
        else:
            connection.close()


def psql_command(settings: Settings, command: str | None = None, file: str | None = None
                 ) -> tuple[list[str], dict[str, str]]:
    """psql's arguments and environment for the ledger's database (`eosbatch db psql`): the connection as a
    conninfo argument without its passwords, which go in the environment (PGPASSWORD, PGSSLPASSWORD), never
    in a process's arguments; stopping at the first error, so that a script's failure is psql's exit code."""
    params = psycopg2.extensions.parse_dsn(settings.psycopg_dsn)
    env = {name: params.pop(key) for key, name in (("password", "PGPASSWORD"), ("sslpassword", "PGSSLPASSWORD"))
           if key in params}
    argv = ["psql", psycopg2.extensions.make_dsn(**params), "-v", "ON_ERROR_STOP=1"]
    if command is not None:
        argv += ["-c", command]
    if file is not None:
        argv += ["-f", file]
    return argv, env
