"""Where an Avro format's writer schemas come from, and which one a batch decodes an id with.

A source of writer schemas is any object with `schema(schema_id) -> str | None` (`WriterSchemas`): the
pipeline's own map (`MappedSchemas`), or a schema registry. Plan reads no values, so the process step collects
the ids a batch's range holds and resolves each (`resolve`): the batch keeps the id -> schema set it decoded
with (in its ledger row), so that a retried process, a replay and verify's recompute decode as it did.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from eosbatch.exceptions import ConfigError
from eosbatch.formats.wire import MAX_SCHEMA_ID


@runtime_checkable
class WriterSchemas(Protocol):
    """A source of writer schemas by id."""

    def schema(self, schema_id: int) -> str | None:
        """The writer schema's JSON text; None for an id the source does not know (its records become dead
        letters); raises eosbatch.exceptions.TransientError when the source cannot be reached (the batch is
        retried, never dead-lettered)."""
        ...


def avro_schema(field: str, text: object) -> tuple[str, Any]:
    """(the schema's JSON text, its parsed form) of a schema given as JSON text or a Path to a file of it;
    ConfigError naming `field` when it is not a valid Avro schema."""
    if isinstance(text, Path):
        try:
            text = text.read_text()
        except OSError as exc:
            raise ConfigError(field, f"cannot read the Avro schema file: {exc}") from None
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(field, f"must be an Avro schema as JSON text or a Path to a file of it, got {text!r}")
    import fastavro

    try:
        parsed = fastavro.parse_schema(json.loads(text))
    except Exception as exc:  # noqa: BLE001 - json's and fastavro's many errors all mean the same here
        raise ConfigError(field, f"not a valid Avro schema: {exc}") from None
    return text, parsed


class MappedSchemas:
    """Writer schemas the pipeline names itself: {schema id: schema JSON text or Path}; each is read and
    checked when built (ConfigError naming `field[id]`)."""

    def __init__(self, schemas: Mapping[int, str | Path], field: str = "writer_schemas") -> None:
        texts: dict[int, str] = {}
        for schema_id, text in schemas.items():
            if not isinstance(schema_id, int) or isinstance(schema_id, bool) or not 0 <= schema_id <= MAX_SCHEMA_ID:
                raise ConfigError(field, f"schema ids must be ints from 0 to {MAX_SCHEMA_ID}, got {schema_id!r}")
            texts[schema_id] = avro_schema(f"{field}[{schema_id}]", text)[0]
        self.schemas: Mapping[int, str] = texts

    def schema(self, schema_id: int) -> str | None:
        return self.schemas.get(schema_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MappedSchemas) and dict(self.schemas) == dict(other.schemas)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.schemas.items())))

    def __repr__(self) -> str:
        return f"MappedSchemas(ids {sorted(self.schemas)})"

    def __str__(self) -> str:
        return "the pipeline's writer_schemas map"


def resolve(ids: Iterable[int], pinned: Mapping[int, str | None], used: Mapping[int, str],
            source: WriterSchemas) -> dict[int, str | None]:
    """The writer schema each id decodes with (None: unknown, its records become dead letters), first found in:

    - `pinned`: the set this batch already decoded with (a retried process), or the batch it replays, unknown
      ids included, so the records decode, or not, as they did;
    - `used`: what an earlier batch of the pipeline decoded the id with (a schema id names one schema for good);
    - `source`: asked only for the ids neither holds; its TransientError propagates (the batch is retried).
    """
    found: dict[int, str | None] = {}
    for schema_id in sorted(set(ids)):
        if schema_id in pinned:
            found[schema_id] = pinned[schema_id]
        elif schema_id in used:
            found[schema_id] = used[schema_id]
        else:
            found[schema_id] = source.schema(schema_id)
    return found


def to_json(sets: Mapping[str, Mapping[int, str | None]]) -> dict[str, dict[str, str | None]]:
    """A batch's sets ({role: {id: schema}}) as its ledger row keeps them (JSON object keys are strings)."""
    return {role: {str(i): text for i, text in sorted(ids.items())} for role, ids in sorted(sets.items())}


def from_json(stored: object) -> dict[str, dict[int, str | None]]:
    """The sets of a batch's ledger row (`to_json`'s form); {} for a batch without any."""
    if not isinstance(stored, dict):
        return {}
    return {role: {int(i): text for i, text in ids.items()} for role, ids in stored.items() if isinstance(ids, dict)}
