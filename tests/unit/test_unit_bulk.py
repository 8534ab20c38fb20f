"""read_ahead: publish's outbox reads, fetched a chunk ahead in a thread of their own."""

from __future__ import annotations

import threading

import pytest

from eosbatch.bulk import read_ahead


def _chunks(n: int, size: int = 3) -> list[list[int]]:
    return [list(range(i * size, (i + 1) * size)) for i in range(n)]


def test_every_chunk_arrives_once_in_order_and_the_reader_ends() -> None:
    source = iter([*_chunks(50), []])
    threads = set(threading.enumerate())
    got = list(read_ahead(lambda: next(source)))
    assert got == _chunks(50)
    assert set(threading.enumerate()) <= threads  # its thread is gone once the chunks are


def test_the_next_chunk_is_fetched_while_the_caller_works_on_this_one() -> None:
    fetched = threading.Semaphore(0)
    source = iter([*_chunks(3), []])

    def fetch() -> list[int]:
        chunk = next(source)
        fetched.release()
        return chunk

    chunks = read_ahead(fetch)
    assert next(chunks) == _chunks(1)[0]
    # The caller holds chunk 1 and asks for nothing: the reader fetches chunk 2 meanwhile.
    assert fetched.acquire(timeout=5) and fetched.acquire(timeout=5)
    assert list(chunks) == _chunks(3)[1:]


def test_a_failed_fetch_is_raised_where_its_chunk_would_have_been() -> None:
    calls = iter([[1], [2]])

    def fetch() -> list[int]:
        try:
            return next(calls)
        except StopIteration:
            raise ConnectionError("server closed the connection") from None

    chunks = read_ahead(fetch)
    assert next(chunks) == [1] and next(chunks) == [2]
    with pytest.raises(ConnectionError, match="server closed"):
        next(chunks)


def test_a_caller_that_stops_early_stops_the_reader() -> None:
    fetches = 0

    def endless() -> list[int]:
        nonlocal fetches
        fetches += 1
        return [fetches]

    chunks = read_ahead(endless, depth=2)
    assert next(chunks) == [1]
    chunks.close()  # what a failed produce does to the generator: its finally joins the reader
    assert not [t for t in threading.enumerate() if t.name == "eosbatch-read-ahead"]
    assert fetches <= 4  # the one handed over, the queue's two, at most one more in flight
