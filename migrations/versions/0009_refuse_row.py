"""`eosbatch.refuse_row`: the commit's checks raise from inside its one statement instead of scanning again.

The commit's statement checked two things about the batch's result rows besides upserting them: no key is
ambiguous (found in two partitions of one batch with nothing ordering them), and every output record fits
the output topic (larger ones become dead letters). Counting those needed the rows twice more, so PostgreSQL
materialised all of them in a tuplestore (spilled to disk) and scanned it three times. Measured on a staged
1M-record batch (908,736 result rows), each alone and rolled back, four alternating rounds: 6.70-6.85 s with
the extra scans, 5.58-5.77 s without them.

Now the rows go through the upsert once, and a row that fails a check calls this function, which raises
(SQLSTATE EB001: an ambiguous key; EB002: an output record over the limit). Neither happens in a healthy
pipeline. The commit rolls back to a savepoint, then names the ambiguous key, or runs the statement that
moves the oversized rows to the dead letters (the statement before this revision).

STABLE, not VOLATILE: a volatile function would keep PostgreSQL from folding the rows' CTE into the upsert,
the point of this. It is never evaluated at plan time: its argument is a column of the row.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE OR REPLACE FUNCTION eosbatch.refuse_row(code text, reason text, key text) RETURNS boolean
        LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
        BEGIN
            RAISE EXCEPTION 'eosbatch: %', reason USING ERRCODE = code, DETAIL = 'key: ' || coalesce(key, 'NULL');
        END
        $$
    """)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS eosbatch.refuse_row(text, text, text)")
