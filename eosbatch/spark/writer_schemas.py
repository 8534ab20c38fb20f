"""The writer schemas a batch decodes with, for the formats whose records name theirs by id (Avro).

Plan reads no values: the process step collects the ids its ranges hold (reader.schema_ids, one small
aggregate), and resolves each (eosbatch.formats.schemas.resolve): what this batch already decoded with (a
retried process) or the batch it replays did, else what an earlier batch of the pipeline decoded the id with,
else the format's source (its map, or a registry). The set is kept with the batch (ledger.schema_sets) before
any record is decoded with it; verify's recompute decodes each committed batch with its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eosbatch.config import Settings
from eosbatch.formats.schemas import from_json, resolve, to_json
from eosbatch.ledger import lanes, schema_sets, store
from eosbatch.ledger.store import Batch
from eosbatch.pipeline import Pipeline
from eosbatch.spark import reader

Sets = dict[str, dict[int, str | None]]  # role -> schema id -> writer schema (None: unknown)


def stored(batch: Batch) -> dict[str, dict[int, str | None]]:
    """The sets a batch keeps ({} for none)."""
    return from_json((batch.writers or {}).get(schema_sets.KEY))


def resolved(df: Any, settings: Settings, pipeline: Pipeline, pinned: Mapping[str, Mapping[int, str | None]]) -> Sets:
    """The writer schema of every id in `df`'s records, per role ({} when no format names schemas by id:
    no Spark job, no query). `pinned` wins, then the pipeline's earlier batches, then the format's source."""
    sources = {role: fmt.schema_source for role, fmt in pipeline.source.formats.items()
               if fmt.schema_source is not None}
    if not sources:
        return {}
    ids = reader.schema_ids(df, pipeline.source)
    with store.transaction(settings) as cur:
        used = schema_sets.used_schemas(cur, pipeline.name)
    return {role: resolve(ids.get(role, set()), pinned.get(role, {}), used.get(role, {}), source)
            for role, source in sources.items()}


def for_batch(df: Any, settings: Settings, pipeline: Pipeline, batch: Batch) -> Sets:
    """The sets a planned batch decodes `df` (its ranges' records) with, kept with the batch first."""
    if not any(fmt.schema_source is not None for fmt in pipeline.source.formats.values()):
        return {}
    pinned = stored(batch)
    if batch.replay_of is not None:
        with store.transaction(settings) as cur:
            replayed = stored(store.get_batch(cur, batch.replay_of))
        pinned = {role: {**replayed.get(role, {}), **pinned.get(role, {})} for role in {*replayed, *pinned}}
    sets = resolved(df, settings, pipeline, pinned)
    if to_json(sets) != to_json(stored(batch)):
        with store.transaction(settings) as cur:
            lanes.check_epoch(cur, store.get_batch(cur, batch.id, lock=True))
            schema_sets.pin_schemas(cur, batch.id, to_json(sets))
    return sets
