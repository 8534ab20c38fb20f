"""Staging and typed outbox tables made by an older eosbatch skip insert-triggered vacuums too.

A staging table receives a batch's rows once, the commit reads them once, and a later finalize truncates them;
a typed outbox the same, with publish as its reader. A vacuum triggered by those inserts (1M rows per run)
only cleans rows about to be truncated, and competes for the same two cores as the batch. Since 693acba these
tables are created with `autovacuum_vacuum_insert_threshold = -1` (eosbatch.ledger.sinks.TRANSIENT_TABLE),
but `CREATE TABLE IF NOT EXISTS` left the tables of existing pipelines as they were: this sets it on them.

Only tables of the eosbatch schema named as eosbatch names them (`stage_<pipeline>`, `outbox_<pipeline>`);
`format('%s', regclass)` quotes each name as PostgreSQL needs. Downgrade leaves the setting: it changes
nothing but when autovacuum runs, so an earlier eosbatch works with it once `eosbatch db downgrade 0009` has
taken the ledger back to its revision (since 693acba, at revision 0009, eosbatch creates these tables with
it anyway). Upgrading to this revision is `eosbatch db upgrade`, as for every revision: runners refuse a
ledger behind their code until then.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(r"""
        DO $$
        DECLARE
            t regclass;
        BEGIN
            FOR t IN
                SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'eosbatch' AND c.relkind = 'r'
                  AND (starts_with(c.relname, 'stage_') OR starts_with(c.relname, 'outbox_'))
                  AND NOT coalesce(c.reloptions @> ARRAY['autovacuum_vacuum_insert_threshold=-1'], false)
            LOOP
                EXECUTE format('ALTER TABLE %s SET (autovacuum_vacuum_insert_threshold = -1)', t);
            END LOOP;
        END
        $$""")


def downgrade() -> None:
    pass  # see the module's docstring
