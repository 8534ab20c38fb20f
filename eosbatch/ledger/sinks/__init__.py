"""Sink and staging tables, and the statements that move a batch's staged rows into the sink and publish them.

names: the tables' and eosbatch's own columns' names. catalog: what the database says about them, read once
into a SinkShape. modes: what replace and accumulate change. latest, statements, dead_letters, outbox, deletes:
the SQL, built without I/O. tables, markers (a sink with deletes): the DDL. evolve: new columns added to an
evolving sink. commit: the executor of the commit's statements.
"""

from eosbatch.ledger.sinks.catalog import (
    BYTE_ORDER_LOCALES,
    KeyColumn,
    KeyColumns,
    SinkShape,
    key_columns,
    result_columns,
    table_types,
)
from eosbatch.ledger.sinks.commit import (
    Moved,
    copy_dead_letters,
    insert_pays,
    missing_staged,
    move_to_sink,
    stages_tombstones,
)
from eosbatch.ledger.sinks.evolve import ShapeChanged, evolve_sink
from eosbatch.ledger.sinks.markers import ensure as ensure_deletes
from eosbatch.ledger.sinks.names import (
    AMBIGUOUS_COLUMN,
    AMBIGUOUS_KEY,
    BATCH_COLUMN,
    DELETED_COLUMN,
    RECORD_TOO_BIG,
    SEQ_COLUMN,
    TRANSIENT_TABLE,
    WRITER_COLUMN,
    Column,
    deleted_table,
    outbox_table,
    position_columns,
    sink_table,
    stage_copy_target,
    stage_table,
)
from eosbatch.ledger.sinks.outbox import (
    early_outbox_query,
    json_outbox_query,
    legacy_outbox,
    never_early,
    outbox_query,
)
from eosbatch.ledger.sinks.rendering import TEXT_WIDTH, json_size_bound
from eosbatch.ledger.sinks.statements import batch_rows
from eosbatch.ledger.sinks.tables import ensure_outbox, ensure_tables, validate_columns

__all__ = [
    "AMBIGUOUS_COLUMN", "AMBIGUOUS_KEY", "BATCH_COLUMN", "BYTE_ORDER_LOCALES", "DELETED_COLUMN", "RECORD_TOO_BIG",
    "SEQ_COLUMN", "TEXT_WIDTH", "TRANSIENT_TABLE", "WRITER_COLUMN", "Column", "KeyColumn", "KeyColumns", "Moved",
    "ShapeChanged", "SinkShape", "batch_rows", "copy_dead_letters", "deleted_table", "early_outbox_query",
    "ensure_deletes", "ensure_outbox", "ensure_tables", "evolve_sink", "insert_pays",
    "json_outbox_query", "json_size_bound", "key_columns", "legacy_outbox", "missing_staged", "move_to_sink",
    "never_early",
    "outbox_query", "outbox_table", "position_columns", "result_columns", "sink_table", "stage_copy_target",
    "stage_table", "stages_tombstones", "table_types", "validate_columns",
]
