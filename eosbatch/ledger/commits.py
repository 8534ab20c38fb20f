"""The ledger statements of a batch's commit and upkeep that have no other home yet: when it committed, the
commit sequence number it is about to take, and the upkeep's lock wait."""

from __future__ import annotations

from typing import Any

Cursor = Any


def mark_committed_now(cur: Cursor, batch_id: int) -> None:
    """Record the commit's time on the batch (publish reads its age against the marker's retention)."""
    cur.execute("UPDATE eosbatch.batches SET committed_at = now() WHERE id = %s", (batch_id,))


def upcoming_commit_seq(cur: Cursor, pipeline: str) -> int:
    """The commit sequence number the pipeline's next commit will take (read only: the commit takes it)."""
    cur.execute("SELECT commit_seq + 1 FROM eosbatch.pipelines WHERE name = %s", (pipeline,))
    return int(cur.fetchone()[0])


def limit_lock_wait(cur: Cursor, timeout: str) -> None:
    """Give up on a lock after `timeout` (a PostgreSQL interval such as '5s') for the rest of the transaction."""
    cur.execute("SELECT set_config('lock_timeout', %s, true)", (timeout,))
