"""Moving a million records through Python (publish streams the outbox from PostgreSQL to Kafka).

Every record makes a few tuples and lists. Python's cyclic garbage collector, triggered by allocations,
kept scanning them: 3.5 of the 7.5 seconds it took to read a million outbox records, and 4 of the 13 s it
took to read and produce them. Those objects form no cycles (reference counting frees each one as soon as
it is produced), so the collector pauses meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block (as it was before, after it)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_ahead(fetch: Callable[[], list[T]], depth: int = 2) -> Iterator[list[T]]:
    """The chunks `fetch` returns, until an empty one, each fetched in a thread while the caller works on
    the one before: publish's reads wait on PostgreSQL (a scan, row_to_json) and its produces on Python, so
    overlapped they take the longer of the two, not their sum. A failure of `fetch` is raised here, at the
    chunk it would have been; a caller that stops early stops the thread (after at most one more fetch)."""
    ready: queue.Queue[list[T] | BaseException] = queue.Queue(maxsize=depth)
    stopped = threading.Event()

    def hand_over(item: list[T] | BaseException) -> None:
        while not stopped.is_set():
            try:
                ready.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def reader() -> None:
        try:
            while not stopped.is_set():
                chunk = fetch()
                hand_over(chunk)
                if not chunk:
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            hand_over(exc)

    thread = threading.Thread(target=reader, name="eosbatch-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return
            yield item
    finally:
        stopped.set()
        thread.join()
