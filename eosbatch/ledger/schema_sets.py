"""The writer schemas each batch decoded with (eosbatch.formats: Avro), kept in the batch's `writers` jsonb
under "schemas": {role: {schema id: schema JSON text, or null for an id that was unknown}}. No table of their
own: a batch's set is read with its row, and the pipeline's earlier sets with one query."""

from __future__ import annotations

import json
from collections.abc import Mapping

from eosbatch.ledger.connection import Cursor

KEY = "schemas"  # the key of the batch's `writers` jsonb that holds its sets


def used_schemas(cur: Cursor, pipeline: str) -> dict[str, dict[int, str]]:
    """{role: {schema id: schema}} of every id some batch of the pipeline decoded with a known schema: the
    first batch's (by id) when several did (they agree: each took an earlier batch's first)."""
    cur.execute("SELECT r.role, s.schema_id, (array_agg(s.text ORDER BY b.id))[1] FROM eosbatch.batches b "
                "CROSS JOIN LATERAL jsonb_each(b.writers -> 'schemas') r(role, ids) "
                "CROSS JOIN LATERAL jsonb_each_text(r.ids) s(schema_id, text) "
                "WHERE b.pipeline = %s AND b.writers ? 'schemas' AND jsonb_typeof(r.ids) = 'object' "
                "AND s.text IS NOT NULL GROUP BY r.role, s.schema_id", (pipeline,))
    found: dict[str, dict[int, str]] = {}
    for role, schema_id, text in cur.fetchall():
        found.setdefault(role, {})[int(schema_id)] = text
    return found


def pin_schemas(cur: Cursor, batch_id: int, sets: Mapping[str, Mapping[str, str | None]]) -> bool:
    """Keep `sets` (JSON-ready: ids as strings) with a planned batch, before its records are decoded with them,
    so that a retried process decodes as this one does; False when the batch is no longer planned."""
    cur.execute("UPDATE eosbatch.batches SET writers = coalesce(writers, '{}'::jsonb) || jsonb_build_object(%s, "
                "%s::jsonb), updated_at = now() WHERE id = %s AND state = 'planned'", (KEY, json.dumps(sets), batch_id))
    return cur.rowcount == 1
