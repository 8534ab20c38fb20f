"""The ledger: pipelines, batches, their ranges, committed coverage, next offsets, dead letters.

Revision ID: 0001
Revises:
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
    op.execute("CREATE SCHEMA IF NOT EXISTS eosbatch")
    op.execute("""
        CREATE TABLE eosbatch.pipelines (
            name        text PRIMARY KEY,
            epoch       bigint NOT NULL DEFAULT 0,
            created_at  timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("""
        CREATE TABLE eosbatch.batches (
            id            bigserial PRIMARY KEY,
            pipeline      text NOT NULL REFERENCES eosbatch.pipelines (name),
            kind          text NOT NULL CHECK (kind IN ('regular', 'backfill', 'replay')),
            state         text NOT NULL CHECK (state IN ('planned', 'staged', 'committed', 'published', 'aborted')),
            epoch         bigint NOT NULL,
            publish       boolean NOT NULL DEFAULT true,
            marker_group  text NOT NULL,
            replay_of     bigint REFERENCES eosbatch.batches (id),
            writers       jsonb,
            records_read  bigint,
            sink_rows     bigint,
            dead_letters  bigint,
            published_records bigint,
            error         text,
            created_at    timestamptz NOT NULL DEFAULT now(),
            updated_at    timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("CREATE INDEX batches_pipeline_state ON eosbatch.batches (pipeline, state, id)")
    op.execute("""
        CREATE TABLE eosbatch.batch_ranges (
            batch_id      bigint NOT NULL REFERENCES eosbatch.batches (id) ON DELETE CASCADE,
            topic         text NOT NULL,
            partition     integer NOT NULL CHECK (partition >= 0),
            start_offset  bigint NOT NULL CHECK (start_offset >= 0),
            end_offset    bigint NOT NULL,
            PRIMARY KEY (batch_id, topic, partition),
            CHECK (start_offset < end_offset)
        )""")
    # The invariant "every offset is covered by at most one committed batch" is PostgreSQL's to enforce.
    op.execute("""
        CREATE TABLE eosbatch.committed_ranges (
            pipeline  text NOT NULL REFERENCES eosbatch.pipelines (name),
            topic     text NOT NULL,
            partition integer NOT NULL,
            offsets   int8range NOT NULL CHECK (NOT isempty(offsets)),
            batch_id  bigint NOT NULL REFERENCES eosbatch.batches (id),
            EXCLUDE USING gist (pipeline WITH =, topic WITH =, partition WITH =, offsets WITH &&)
        )""")
    op.execute("""
        CREATE TABLE eosbatch.partition_offsets (
            pipeline     text NOT NULL REFERENCES eosbatch.pipelines (name),
            topic        text NOT NULL,
            partition    integer NOT NULL,
            next_offset  bigint NOT NULL CHECK (next_offset >= 0),
            PRIMARY KEY (pipeline, topic, partition)
        )""")
    op.execute("""
        CREATE TABLE eosbatch.dead_letters (
            id         bigserial PRIMARY KEY,
            pipeline   text NOT NULL REFERENCES eosbatch.pipelines (name),
            batch_id   bigint NOT NULL REFERENCES eosbatch.batches (id),
            topic      text NOT NULL,
            partition  integer NOT NULL,
            "offset"   bigint NOT NULL,
            key        bytea,
            value      bytea,
            error      text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (pipeline, topic, partition, "offset")
        )""")
    # Rows written by Spark tasks, tagged with the task attempt that wrote them; only the attempts that
    # succeeded (batches.writers) count at commit. Sink rows are staged in a typed table per sink.
    op.execute("""
        CREATE UNLOGGED TABLE eosbatch.staged_dead_letters (
            batch_id   bigint NOT NULL,
            writer     text NOT NULL,
            topic      text NOT NULL,
            partition  integer NOT NULL,
            "offset"   bigint NOT NULL,
            key        bytea,
            value      bytea,
            error      text NOT NULL
        )""")
    op.execute("CREATE INDEX staged_dead_letters_batch ON eosbatch.staged_dead_letters (batch_id, writer)")


def downgrade() -> None:
    for table in ("staged_dead_letters", "dead_letters", "partition_offsets", "committed_ranges",
                  "batch_ranges", "batches", "pipelines"):
        op.execute(f"DROP TABLE IF EXISTS eosbatch.{table}")  # noqa: S608 - constant names
    op.execute("DROP SCHEMA IF EXISTS eosbatch CASCADE")
