"""Lane leases: one runner per pipeline lane at a time, so two runners stop taking the lane from each other.

Every plan bumps the lane's epoch (the fence every ledger write checks). Two runners of one lane, started
together or kept running side by side (a CLI beside Airflow), would abort each other's batches for ever.
A lease (owner, expiry in the database's clock) says who may bump: another runner sees the lane busy and
leaves it alone until the holder releases it or stops renewing. `takeovers` counts the owner changes.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE eosbatch.lane_leases (
            pipeline    text NOT NULL REFERENCES eosbatch.pipelines (name),
            lane        text NOT NULL CHECK (lane IN ('regular', 'backfill')),
            owner       text,
            expires_at  timestamptz,
            taken_at    timestamptz,
            takeovers   bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (pipeline, lane)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE eosbatch.lane_leases")
