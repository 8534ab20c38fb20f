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
    op.execute("DELETE FROM eosbatch.batches WHERE kind = 'reprocess'")
    op.execute("ALTER TABLE eosbatch.batches DROP CONSTRAINT batches_kind_check")
    op.execute("ALTER TABLE eosbatch.batches ADD CONSTRAINT batches_kind_check "
               "CHECK (kind IN ('regular', 'backfill', 'replay'))")
    op.execute("ALTER TABLE eosbatch.pipelines DROP COLUMN backfill_epoch")
