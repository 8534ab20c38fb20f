"""The outbox without an index: a batch's rows are written once, read once and deleted once.

The btree on batch_id cost one more WAL record per output record in the commit, about 1.2 s of a
1M-record commit here (14.3 against 15.5 s, alternating, rolled back; a BRIN index instead saved nothing
measurable). The outbox holds only what is committed and not yet published, normally one batch per lane,
so publish and finalize read it by a sequential scan, which is what they did for a large batch anyway.
Publish's read of a clean 1M-record outbox: 5.21 s without the index, 5.06 s with it (alternating, 3 each).
The cost moves to a small batch published shortly after a large one was finalized: its scan passes the
large batch's dead rows until autovacuum reclaims them (a 100-record batch after a 1M-record one: 0.16 s
for the first scan, which sets the dead rows' hint bits, 0.017 s for the next).

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS eosbatch.outbox_batch")


def downgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS outbox_batch ON eosbatch.outbox (batch_id)")
