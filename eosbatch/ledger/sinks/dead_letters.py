"""The SQL that moves rows to eosbatch.dead_letters, built without I/O: a batch's staged dead letters, and the
result rows whose output record is too big to publish (commit.py runs both)."""

from __future__ import annotations

from psycopg2 import sql

from eosbatch.ledger.sinks import rendering
from eosbatch.ledger.sinks.names import AMBIGUOUS_COLUMN, listed, position_columns
from eosbatch.pipeline import KafkaOutput, Pipeline

# Parameters: the pipeline's name, the batch's id, its dead letters' writers. A record two writers staged (a
# re-run Spark stage) is copied once. A record recorded again (a reprocess, a redrive that failed again) keeps its
# id, gets the new reason, and waits for a redrive again (a reprocess may fail a record a redrive took).
COPY_STAGED = """
INSERT INTO eosbatch.dead_letters (pipeline, batch_id, topic, partition, incarnation, "offset", key, value, error,
                                   "timestamp", timestamp_type)
SELECT DISTINCT ON (d.topic, d.partition, d."offset")
       %s, d.batch_id, d.topic, d.partition, COALESCE(r.incarnation, 0), d."offset", d.key, d.value, d.error,
       d."timestamp", d.timestamp_type
  FROM eosbatch.staged_dead_letters d
  LEFT JOIN eosbatch.batch_ranges r ON r.batch_id = d.batch_id AND r.topic = d.topic AND r.partition = d.partition
 WHERE d.batch_id = %s AND d.writer = ANY(%s)
 ORDER BY d.topic, d.partition, d."offset"
    ON CONFLICT (pipeline, topic, partition, incarnation, "offset")
    DO UPDATE SET batch_id = EXCLUDED.batch_id, error = EXCLUDED.error, created_at = now(), redriven_by = NULL,
                  "timestamp" = COALESCE(EXCLUDED."timestamp", dead_letters."timestamp"),
                  timestamp_type = COALESCE(EXCLUDED.timestamp_type, dead_letters.timestamp_type)"""


def too_big(pipeline: Pipeline, output: KafkaOutput, out: list[str], size: sql.Composable,
            fits: sql.Composable) -> sql.Composed:
    """INSERT into the dead letters of the result rows (in `all_rows`) whose output record does not `fit`,
    each against its source position. A row without one source position (an aggregate) is recorded against
    the output topic, partition -1 and a negative offset of its own. Parameters: pipeline, batch, max_bytes."""
    plain = sql.SQL("SELECT {} FROM all_rows").format(listed(out))  # without the ambiguity flag
    position = position_columns(out)
    topic = sql.SQL("r.{}").format(sql.Identifier("topic")) if "topic" in position else sql.Literal(
        pipeline.source.topics[0] if position else output.topic)
    partition = sql.SQL("r.{}").format(sql.Identifier("partition")) if position else sql.SQL("-1")
    where = (sql.SQL("{p}, COALESCE((SELECT br.incarnation FROM eosbatch.batch_ranges br WHERE br.batch_id = "
                     "%(batch)s AND br.topic = {t} AND br.partition = {p}), 0), r.{o}").format(
                         p=partition, t=topic, o=sql.Identifier("offset")) if position
             else sql.SQL("-1, 0, -(%(batch)s::bigint * 1000000 + row_number() OVER ())"))
    return sql.SQL(
        'INSERT INTO eosbatch.dead_letters (pipeline, batch_id, topic, partition, incarnation, "offset", key, '
        "value, error) "
        "SELECT %(pipeline)s, %(batch)s, {topic}, {where}, convert_to({okey}, 'UTF8'), "
        "convert_to(row_to_json(r.*)::text, 'UTF8'), 'output record of ' || {size} || ' bytes exceeds the "
        "output topic''s limit of ' || %(max_bytes)s || ' bytes (max.message.bytes, message.max.bytes, less "
        "headers): not stored in the sink, not published' FROM ({plain}) r WHERE NOT {fits} "
        'ON CONFLICT (pipeline, topic, partition, incarnation, "offset") DO UPDATE SET '
        "batch_id = EXCLUDED.batch_id, error = EXCLUDED.error, redriven_by = NULL RETURNING 1").format(
            topic=topic, where=where, size=size, fits=fits, plain=plain, okey=rendering.key(output, "r"))


def move_with_too_big(pipeline: Pipeline, output: KafkaOutput, rows: sql.Composable, out: list[str],
                      size: sql.Composable, fits: sql.Composable, write: sql.Composable,
                      outbox: sql.Composable) -> sql.Composed:
    """The commit's statement when some output record is over the limit: the flagged result `rows` that fit
    go to the sink (`write`) and the `outbox`, the others to the dead letters. It returns the rows written to
    the sink, to the outbox, to the dead letters, and how many result rows are flagged ambiguous."""
    return sql.SQL("WITH all_rows AS ({rows}), batch_rows AS (SELECT r.* FROM ({plain}) r WHERE {fits}), "
                   "too_big AS ({too_big}), changed AS ({upsert}), outboxed AS ({outbox}) "
                   "SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM outboxed), "
                   "(SELECT count(*) FROM too_big), (SELECT count(*) FROM all_rows WHERE {ambiguous})").format(
        rows=rows, plain=sql.SQL("SELECT {} FROM all_rows").format(listed(out)), fits=fits,
        too_big=too_big(pipeline, output, out, size, fits), upsert=write, outbox=outbox,
        ambiguous=sql.Identifier(AMBIGUOUS_COLUMN))
