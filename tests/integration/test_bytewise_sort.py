"""The commit sorts a batch's text keys as bytes (COLLATE "C") only where that is the order and the grouping the
key's own collation gives: a libc locale of byte order (C, POSIX, C.UTF-8), never an ICU or a language locale."""

from __future__ import annotations

import psycopg2
import pytest
from psycopg2 import sql

from eosbatch import KafkaSource, Pipeline, PostgresSink
from eosbatch.ledger import sinks

pytestmark = [pytest.mark.integration]

# key column -> its definition in staging
KEYS = {"c": 'text COLLATE "C"', "posix": 'varchar(20) COLLATE "POSIX"', "utf8": 'text COLLATE "C.utf8"',
        "icu": 'text COLLATE "und-x-icu"', "number": "integer", "plain": "text"}


def test_only_text_keys_of_byte_order_collations_are_sorted_as_bytes(settings, unique) -> None:
    pipeline = Pipeline(name=f"bytes_{unique}", source=KafkaSource(topics=[f"bytes_in_{unique}"]),
                        transform=lambda df: df, sink=PostgresSink(table=f"bytes_{unique}", key=list(KEYS)))
    connection = psycopg2.connect(settings.psycopg_dsn)
    try:
        with connection.cursor() as cur:
            cur.execute(sql.SQL("CREATE TABLE {} ({} bigint, {} text, {}, v text)").format(
                sinks.stage_table(pipeline), sql.Identifier(sinks.BATCH_COLUMN), sql.Identifier(sinks.WRITER_COLUMN),
                sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(k), sql.SQL(t)) for k, t in KEYS.items())))
            cur.execute("SELECT datcollate FROM pg_database WHERE datname = current_database()")
            plain = cur.fetchone()[0] in sinks.BYTE_ORDER_LOCALES  # the database's own locale decides
            found = sinks.key_columns(cur, pipeline).bytewise
            assert found == {"c", "posix", "utf8"} | ({"plain"} if plain else set())

            # The commit's query sorts those as bytes, the others as they are; and PostgreSQL accepts it.
            rows, _ = sinks.batch_rows(pipeline, [*KEYS, "v"], flagged=True, bytewise=found)
            text = rows.as_string(connection)
            assert '"c" COLLATE "C"' in text and '"icu" COLLATE' not in text and '"number" COLLATE' not in text
            cur.execute(rows, {"batch": 1, "writers": ["w"]})
            assert cur.fetchall() == []
    finally:
        connection.rollback()
        connection.close()
