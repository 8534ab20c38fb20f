"""Redriving dead letters on the real stack, through the `eosbatch` CLI as a user runs it: a pipeline whose
schema makes some records dead letters, the schema fixed, `eosbatch dead-letters redrive`, then the
independent count (input vs sink vs read_committed output vs dead letters, the redriven ones marked); a second
redrive does nothing, and a record that fails again keeps the new reason."""

from __future__ import annotations

import psycopg2
import pytest

from eosbatch import config
from eosbatch.ledger import migrate
from tests.redriving import Redrive

pytestmark = [pytest.mark.integration]


@pytest.mark.spark
@pytest.mark.slow
def test_redrive_after_a_schema_fix_runs_each_dead_letter_once(settings, unique):
    scenario = Redrive(settings, unique)
    scenario.ok("run", scenario.pipeline, fixed=False)
    scenario.assert_exactly_once(fixed=False, verify=False)
    dead = scenario.dead_letters()
    missing = sorted(i for i, e, _, _ in dead.values() if e == "missing required field 'n'")
    assert len(missing) == 6 and len(dead) == 10

    # Asked without --yes where nobody can answer: refused, nothing changes.
    refused = scenario.cli("dead-letters", "redrive", scenario.pipeline, "--all", fixed=True)
    assert refused.returncode == 2 and "give --yes" in refused.stderr
    listed = scenario.redrive("--error-like", "missing required%", "--dry-run")
    assert [d["id"] for d in listed["chosen"]] == missing and listed["dry_run"]
    capped = scenario.redrive("--all", "--limit", "2", "--dry-run")
    assert [d["id"] for d in capped["chosen"]] == sorted(i for i, _, _, _ in dead.values())[:2]  # oldest first

    # The schema fixed: the missing-n records go through in one redrive batch; the broken ones fail again.
    done = scenario.redrive("--all", "--limit", "100", "--yes")
    assert (len(done["chosen"]), done["redriven"], done["dead_letters"]) == (10, 6, 4)
    assert done["published"] == 6 and len(done["batches"]) == 1
    assert [k for _, k, _ in scenario.batches()] == ["regular", "redrive"]
    scenario.assert_exactly_once(fixed=True, verify=False)

    # A second redrive of the same records does nothing; only the broken ones are left to choose.
    again = scenario.redrive("--error-like", "missing required%", "--yes")
    assert again["chosen"] == [] and again["batches"] == []
    left = scenario.redrive("--all", "--dry-run")
    assert sorted(d["id"] for d in left["chosen"]) == sorted(i for i, _, by, _ in scenario.dead_letters().values()
                                                              if by is None)
    assert len(scenario.batches()) == 2
    scenario.assert_exactly_once(fixed=True, recompute=True)


def test_going_back_below_0011_refuses_an_unfinished_redrive_and_drops_only_redriven_dead_letters(fresh_database):
    """Migration 0011's downgrade, in a database of its own: refused while a redrive batch is unfinished (its
    commit would be lost); then the dead letters a redrive took are deleted (without their mark a redrive after
    upgrading again would run them twice), the others kept, and redrive batches become reprocess batches."""
    def sql_(statement: str, *params) -> list[tuple]:  # noqa: ANN002
        with psycopg2.connect(config.to_libpq_url(fresh_database)) as connection, connection.cursor() as cur:
            cur.execute(statement, params)
            found = cur.fetchall() if cur.description else []
        connection.close()
        return found

    migrate.upgrade(fresh_database, "head")
    sql_("INSERT INTO eosbatch.pipelines (name) VALUES ('p')")
    [(regular,), (redrive,)] = sql_("INSERT INTO eosbatch.batches (pipeline, kind, state, epoch, marker_group) "
                                    "VALUES ('p', 'regular', 'published', 1, 'g'), ('p', 'redrive', 'committed', 1, "
                                    "'g') RETURNING id")
    sql_('INSERT INTO eosbatch.dead_letters (pipeline, batch_id, topic, partition, "offset", value, error, '
         "redriven_by) VALUES ('p', %s, 't', 0, 3, 'x', 'e', %s), ('p', %s, 't', 0, 4, 'y', 'e', NULL)",
         regular, redrive, redrive)
    with pytest.raises(Exception, match="a redrive batch is unfinished"):
        migrate.downgrade(fresh_database, "0010")
    sql_("UPDATE eosbatch.batches SET state = 'published' WHERE id = %s", redrive)
    migrate.downgrade(fresh_database, "0010")
    assert sql_('SELECT "offset" FROM eosbatch.dead_letters') == [(4,)]
    assert sql_("SELECT kind FROM eosbatch.batches ORDER BY id") == [("regular",), ("reprocess",)]
    migrate.upgrade(fresh_database, "head")
