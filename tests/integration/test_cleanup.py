"""A finished batch's rows leave staging and the outbox by TRUNCATE when they are all the table holds (no
dead rows for autovacuum and the next scans), else by DELETE: never another batch's rows, never waiting for
a transaction that uses the table."""

from __future__ import annotations

import time

import psycopg2
import pytest
from psycopg2 import sql

from eosbatch.ledger import cleanup, lanes, store

pytestmark = [pytest.mark.integration]


def _state(settings, table: sql.Identifier) -> tuple[dict[int, int], int]:
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("SELECT batch_id, count(*) FROM {} GROUP BY batch_id").format(table))
        rows = dict(cur.fetchall())
        cur.execute("SELECT pg_relation_filenode(%s::regclass)", (".".join(table.strings),))
        return rows, cur.fetchone()[0]


def _add(settings, table: sql.Identifier, batch_id: int, n: int) -> None:
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("INSERT INTO {} SELECT %s, g::text FROM generate_series(1, %s) g").format(table),
                    (batch_id, n))


def test_a_batch_rows_go_by_truncate_only_when_alone(settings, unique) -> None:
    table = sql.Identifier("public", f"cleanup_{unique}")
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} (batch_id bigint, v text)").format(table))
    _add(settings, table, 1, 100)
    _add(settings, table, 2, 50)
    _, file_before = _state(settings, table)

    with store.transaction(settings) as cur:  # batch 2's rows are there too: a DELETE of batch 1's only
        cleanup.delete_batch_rows(cur, table, "batch_id", 1)
    rows, file_after = _state(settings, table)
    assert rows == {2: 50} and file_after == file_before

    with store.transaction(settings) as cur:  # alone: TRUNCATE (a new, empty file; no dead rows)
        cleanup.delete_batch_rows(cur, table, "batch_id", 2)
    rows, file_truncated = _state(settings, table)
    assert rows == {} and file_truncated != file_after

    _add(settings, table, 3, 10)
    other = psycopg2.connect(settings.psycopg_dsn)
    other.set_session(isolation_level="REPEATABLE READ")
    try:
        with other.cursor() as cursor:  # a transaction reading the table (a publish's cursor, say) stays open
            cursor.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
            assert cursor.fetchone() == (10,)
            started = time.monotonic()
            with store.transaction(settings) as cur:
                cleanup.delete_batch_rows(cur, table, "batch_id", 3)
            assert time.monotonic() - started < 5, "the cleanup waited for the reader's lock"
            rows, file_now = _state(settings, table)
            assert rows == {} and file_now == file_truncated  # a DELETE: the reader's table was not swapped
            cursor.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
            assert cursor.fetchone() == (10,)  # its snapshot still reads what it read
    finally:
        other.close()
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("DROP TABLE {}").format(table))


def test_a_published_batch_rows_wait_for_a_truncate_while_another_batch_is_open(settings, unique) -> None:
    """A pipeline's own table under overlapped batches: the finished batch's rows stay while the next batch,
    still open, has rows there (no DELETE, no dead rows), at most one finished batch's per table; the next
    finalize that cannot TRUNCATE deletes every finished batch's rows, never an open batch's; the first that
    finds no open batch's rows TRUNCATEs the lot."""
    pipeline = f"p_{unique}"
    table = sql.Identifier("public", f"cleanup_{unique}")
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} (batch_id bigint, v text)").format(table))
        lanes.lock_pipeline(cur, pipeline)
        ids = [store.create_batch(cur, pipeline, "regular", 0, [], "g").id for _ in range(4)]
    first, second, third, fourth = ids
    leftover = 10_000 + first  # a batch no longer in the ledger's open ones: what a crashed runner left
    for batch_id, n in ((leftover, 5), (first, 100), (second, 50), (third, 20)):
        _add(settings, table, batch_id, n)

    def finish(batch_id: int) -> None:
        with store.transaction(settings) as cur:
            cur.execute("UPDATE eosbatch.batches SET state = 'aborted' WHERE id = %s", (batch_id,))
            cleanup.delete_batch_rows(cur, table, "batch_id", batch_id, pipeline)

    try:
        _, file_before = _state(settings, table)
        finish(first)  # the second and third are open with rows there: the first's rows wait
        rows, file_now = _state(settings, table)
        assert rows == {leftover: 5, first: 100, second: 50, third: 20} and file_now == file_before

        other = psycopg2.connect(settings.psycopg_dsn)
        try:
            with other.cursor() as cursor:  # a reader holds the table: no TRUNCATE, whatever it finds
                cursor.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
                finish(second)  # one batch waits already: every finished batch's rows go, by DELETE
                rows, file_now = _state(settings, table)
                assert rows == {third: 20} and file_now == file_before
                other.rollback()
        finally:
            other.close()

        _add(settings, table, fourth, 7)
        finish(third)  # the fourth is open with rows: the third's rows wait again
        assert _state(settings, table)[0] == {third: 20, fourth: 7}
        finish(fourth)  # nothing open has rows: TRUNCATE, the waiting rows with them
        rows, file_now = _state(settings, table)
        assert rows == {} and file_now != file_before
    finally:
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("DROP TABLE {}").format(table))
