"""What several steps use: the log, a lane's transactional id and marker group, the output topic check."""

from __future__ import annotations

from collections.abc import Callable

from eosbatch import config
from eosbatch.context import Log, quiet
from eosbatch.kafka import offsets
from eosbatch.ledger import store
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.states import Lane, lane

__all__ = ["Log", "quiet", "transactional_id", "lane_transactional_id", "marker_group", "check_output_topic"]


def transactional_id(pipeline: Pipeline, batch: store.Batch) -> str:
    return lane_transactional_id(pipeline, lane(batch.kind))


def lane_transactional_id(pipeline: Pipeline, in_lane: Lane) -> str:
    # Regular batches and backfills run side by side (separate DAGs); each lane fences its own zombies.
    return pipeline.transactional_id if in_lane == "regular" else f"{pipeline.transactional_id}.backfill"


def marker_group(pipeline: Pipeline, in_lane: Lane) -> str | Callable[[int], str]:
    """The regular lane's marker group shows the pipeline's lag to standard tools; a backfill batch gets a
    group of its own (deleted after finalize), since its ranges lie behind the regular lane's."""
    if in_lane == "regular":
        return pipeline.marker_group
    return lambda batch_id: f"{pipeline.marker_group}.backfill.{batch_id}"


def check_output_topic(settings: config.Settings, pipeline: Pipeline) -> None:
    """Fail fast, naming the field, when the output topic is missing: the producer would report each failed
    delivery as retriable, and only after the batch was processed and committed."""
    if pipeline.output is not None:
        offsets.partitions(offsets.admin(settings), [pipeline.output.topic], field="output.topic")
