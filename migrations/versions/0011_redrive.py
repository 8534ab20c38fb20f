"""Redriving dead letters: a `redrive` batch runs chosen dead letters through the pipeline again, once.

- `eosbatch.redrive_records`: a redrive batch's input, fixed when it is planned (as `batch_ranges` fixes a
  regular batch's): the dead letters it runs, read from PostgreSQL (Kafka may have deleted them since).
- `dead_letters.redriven_by`: the redrive batch whose commit took the record into the sink. That commit sets
  it, in its one transaction, so a second redrive finds nothing to do; a record that fails again is recorded
  by the same commit with its new reason and stays unmarked.
- `dead_letters.timestamp` and `timestamp_type` (and on `staged_dead_letters`): the record's Kafka timestamp,
  so a redriven record reaches the transform with it. Null for dead letters recorded before this revision.
- the batch kind `redrive` (backfill lane; it claims no coverage and moves no offset).

Downgrade refuses while a redrive batch is unfinished (its commit would be lost). It deletes the dead letters
a redrive took into the sink (their records are in the sink now, and without the mark a redrive after an
upgrade again would run them twice), drops the redrive batches' input, and keeps redrive batches as
`reprocess` batches (the kind the previous revision knows that claims no coverage and moves no offset).

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE eosbatch.batches DROP CONSTRAINT batches_kind_check")
    op.execute("ALTER TABLE eosbatch.batches ADD CONSTRAINT batches_kind_check "
               "CHECK (kind IN ('regular', 'backfill', 'replay', 'reprocess', 'redrive'))")
    op.execute("ALTER TABLE eosbatch.dead_letters ADD COLUMN redriven_by bigint REFERENCES eosbatch.batches (id)")
    op.execute('ALTER TABLE eosbatch.dead_letters ADD COLUMN "timestamp" timestamptz')
    op.execute("ALTER TABLE eosbatch.dead_letters ADD COLUMN timestamp_type integer")
    op.execute('ALTER TABLE eosbatch.staged_dead_letters ADD COLUMN "timestamp" timestamptz')
    op.execute("ALTER TABLE eosbatch.staged_dead_letters ADD COLUMN timestamp_type integer")
    op.execute("""
        CREATE TABLE eosbatch.redrive_records (
            batch_id        bigint NOT NULL REFERENCES eosbatch.batches (id) ON DELETE CASCADE,
            dead_letter_id  bigint NOT NULL REFERENCES eosbatch.dead_letters (id) ON DELETE CASCADE,
            PRIMARY KEY (batch_id, dead_letter_id)
        )""")
    # What `eosbatch dead-letters redrive` looks for: a pipeline's dead letters not redriven yet.
    op.execute("CREATE INDEX dead_letters_pending ON eosbatch.dead_letters (pipeline, id) WHERE redriven_by IS NULL")


def downgrade() -> None:
    op.execute("""
        DO $$
        BEGIN
            IF EXISTS (SELECT FROM eosbatch.batches WHERE kind = 'redrive'
                       AND state IN ('planned', 'staged', 'committed')) THEN
                RAISE EXCEPTION 'a redrive batch is unfinished: run eosbatch dead-letters redrive (or eosbatch '
                                'abort) until it is published or aborted, then downgrade';
            END IF;
        END
        $$""")
    op.execute("DROP TABLE eosbatch.redrive_records")
    op.execute("DELETE FROM eosbatch.dead_letters WHERE redriven_by IS NOT NULL")
    op.execute("DROP INDEX eosbatch.dead_letters_pending")
    op.execute("ALTER TABLE eosbatch.dead_letters DROP COLUMN redriven_by")
    op.execute('ALTER TABLE eosbatch.dead_letters DROP COLUMN "timestamp"')
    op.execute("ALTER TABLE eosbatch.dead_letters DROP COLUMN timestamp_type")
    op.execute('ALTER TABLE eosbatch.staged_dead_letters DROP COLUMN "timestamp"')
    op.execute("ALTER TABLE eosbatch.staged_dead_letters DROP COLUMN timestamp_type")
    op.execute("UPDATE eosbatch.batches SET kind = 'reprocess' WHERE kind = 'redrive'")
    op.execute("ALTER TABLE eosbatch.batches DROP CONSTRAINT batches_kind_check")
    op.execute("ALTER TABLE eosbatch.batches ADD CONSTRAINT batches_kind_check "
               "CHECK (kind IN ('regular', 'backfill', 'replay', 'reprocess'))")
