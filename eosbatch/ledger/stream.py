"""Reading a large query result in chunks, with the next chunk in flight while the caller works.

Publish streams a million outbox records from PostgreSQL to Kafka: PostgreSQL scans and renders them
(row_to_json), Python produces them. One after the other they take the sum of both. A thread fetching
ahead overlapped them, but two Python threads contending for the GIL cost 2-2.5 CPU-s more per million
records, which a busy machine (an overlapped run) pays in wall time. Here one thread does it all: an
asynchronous connection sends the next FETCH before the caller gets this chunk, PostgreSQL computes it
meanwhile, and its rows are parsed when the caller asks for them.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import psycopg2
import psycopg2.extensions
from psycopg2 import sql

from eosbatch.config import Settings
from eosbatch.ledger import errors as ledger_errors
from eosbatch.ledger.connection import connect, wait, where
from eosbatch.ledger.exceptions import LedgerUnavailable


def chunks(settings: Settings, query: sql.Composable, params: tuple[Any, ...] | dict[str, Any], size: int,
           text_as_bytes: bool = False) -> Generator[list[tuple[Any, ...]], None, None]:
    """The query's rows, `size` at a time, from a cursor in a read-only transaction of a connection of its
    own. While the caller works on a chunk, PostgreSQL computes the next one. `text_as_bytes`: text arrives
    as bytes, undecoded. Stopping early (closing the generator) closes the connection, and with it the
    transaction. PostgreSQL's errors are mapped as everywhere else (ledger.errors)."""
    connection = connect(settings, asynchronous=True)
    try:
        cursor = connection.cursor()
        if text_as_bytes:
            psycopg2.extensions.register_type(psycopg2.extensions.BYTES, cursor)
        fetch = sql.SQL("FETCH FORWARD {} FROM eosbatch_stream").format(sql.Literal(size))

        def run(statement: sql.Composable, args: tuple[Any, ...] | dict[str, Any] | None = None) -> None:
            cursor.execute(statement, args)
            wait(connection)

        run(sql.SQL("BEGIN READ ONLY"))
        run(sql.SQL("DECLARE eosbatch_stream NO SCROLL CURSOR FOR {}").format(query), params)
        run(fetch)
        rows = cursor.fetchall()
        while rows:
            if len(rows) < size:  # the last one: nothing more to ask for
                yield rows
                return
            cursor.execute(fetch)  # sent: PostgreSQL computes the next chunk while the caller works on this one
            yield rows
            wait(connection)
            rows = cursor.fetchall()
    except psycopg2.Error as exc:
        mapped = ledger_errors.to_eosbatch(exc, where(settings))
        if mapped is None:
            raise
        raise mapped from exc
    except OSError as exc:  # select on a connection that went away
        raise LedgerUnavailable(f"PostgreSQL at {where(settings)}: {exc}") from exc
    finally:
        connection.close()
