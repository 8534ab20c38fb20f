"""Backfill lane: its own epoch, and reprocess batches (re-run committed ranges, claim no coverage).

Regular runs and backfills run side by side (separate DAGs, separate transactional ids); each lane fences
its own zombies, so a regular run's recovery never aborts a backfill batch in flight, nor the reverse.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE eosbatch.pipelines ADD COLUMN backfill_epoch bigint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE eosbatch.batches DROP CONSTRAINT batches_kind_check")
    op.execute("ALTER TABLE eosbatch.batches ADD CONSTRAINT batches_kind_check "
               "CHECK (kind IN ('regular', 'backfill', 'replay', 'reprocess'))")


def downgrade() -> None:
    # Dead letters a reprocess re-recorded go back to the batch whose committed range holds them.
    op.execute("""
        UPDATE eosbatch.dead_letters d SET batch_id = c.batch_id
          FROM eosbatch.batches b, eosbatch.committed_ranges c
         WHERE b.id = d.batch_id AND b.kind = 'reprocess' AND c.pipeline = d.pipeline AND c.topic = d.topic
           AND c.partition = d.partition AND c.offsets @> d."offset"
    """)
    op.execute("DELETE FROM eosbatch.batches WHERE kind = 'reprocess'")
    op.execute("ALTER TABLE eosbatch.batches DROP CONSTRAINT batches_kind_check")
    op.execute("ALTER TABLE eosbatch.batches ADD CONSTRAINT batches_kind_check "
               "CHECK (kind IN ('regular', 'backfill', 'replay'))")
    op.execute("ALTER TABLE eosbatch.pipelines DROP COLUMN backfill_epoch")
