"""Durable after COMMIT: a logged outbox filled by the commit, per-writer staged counts, commit sequence.

Staging is UNLOGGED (a PostgreSQL crash empties it), so nothing that publish needs may live there after
the commit: the commit writes the batch's output records into `eosbatch.outbox` (logged) from what the
upsert really changed, and fixes their count in `batches.outbox_records`. The commit sequence number
(per pipeline) goes on every output record, so consumers can order records across lanes.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE eosbatch.outbox (
            batch_id          bigint NOT NULL REFERENCES eosbatch.batches (id) ON DELETE CASCADE,
            seq               bigint NOT NULL,
            key               text,
            value             text NOT NULL,
            source_topic      text,
            source_partition  integer,
            source_offset     bigint,
            PRIMARY KEY (batch_id, seq)
        )""")
    op.execute("ALTER TABLE eosbatch.pipelines ADD COLUMN commit_seq bigint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE eosbatch.batches ADD COLUMN outbox_records bigint")
    op.execute("ALTER TABLE eosbatch.batches ADD COLUMN commit_seq bigint")
    op.execute("ALTER TABLE eosbatch.batches ADD COLUMN committed_at timestamptz")


def downgrade() -> None:
    op.execute("ALTER TABLE eosbatch.batches DROP COLUMN committed_at")
    op.execute("ALTER TABLE eosbatch.batches DROP COLUMN commit_seq")
    op.execute("ALTER TABLE eosbatch.batches DROP COLUMN outbox_records")
    op.execute("ALTER TABLE eosbatch.pipelines DROP COLUMN commit_seq")
    op.execute("DROP TABLE eosbatch.outbox")
