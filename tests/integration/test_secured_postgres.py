"""eosbatch as a non-superuser role that authenticates with SCRAM-SHA-256 (the embedded cluster's option,
eosbatch.stack.add_password_role): the ledger and a pipeline run end to end, through a crash and its
recovery, and the password is nowhere: not in the runs' output, `status`, the client and stack logs, any
process's arguments while a run goes, the ledger's rows, nor in the error of a wrong password."""

from __future__ import annotations

import os
import secrets
import subprocess
import time

import psycopg2
import psycopg2.errors
import pytest

from eosbatch import faults, stack
from eosbatch.ledger import store
from tests import leaks
from tests.conftest import long_lived_ids
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_password_role_runs_exactly_once_and_the_password_is_nowhere(settings, unique, tmp_path,
                                                                      monkeypatch) -> None:
    before = leaks.stack_logs()
    # finalize compacts the ledger after every commit: compaction works without temporary tables
    monkeypatch.setenv("EOSBATCH_COMPACT_EVERY", "1")
    monkeypatch.setenv("EOSBATCH_COMPACT_AFTER_DAYS", "0")
    password = "pw-" + secrets.token_urlsafe(18)
    role, database = f"eosbatch_app_{unique}", f"secured_{unique}"
    url = stack.add_password_role(role, password, database)
    secured = settings._replace(database_url=url.replace(f"{role}@", f"{role}:{password}@"))
    logs = tmp_path / "logs"
    os.environ["EOSBATCH_LOG_DIR"] = str(logs)  # this test's client logs, searched below
    try:
        said: list[str] = []

        def cli(scenario: Scenario, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
            done = scenario.cli(*args, fault=fault)
            said.extend([done.stdout, done.stderr])
            return done

        scenario = Scenario(secured, unique, "totals", batch=1000)
        assert cli(scenario, "db", "upgrade").returncode == 0, said[-1][-2000:]
        long_lived_ids(secured)
        crashed = cli(scenario, "run", scenario.pipeline, fault="commit.before_commit")
        assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-2000:]

        with leaks.command_lines() as seen:
            recovered = cli(scenario, "run", scenario.pipeline)
        assert recovered.returncode == 0, recovered.stderr[-2000:]
        assert cli(scenario, "status", scenario.pipeline).returncode == 0
        scenario.assert_exactly_once()
        assert {state for _, _, state in scenario.batches()} == {"aborted", "published"}
        said_run = recovered.stdout + recovered.stderr
        assert "ledger compacted: " in said_run and "compaction skipped" not in said_run, said_run[-2000:]

        # A wrong password fails fast, says so, and names neither password.
        wrong = Scenario(secured._replace(database_url=secured.database_url.replace(password, "not-" + password)),
                         unique, "totals", records=0)
        started = time.monotonic()
        refused = cli(wrong, "status", scenario.pipeline)
        assert refused.returncode == 2 and time.monotonic() - started < 30
        assert "password authentication failed" in refused.stderr, refused.stderr[-2000:]
        assert "not-" + password not in refused.stderr + refused.stdout

        # Non-superuser; owns only the ledger's schema and what the pipeline created (its sink table).
        with psycopg2.connect(secured.psycopg_dsn) as connection, connection.cursor() as cursor:
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):  # hardened: no temporary tables
                cursor.execute("CREATE TEMP TABLE eosbatch_probe (i int)")
        with store.transaction(secured) as cur:  # compacted: only the last published batch keeps its detail
            cur.execute("SELECT DISTINCT b.id FROM eosbatch.batch_ranges r JOIN eosbatch.batches b ON b.id = "
                        "r.batch_id WHERE b.state = 'published'")
            assert [row[0] for row in cur.fetchall()] == [max(i for i, _, s in scenario.batches() if s == "published")]
            cur.execute("SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user")
            assert cur.fetchone() == (False, False, False)
            cur.execute("SELECT nspname FROM pg_namespace WHERE pg_get_userbyid(nspowner) = current_user")
            assert [name for (name,) in cur.fetchall()] == ["eosbatch"]
            cur.execute("SELECT DISTINCT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON "
                        "n.oid = c.relnamespace WHERE pg_get_userbyid(c.relowner) = current_user AND c.relkind = 'r' "
                        "AND n.nspname <> 'eosbatch'")
            assert sorted(cur.fetchall()) == [("public", f"crash_totals_{unique}"),  # the sink, and the ledger's
                                              ("public", "eosbatch_alembic_version")]  # revision (Alembic's table)
        ledger = leaks.ledger_rows(secured)
        assert ledger

        places = {"the runs' output and status": "\n".join(said), "process arguments": "\n".join(seen),
                  "the ledger's rows": "\n".join(ledger)}
        for path in (p for p in logs.rglob("*") if p.is_file()):
            places[str(path)] = path.read_text(errors="replace")
        places.update(leaks.grown_since(before))  # what the stack's logs gained during this test
        found = [where for where, text in places.items() if password in text]
        assert found == [], f"the password appears in: {found}"
        assert any(f"eosbatch run {scenario.pipeline}" in line or "eosbatch.cli run" in line for line in seen)
        print(f"searched {len(places)} places ({sum(map(len, places.values())):,} characters) for the password: "
              f"none; {len(seen)} command lines sampled")
    finally:
        os.environ.pop("EOSBATCH_LOG_DIR", None)
        with psycopg2.connect(settings.psycopg_dsn) as connection, connection.cursor() as cursor:
            cursor.execute("SELECT 1")  # the stack is still reachable for the other tests
