"""Early publish (EOSBATCH_EARLY_PUBLISH): a batch's records are produced into its open Kafka transaction while
PostgreSQL commits it; eosbatch.protocol.early decides whether that transaction may commit."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from eosbatch import faults
from eosbatch.bulk import paused_gc
from eosbatch.context import Context
from eosbatch.exceptions import EosbatchError, Fenced
from eosbatch.kafka import record
from eosbatch.kafka.publisher import TransactionalPublisher, TxnState, publishing
from eosbatch.ledger import commits, lanes, sinks, store, stream
from eosbatch.protocol import early
from eosbatch.protocol.recovery import marker_metadata
from eosbatch.protocol.states import lane
from eosbatch.steps.committing import commit, commit_once
from eosbatch.steps.publishing import OUTBOX_CHUNK, finalize, publish, record_shape
from eosbatch.steps.shared import check_output_topic, transactional_id


def commit_and_publish(ctx: Context, batch_id: int) -> store.Batch:
    """commit, publish and finalize a staged batch, its records produced into its open Kafka transaction
    while PostgreSQL commits it (EOSBATCH_EARLY_PUBLISH): the commit holds one core, producing takes the other.

    The order that matters stays: the Kafka transaction commits only after PostgreSQL's COMMIT, and only if
    it holds what the outbox holds. Its records are read from staging as the commit will write them
    (sinks.early_outbox_query, None where that is not exact, or where the batch carries tombstones: then
    commit and publish as usual). The outbox
    holds a subset of them (the rows the sink stored, each as it came), so equal counts make them the same
    records; with another count (a row the sink refused as older, one too big to publish), another commit
    sequence number (the other lane committed meanwhile), a failed produce or a failed Kafka commit, the
    early transaction is dropped and the batch published from its outbox, as always. A Kafka failure before
    the commit starts costs nothing either: the batch commits, then publishes. A crash before the Kafka commit
    leaves a transaction that the lane's next init_transactions() aborts: before the COMMIT the batch is
    aborted and planned again, after it the batch is published from its outbox (docs/design.md's failure matrix).
    The transaction stays open for the commit and the publish together: EOSBATCH_TRANSACTION_TIMEOUT_MS must
    cover both."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    query = None
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        if batch.state == "staged" and batch.publish:
            why_not = early.not_for_batch(settings.early_publish, lane(batch.kind))
            if why_not is None:
                lanes.check_lane_epoch(cur, batch, batch.epoch)  # a resumed zombie stops before fencing anyone
                query, why_not = sinks.early_outbox_query(cur, pipeline, batch)
                sequence = commits.upcoming_commit_seq(cur, pipeline.name)
            if why_not:
                log(f"batch {batch_id}: not published early ({why_not}); committing, then publishing from "
                    "the outbox")
    staged: dict[str, Any] = dict(batch.writers or {}) if query is not None else {}
    if tombstones := int(staged.get("tombstones") or 0):
        log(f"batch {batch_id}: not published early: its {tombstones} tombstone(s) delete only the rows the "
            "sink holds when it commits, which no read before the commit can tell")
        query = None
    if query is None or pipeline.output is None:
        commit(ctx, batch_id)
        return publish(ctx, batch_id)
    check_output_topic(settings, pipeline)
    topic = pipeline.output.topic
    params = {"batch": batch.id, "writers": batch.writer_tags("sink")}
    produced: dict[str, Any] = {}

    def produce(publisher: TransactionalPublisher) -> None:
        headers = record.batch_headers(pipeline.name, batch_id, sequence, publisher.attempt)
        chunks = stream.chunks(settings, query, params, OUTBOX_CHUNK, text_as_bytes=True)
        try:
            produced["count"] = publisher.produce(
                topic, record.outgoing(chunks, pipeline.source.topics, headers, *record_shape(pipeline)), [])
        except BaseException as exc:  # noqa: BLE001 - the commit decides; this only drops the early publish
            produced["error"] = f"{type(exc).__name__}: {exc}"  # not the exception: its frames hold the stream
        finally:
            chunks.close()  # its read of staging ends now, not when the garbage collector gets to it

    published = None
    with contextlib.ExitStack() as held:
        try:
            publisher = held.enter_context(publishing(settings, transactional_id(pipeline, batch),
                                                      owner=f"batch {batch_id} of pipeline {pipeline.name!r}"))
            publisher.begin()
        except Fenced:
            raise
        except EosbatchError as exc:  # nothing produced yet: the batch commits, then publishes as usual
            log(f"batch {batch_id}: early publish not started ({exc}); committing, then publishing")
            held.close()
            commit(ctx, batch_id)
            return publish(ctx, batch_id)
        producer = threading.Thread(target=produce, args=(publisher,), name=f"eosbatch-early-publish-{batch_id}")
        with paused_gc():
            producer.start()
            try:
                committed, by_us = commit_once(ctx, batch_id)
            except BaseException:
                producer.join()
                if publisher.state is TxnState.IN_TXN:  # a fatal or fenced producer is closed on the way out
                    with contextlib.suppress(EosbatchError):
                        publisher.abort()
                raise
            producer.join()
        why = early.drop_reason(by_us, produced.get("error"), committed.outbox_records, produced.get("count"),
                                committed.commit_seq, sequence)
        if why is None:
            try:
                publisher.commit(settings, committed.marker_group, list(committed.ranges), marker_metadata(batch_id))
            except Fenced:
                raise
            except EosbatchError as exc:  # publish settles it: init_transactions, then the marker
                why = early.kafka_commit_failed(exc)
            else:
                faults.point("publish.after_kafka_commit")
                published = produced["count"]
                log(f"batch {batch_id}: published {published} records (produced while it committed)")
        if why is not None:
            # Not an AMBIGUOUS one (its commit's outcome unknown): publish's new producer settles it, and reads
            # the marker only after its init_transactions.
            if publisher.state is TxnState.IN_TXN:
                with contextlib.suppress(EosbatchError):
                    publisher.abort()
            log(f"batch {batch_id}: early publish dropped ({why}); publishing from the outbox")
    if published is None:
        return publish(ctx, batch_id)
    return finalize(ctx, batch_id, published)
