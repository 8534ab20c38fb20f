"""A typed outbox per pipeline: the commit stores each output record's columns, publish renders the JSON.

The commit is the critical path of a run (one PostgreSQL backend; with overlapped batches the others wait on
it). Writing the outbox as JSON text made it render every record (row_to_json) and log ~300 B of WAL per
record inside the commit. Measured here on 908,736 output records of a 1M-record batch, each alone and
rolled back: the JSON outbox insert 2.99-3.10 s and 274 MB of WAL, the same rows into a table typed like
the sink 1.14-1.26 s and 195 MB. Publish now renders the JSON as it reads (row_to_json over the same
columns, in the same order, so the records are byte for byte what the commit rendered before): +0.7 s per
1M records there, in the publish of the previous batch that overlaps the next commit.

`batches.outbox_columns` names the output record's columns, in order, for a batch whose outbox is the
typed table `eosbatch.outbox_<pipeline>` (created by the commit); NULL for a batch committed before this
revision, whose records stay in `eosbatch.outbox` as JSON and are published from there.

Downgrading drops the column: publish every committed batch first (`eosbatch status`), since the older
release cannot read a typed outbox.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE eosbatch.batches ADD COLUMN IF NOT EXISTS outbox_columns text[]")


def downgrade() -> None:
    op.execute("ALTER TABLE eosbatch.batches DROP COLUMN IF EXISTS outbox_columns")
