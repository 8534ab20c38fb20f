"""Publish and finalize: a committed batch's outbox goes to Kafka in one transaction with its marker; then
the ledger marks it published and drops its staging and outbox rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from psycopg2 import sql

from eosbatch import config, faults
from eosbatch.bulk import paused_gc
from eosbatch.context import Context
from eosbatch.exceptions import Fenced, TerminalError
from eosbatch.kafka import avro, marker, record
from eosbatch.kafka.exceptions import MarkerExpired, TransactionOutcomeUnknown
from eosbatch.kafka.publisher import publishing
from eosbatch.kafka.record import Headers, Outgoing
from eosbatch.ledger import cleanup, lanes, sinks, store, stream
from eosbatch.outputs import AvroValue
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.recovery import marker_metadata, publish_action
from eosbatch.steps.shared import check_output_topic, transactional_id
from eosbatch.steps.upkeep import compact_due

OUTBOX_CHUNK = 5_000  # records per fetch from the outbox (bounded memory: one chunk in flight, one in use)


def _outbox(settings: config.Settings, pipeline: Pipeline, batch: store.Batch, common: Headers
            ) -> Iterator[Outgoing]:
    """Stream the batch's output records, each with the `common` headers and its own, from the logged outbox,
    a chunk at a time with the next one in flight (bounded memory; ledger.stream). Read in the table's
    order, not seq's: sorting a million rows cost seconds, and nothing needs the order (each record carries
    its seq as a header). Each record's header list is built in one go (see TransactionalPublisher.produce)."""
    if batch.commit_seq is None:  # committed by an older eosbatch: its output is computed from staging
        connection = store.connect(settings)
        try:
            yield from _legacy_outbox(connection, pipeline, batch, common)
        finally:
            connection.close()
        return
    if batch.outbox_columns is not None:
        query: sql.Composable = sinks.outbox_query(pipeline, batch.outbox_columns)
        copied, encode = record_shape(pipeline)
    else:  # committed before the typed outbox (ledger revision 0008): its records are JSON already
        query, copied, encode = sinks.json_outbox_query(), (), None
    # Text as bytes, numbers rendered by the server: no decoding and encoding per field here.
    yield from record.outgoing(stream.chunks(settings, query, (batch.id,), OUTBOX_CHUNK, text_as_bytes=True),
                               pipeline.source.topics, common, copied, encode)


def record_shape(pipeline: Pipeline) -> tuple[tuple[str, ...], Callable[[Sequence[Any]], bytes] | None]:
    """The headers a record copies (names, in the order outbox.py selects their columns) and the function
    encoding its value (None: the value is JSON text already)."""
    output = pipeline.output
    assert output is not None
    encode = avro.encoder(output.value) if isinstance(output.value, AvroValue) else None
    return tuple(output.headers), encode


def _legacy_outbox(connection: Any, pipeline: Pipeline, batch: store.Batch, common: Headers
                   ) -> Iterator[Outgoing]:
    with connection.cursor() as probe:
        query = sinks.legacy_outbox(probe, pipeline, batch)
    if query is None:
        return
    with connection.cursor(name=f"eosbatch_outbox_{batch.id}") as cursor:
        cursor.itersize = 5_000
        cursor.execute(query, {"batch": batch.id, "writers": batch.writer_tags("sink")})
        for key, value in cursor:
            yield (None if key is None else key.encode()), value.encode(), common


def publish(ctx: Context, batch_id: int, epoch: int | None = None, ignore_expired_marker: bool = False
            ) -> store.Batch:
    """Publish a committed batch in one Kafka transaction together with its marker; then finalize."""
    outcome = publish_to_kafka(ctx, batch_id, epoch, ignore_expired_marker)
    return finalize(ctx, batch_id, outcome)


def publish_to_kafka(ctx: Context, batch_id: int, epoch: int | None = None, ignore_expired_marker: bool = False
                     ) -> int | None:
    """The Kafka half of publish: see `_publish_to_kafka`. A terminal failure of a committed batch (the output
    topic deleted, no write permission, an expired marker) is recorded on the batch, so `status` shows why
    its lane is stuck until the operator acts; fencing is not a failure of the batch and is not recorded.

    A Kafka call whose outcome is unknown (TransactionOutcomeUnknown: EndTxn, AddPartitionsToTxn or
    TxnOffsetCommit timed out, or its connection was lost) left its producer abandoned, neither retried nor
    aborted. The publish then starts once more from the top: the lane's epoch checked, a new producer whose
    init_transactions settles the transaction (the coordinator completes or aborts it and bumps the epoch),
    only then the marker read; it finalizes the batch, or publishes it again under the new epoch. A second
    unknown outcome is left to the next run, whose recovery does the same (docs/design.md, failure matrix)."""
    try:
        try:
            return _publish_to_kafka(ctx, batch_id, epoch, ignore_expired_marker)
        except TransactionOutcomeUnknown as exc:
            ctx.log(f"batch {batch_id}: ambiguous transaction outcome ({exc}); settling it with a new producer "
                    "(init_transactions), then reading the marker")
        # Out of the except block: the traceback's frames, and with them the abandoned producer, are freed now.
        return _publish_to_kafka(ctx, batch_id, epoch, ignore_expired_marker)
    except TerminalError as exc:
        if not isinstance(exc, Fenced):
            store.record_error(ctx.settings, batch_id, f"publish: {type(exc).__name__}: {exc}")
        raise


