"""Source incarnations: each source topic's Kafka topic ID, per-partition incarnations, recorded resets.

A topic deleted and recreated starts its offsets again at 0, and its log end may even lie above the
ledger's next offset, so offsets alone cannot tell the new topic from the old: the ledger records the
topic ID (KIP-516) it reads and every plan compares it. Offsets are only comparable within one
incarnation of a partition (one topic ID, no backward jump of the log), so committed ranges, batch
ranges and next offsets carry the incarnation, and the exclusion constraint refuses overlaps within an
incarnation only. Moving from one incarnation to the next, or skipping offsets, is an operator's reset,
recorded in `source_resets`: the verifier reads a declared gap there, not a hole.

Existing rows become incarnation 0 of topics whose ID is not known yet; the next plan records the ID
Kafka reports then (after checking the offsets, which is all a ledger without IDs can do).

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # `incarnation` counts the topic's incarnations for this pipeline: every reset that starts a new one
    # (a new topic ID, or a partition whose log went back) takes the next number, so numbers never repeat.
    op.execute("""
        CREATE TABLE eosbatch.source_topics (
            pipeline     text NOT NULL REFERENCES eosbatch.pipelines (name),
            topic        text NOT NULL,
            topic_id     text,
            incarnation  integer NOT NULL DEFAULT 0,
            updated_at   timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (pipeline, topic)
        )""")
    op.execute("INSERT INTO eosbatch.source_topics (pipeline, topic) "
               "SELECT DISTINCT pipeline, topic FROM eosbatch.partition_offsets")
    for table in ("partition_offsets", "batch_ranges", "committed_ranges"):
        op.execute(f"ALTER TABLE eosbatch.{table} ADD COLUMN incarnation integer NOT NULL DEFAULT 0")  # noqa: S608
    # No default on committed ranges from now on: a commit that does not say which incarnation it covers
    # must fail, not land in incarnation 0.
    op.execute("ALTER TABLE eosbatch.committed_ranges ALTER COLUMN incarnation DROP DEFAULT")
    op.execute("ALTER TABLE eosbatch.committed_ranges "
               "DROP CONSTRAINT committed_ranges_pipeline_topic_partition_offsets_excl")
    op.execute("ALTER TABLE eosbatch.committed_ranges ADD CONSTRAINT committed_ranges_no_overlap "
               "EXCLUDE USING gist (pipeline WITH =, topic WITH =, partition WITH =, incarnation WITH =, "
               "offsets WITH &&)")
    # A recreated topic's malformed record may sit at an offset where the old topic had one: both stay.
    op.execute("ALTER TABLE eosbatch.dead_letters ADD COLUMN incarnation integer NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE eosbatch.dead_letters DROP CONSTRAINT dead_letters_pipeline_topic_partition_offset_key")
    op.execute('ALTER TABLE eosbatch.dead_letters ADD CONSTRAINT dead_letters_position '
               'UNIQUE (pipeline, topic, partition, incarnation, "offset")')
    op.execute("""
        CREATE TABLE eosbatch.source_resets (
            id                bigserial PRIMARY KEY,
            pipeline          text NOT NULL REFERENCES eosbatch.pipelines (name),
            topic             text NOT NULL,
            partition         integer NOT NULL,
            from_incarnation  integer NOT NULL,
            from_offset       bigint NOT NULL,
            to_incarnation    integer NOT NULL,
            to_offset         bigint NOT NULL CHECK (to_offset >= 0),
            from_topic_id     text,
            to_topic_id       text,
            reason            text NOT NULL,
            created_at        timestamptz NOT NULL DEFAULT now(),
            CHECK (to_incarnation > from_incarnation
                   OR (to_incarnation = from_incarnation AND to_offset > from_offset))
        )""")
    op.execute("CREATE INDEX source_resets_pipeline ON eosbatch.source_resets (pipeline, topic, partition, id)")


def downgrade() -> None:
    # The old schema knows one incarnation per partition: keep the current one's coverage; the earlier
    # incarnations' ranges (a deleted topic's, or a log that went back) cannot be told apart there.
    # A partition the ledger no longer tracks keeps its newest incarnation.
    for table in ("committed_ranges", "dead_letters"):
        op.execute(f"""
            DELETE FROM eosbatch.{table} c
             WHERE c.incarnation <> COALESCE(
                   (SELECT o.incarnation FROM eosbatch.partition_offsets o
                     WHERE o.pipeline = c.pipeline AND o.topic = c.topic AND o.partition = c.partition),
                   (SELECT max(k.incarnation) FROM eosbatch.{table} k
                     WHERE k.pipeline = c.pipeline AND k.topic = c.topic AND k.partition = c.partition))
            """)  # noqa: S608 - constant table names
    op.execute("ALTER TABLE eosbatch.dead_letters DROP CONSTRAINT dead_letters_position")
    op.execute('ALTER TABLE eosbatch.dead_letters ADD CONSTRAINT dead_letters_pipeline_topic_partition_offset_key '
               'UNIQUE (pipeline, topic, partition, "offset")')
    op.execute("ALTER TABLE eosbatch.dead_letters DROP COLUMN incarnation")
    op.execute("DROP TABLE eosbatch.source_resets")
    op.execute("ALTER TABLE eosbatch.committed_ranges DROP CONSTRAINT committed_ranges_no_overlap")
    op.execute("ALTER TABLE eosbatch.committed_ranges ADD CONSTRAINT "
               "committed_ranges_pipeline_topic_partition_offsets_excl "
               "EXCLUDE USING gist (pipeline WITH =, topic WITH =, partition WITH =, offsets WITH &&)")
    for table in ("committed_ranges", "batch_ranges", "partition_offsets"):
        op.execute(f"ALTER TABLE eosbatch.{table} DROP COLUMN incarnation")  # noqa: S608
    op.execute("DROP TABLE eosbatch.source_topics")
