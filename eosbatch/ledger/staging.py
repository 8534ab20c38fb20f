"""Staging's COPY, as the Spark executors run it: one task's rows, PostgreSQL's binary COPY stream
(encoded by pgpq), into a staging table over a connection of the task's own, committed at once. Importing
this module loads nothing: an executor loads psycopg2 when it copies."""

from __future__ import annotations

from typing import IO

DEAD_LETTERS_STAGE = "eosbatch.staged_dead_letters"  # the malformed records' COPY target, every column


def copy_into_stage(dsn: str, target: str, stream: IO[bytes]) -> None:
    """COPY `stream` into `target`: `table (columns)` as SQL text the driver rendered
    (sinks.stage_copy_target), or DEAD_LETTERS_STAGE."""
    import psycopg2

    connection = psycopg2.connect(dsn, application_name="eosbatch-executor")
    try:
        with connection, connection.cursor() as cursor:
            cursor.copy_expert(f"COPY {target} FROM STDIN (FORMAT binary)", stream)
    finally:
        connection.close()