def _publish_to_kafka(ctx: Context, batch_id: int, epoch: int | None, ignore_expired_marker: bool) -> int | None:
    """The Kafka half of publish: the output and the marker in one transaction; the batch stays committed
    until `finalize`. Returns the records produced, or None when an earlier run had published them.

    `epoch` is the runner's own epoch of the lane (default: the batch's): a runner that was frozen and
    resumed finds a newer epoch here and stops *before* init_transactions(), which would otherwise fence
    the live runner's publisher."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        if batch.state == "committed":
            lanes.check_lane_epoch(cur, batch, batch.epoch if epoch is None else epoch)
            age = store.seconds_since_commit(cur, batch_id)
    if batch.state == "published":
        log(f"batch {batch_id}: already published")
        return None
    if batch.state != "committed":
        raise TerminalError(f"batch {batch_id} is {batch.state}; only a committed batch can be published")
    if pipeline.output is not None and batch.publish:
        check_output_topic(settings, pipeline)
    produced: int | None = None  # unknown when an earlier run published: the ledger keeps it unset
    with publishing(settings, transactional_id(pipeline, batch),
                    owner=f"batch {batch_id} of pipeline {pipeline.name!r}") as publisher:
        found = marker.read(settings, batch.marker_group, [r.tp for r in batch.ranges])
        action = publish_action(batch.id, batch.ranges, found, legacy=batch.commit_seq is None,
                                age_seconds=age, retention_seconds=settings.marker_retention_s)
        if action == "finalize_only":
            log(f"batch {batch_id}: its marker shows it published already; finalizing only")
        elif action == "marker_expired" and not ignore_expired_marker:
            raise MarkerExpired(
                f"batch {batch_id} was committed {(age or 0) / 3600:.1f} h ago and its marker (group "
                f"{batch.marker_group}) is gone: Kafka expires a group's offsets after offsets.retention.minutes "
                f"({settings.marker_retention_s / 60:.0f} min assumed, {config.MARKER_RETENTION}), so "
                "eosbatch cannot tell whether it was published. Look for records with header "
                f"{record.BATCH}={batch_id} in the output topic; then `eosbatch publish {pipeline.name} "
                f"{batch_id} --published` (they are there) or `--republish` (they are not)")
        else:
            publisher.begin()
            produced = 0
            if pipeline.output is not None and batch.publish:
                headers = record.batch_headers(pipeline.name, batch_id, batch.commit_seq or 0, publisher.attempt)
                with paused_gc():
                    produced = publisher.produce(pipeline.output.topic, _outbox(settings, pipeline, batch, headers), [])
                if batch.outbox_records is not None and produced != batch.outbox_records:
                    publisher.abort()
                    raise TerminalError(f"batch {batch_id}: the outbox held {produced} records, the commit wrote "
                                        f"{batch.outbox_records}; nothing was published")
            publisher.commit(settings, batch.marker_group, list(batch.ranges), marker_metadata(batch_id))
            faults.point("publish.after_kafka_commit")
            log(f"batch {batch_id}: published {produced} records")
    return produced


def finalize(ctx: Context, batch_id: int, produced: int | None = None) -> store.Batch:
    """Mark a published batch so and drop its staging and outbox rows. The published count is the one the
    commit fixed: a batch finalized from its marker (an earlier run produced it) gets it too."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id, lock=True)
        if batch.state == "published":
            return batch
        count = batch.outbox_records if batch.outbox_records is not None else produced
        if not (pipeline.output is not None and batch.publish):
            count = 0
        fields: dict[str, Any] = {} if count is None else {"published_records": count}
        batch = store.set_state(cur, batch, "published", **fields)
        cleanup.delete_staging(cur, batch_id, sinks.stage_table(pipeline), finished=True, pipeline=pipeline.name)
        cleanup.delete_outbox(cur, batch, sinks.outbox_table(pipeline))
    how = "published by an earlier attempt; " if produced is None else ""
    log(f"batch {batch_id}: finalized ({how}{count if count is not None else '?'} output records)")
    if batch.marker_group != pipeline.marker_group:
        # A backfill batch's own marker group has done its job once the ledger says published. If this
        # deletion is lost, the group is only clutter: nothing reads the marker of a published batch.
        marker.delete_group(settings, batch.marker_group, log)
    compact_due(settings, pipeline, batch.commit_seq, log)
    return batch
