"""ledger.stream.chunks: publish's outbox reads, with the next chunk in flight on an asynchronous
connection (one thread), against the real PostgreSQL."""

from __future__ import annotations

import socket
import time

import psycopg2
import pytest
from psycopg2 import sql

from eosbatch.ledger import store, stream
from eosbatch.ledger.exceptions import LedgerUnavailable
from tests.chaos.control import wait_until

pytestmark = [pytest.mark.integration]

NUMBERS = sql.SQL("SELECT i, ('r' || i)::text, NULL::text FROM generate_series(1, %s) i ORDER BY i")


def _streams(settings) -> int:
    """Backends of this database that hold the stream's cursor open."""
    with store.transaction(settings) as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND query LIKE %s", ("%eosbatch_stream%",))
        return int(cur.fetchone()[0])


@pytest.mark.parametrize("total", [0, 1, 9, 10, 11, 1234])
def test_every_row_arrives_once_in_order_in_chunks_of_the_size(settings, total) -> None:
    got = list(stream.chunks(settings, NUMBERS, (total,), 10))
    assert [len(c) for c in got] == [10] * (total // 10) + ([total % 10] if total % 10 else [])
    assert [row for chunk in got for row in chunk] == [(i, f"r{i}", None) for i in range(1, total + 1)]


def test_text_as_bytes_arrives_undecoded(settings) -> None:
    [[row]] = list(stream.chunks(settings, sql.SQL("SELECT 'é€'::text, 7::text, NULL::text WHERE %s"), (True,),
                                 5, text_as_bytes=True))
    assert row == ("é€".encode(), b"7", None)


def test_the_next_chunk_is_computed_while_the_caller_works_on_this_one(settings) -> None:
    """Each row takes PostgreSQL 0.2 s: with the next chunk in flight, working 0.4 s on a chunk hides it."""
    slow = sql.SQL("SELECT i, pg_sleep(0.2)::text FROM generate_series(1, %s) i")
    chunks = stream.chunks(settings, slow, (4,), 2)
    next(chunks)  # rows 1-2; rows 3-4 are being computed from now on
    time.sleep(0.6)  # the caller's work
    started = time.monotonic()
    rest = list(chunks)
    assert [len(c) for c in rest] == [2]
    assert time.monotonic() - started < 0.3, "rows 3-4 (0.4 s of PostgreSQL's work) were ready when asked for"


def test_stopping_early_closes_the_connection_and_its_transaction(settings) -> None:
    chunks = stream.chunks(settings, NUMBERS, (100,), 10)
    assert len(next(chunks)) == 10
    assert _streams(settings) == 1
    chunks.close()
    wait_until(lambda: _streams(settings) == 0, 10, "the stream's backend to end")  # it exits asynchronously


def test_a_query_error_is_postgresql_s_and_ends_the_stream(settings) -> None:
    bad = sql.SQL("SELECT 1 / (i - 15) FROM generate_series(1, %s) i")
    chunks = stream.chunks(settings, bad, (30,), 10)
    assert len(next(chunks)) == 10  # rows 1-10; 11-20 are in flight and fail at row 15
    with pytest.raises(psycopg2.errors.DivisionByZero):
        next(chunks)
    wait_until(lambda: _streams(settings) == 0, 10, "the stream's backend to end")


def test_a_lost_connection_is_a_transient_error(settings) -> None:
    chunks = stream.chunks(settings, NUMBERS, (100,), 10)
    next(chunks)
    with store.transaction(settings) as cur:
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND query LIKE %s", ("%eosbatch_stream%",))
        assert cur.rowcount == 1
    with pytest.raises(LedgerUnavailable, match="PostgreSQL at"):
        list(chunks)


def test_an_asynchronous_connect_that_gets_no_answer_fails_in_time_and_closes_its_socket(settings) -> None:
    """libpq does not bound an asynchronous connect: stream.wait does (EOSBATCH_CONNECT_TIMEOUT_S), and the
    half-open connection it gives up on is closed, not left to the garbage collector: the error's traceback
    holds it for as long as someone keeps the error (an overlapped run hands its stages' errors on)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    try:
        port = server.getsockname()[1]
        silent = settings._replace(database_url=f"postgresql+psycopg2://eosbatch@127.0.0.1:{port}/eosbatch",
                                   connect_timeout_s=2)
        chunks = stream.chunks(silent, NUMBERS, (10,), 10)
        started = time.monotonic()
        with pytest.raises(LedgerUnavailable, match="no answer within 2 s") as kept:
            next(chunks)
        assert 2 <= time.monotonic() - started < 10
        accepted, _ = server.accept()
        with accepted:
            accepted.settimeout(5)
            assert accepted.recv(1024, socket.MSG_PEEK) != b"", "the client's startup packet"
            while accepted.recv(65536):
                pass  # read to the end: b"" once the client closed its end, a timeout if it never does
        assert kept.value.__traceback__ is not None  # held all along, with its frames: they kept no socket open
    finally:
        server.close()
