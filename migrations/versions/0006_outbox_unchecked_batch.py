"""A cheaper outbox to write: no per-row check of its batch, no unique index on (batch_id, seq).

The commit writes one outbox row per output record. Measured on a 1M-record commit here, the foreign key
to `batches` ran a lookup per row (8 of its 37 seconds) and the primary key's index cost 2.2 s over the bare
heap. Only the commit writes outbox rows, for the batch it holds locked, each seq once, in the same
transaction; batches are never deleted (compaction removes their ranges, not their rows). So neither
constraint caught anything the protocol allows. Publish finds a batch's rows by an index on batch_id alone
(its entries deduplicate: a batch's rows share one key); finalize deletes them.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE eosbatch.outbox DROP CONSTRAINT IF EXISTS outbox_batch_id_fkey")
    op.execute("ALTER TABLE eosbatch.outbox DROP CONSTRAINT IF EXISTS outbox_pkey")
    op.execute("CREATE INDEX IF NOT EXISTS outbox_batch ON eosbatch.outbox (batch_id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS eosbatch.outbox_batch")
    op.execute("ALTER TABLE eosbatch.outbox ADD PRIMARY KEY (batch_id, seq)")
    op.execute("ALTER TABLE eosbatch.outbox ADD CONSTRAINT outbox_batch_id_fkey FOREIGN KEY (batch_id) "
               "REFERENCES eosbatch.batches (id) ON DELETE CASCADE")
