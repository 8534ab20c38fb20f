"""For `eosbatch check`, asked of PostgreSQL without changing anything: whether an existing sink table takes the
columns a transform returns, and what this role may not do that a batch does.

A column fits when PostgreSQL accepts the commit's assignment of the staged column to the sink's: the same
INSERT ... SELECT, prepared (parsed and analysed, never executed, so no privilege is needed to ask) with a
NULL of the staged type. text into integer does not fit; integer into bigint, or double into numeric, does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from psycopg2 import errors, sql

from eosbatch.ledger.sinks.names import Column, sink_table
from eosbatch.ledger.store import Cursor
from eosbatch.pipeline import Pipeline

# What a batch does to an existing sink: reads it (replace's latest-row rule, accumulate's sums) and upserts.
SINK_PRIVILEGES = ("SELECT", "INSERT", "UPDATE")
LEDGER_SCHEMA = "eosbatch"


def misfits(cur: Cursor, pipeline: Pipeline, columns: Sequence[Column], sink_types: Mapping[str, str]) -> list[str]:
    """Each problem of an existing sink with the transform's `columns`, one phrase each, naming the column: a
    column the sink lacks, a type PostgreSQL will not assign, a NOT NULL column without a default that the
    transform does not fill."""
    problems = [f"no column {c.name} (the transform returns it as {c.pg_type})" for c in columns
                if c.name not in sink_types and not pipeline.sink.evolve]  # evolve adds it
    table = sink_table(pipeline)
    for column in columns:
        if column.name not in sink_types:
            continue
        if not assigns(cur, pipeline, column):
            problems.append(f"column {column.name} is {sink_types[column.name]}, the transform returns "
                            f"{column.pg_type}, which PostgreSQL does not assign to it")
    schema, name = table.strings
    cur.execute("SELECT a.attname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
                "AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull AND NOT a.atthasdef "
                "AND a.attidentity = '' AND a.attgenerated = '' AND NOT (a.attname::text = ANY(%s)) "
                "ORDER BY a.attnum", (schema, name, [c.name for c in columns]))
    problems += [f"column {n} is NOT NULL without a default, and the transform does not return it"
                 for (n,) in cur.fetchall()]
    return problems


def assigns(cur: Cursor, pipeline: Pipeline, column: Column) -> bool:
    """Whether PostgreSQL assigns a value of `column`'s type to the sink's column of that name: the commit's
    INSERT ... SELECT, prepared (never executed) with a NULL of that type."""
    cur.execute("SAVEPOINT eosbatch_fit")
    try:
        cur.execute(sql.SQL("PREPARE eosbatch_fit AS INSERT INTO {} ({}) SELECT NULL::{}").format(
            sink_table(pipeline), sql.Identifier(column.name), sql.SQL(column.pg_type)))
        cur.execute("DEALLOCATE eosbatch_fit")
        return True
    except errors.DatatypeMismatch:
        return False
    finally:
        cur.execute("ROLLBACK TO SAVEPOINT eosbatch_fit")


def missing_privileges(cur: Cursor, pipeline: Pipeline, sink_exists: bool) -> tuple[str, list[str]]:
    """This role's name, and what it lacks for a batch, one phrase each ("INSERT on public.totals"): on an
    existing sink, its schema's USAGE and SINK_PRIVILEGES; else CREATE on its schema (or, the schema missing, on the
    database); on the ledger's schema USAGE and CREATE (each pipeline's staging and outbox tables are made
    there), and on its tables and sequences what the protocol does with them."""
    schema, name = sink_table(pipeline).strings
    qualified = sql.Identifier(schema, name).as_string(cur.connection)
    cur.execute("SELECT current_user::text, to_regnamespace(%s) IS NOT NULL, to_regnamespace(%s) IS NOT NULL",
                (sql.Identifier(schema).as_string(cur.connection), LEDGER_SCHEMA))
    role, sink_schema_exists, ledger_exists = cur.fetchone()
    wanted: list[tuple[str, str, str]] = []  # (privilege, on, SQL asking for it)
    if sink_exists:
        wanted.append(("USAGE", f"schema {schema}", "has_schema_privilege(%(schema)s, 'USAGE')"))
        privileges = (*SINK_PRIVILEGES, "DELETE") if pipeline.sink.deletes is not None else SINK_PRIVILEGES
        wanted += [(p, f"{schema}.{name}", f"has_table_privilege(%(table)s, '{p}')") for p in privileges]
    elif sink_schema_exists:
        wanted.append(("CREATE", f"schema {schema} (the first batch creates the sink)",
                       "has_schema_privilege(%(schema)s, 'CREATE')"))
    else:
        wanted.append(("CREATE", "the database (the first batch creates the sink's schema)",
                       "has_database_privilege(current_database(), 'CREATE')"))
    if ledger_exists:
        wanted += [(p, f"schema {LEDGER_SCHEMA}", f"has_schema_privilege('{LEDGER_SCHEMA}', '{p}')")
                   for p in ("USAGE", "CREATE")]
    cur.execute(sql.SQL("SELECT {}").format(sql.SQL(", ").join(sql.SQL(asked) for _, _, asked in wanted)),
                {"schema": schema, "table": qualified})
    lacking = [f"{privilege} on {on}" for (privilege, on, _), has in zip(wanted, cur.fetchone(), strict=True)
               if not has]
    if ledger_exists:
        lacking += _ledger_objects(cur)
    return role, lacking


def _ledger_objects(cur: Cursor) -> list[str]:
    """The ledger's own tables this role may not read and write, its sequences it may not use (pipelines'
    staging, outbox and deleted-marker tables excluded: a batch makes its own)."""
    cur.execute(
        """SELECT c.relkind = 'S', c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'S')
              AND c.relname NOT LIKE 'stage\\_%%' AND c.relname NOT LIKE 'outbox\\_%%'
              AND c.relname NOT LIKE 'deleted\\_%%'
              AND NOT CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'USAGE')
                      ELSE has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')
                           AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE') END
            ORDER BY 2""", (LEDGER_SCHEMA,))
    return [f"{'USAGE' if sequence else 'SELECT, INSERT, UPDATE and DELETE'} on {LEDGER_SCHEMA}.{name}"
            for sequence, name in cur.fetchall()]
