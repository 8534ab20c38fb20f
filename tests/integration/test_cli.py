"""The CLI's safety conventions on the real stack, as a user (or a DAG task) runs it, with no terminal on stdin:
`reset --dry-run` and `abort --dry-run` print what would happen and change nothing in the ledger (counted
here with SQL of the test's own), a real run then does what the dry run printed, and `db downgrade` to base
refuses without --yes (the ledger stays) and drops it with --yes, on a database of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg2
import pytest

from eosbatch import config, faults
from eosbatch.cli_parser import EXIT_USAGE
from tests.scenario import ROOT, Scenario

pytestmark = pytest.mark.integration


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def ledger_rows(settings, pipeline: str) -> dict[str, list[tuple]]:  # type: ignore[type-arg]
    """Everything of the pipeline the ledger holds that a reset or an abort would change."""
    queries = {
        "pipelines": "SELECT name, epoch, backfill_epoch FROM eosbatch.pipelines WHERE name = %s",
        "batches": "SELECT id, kind, state, epoch, error FROM eosbatch.batches WHERE pipeline = %s ORDER BY id",
        "partition_offsets": "SELECT topic, partition, next_offset, incarnation FROM eosbatch.partition_offsets "
                             "WHERE pipeline = %s ORDER BY topic, partition",
        "source_topics": "SELECT topic, topic_id, incarnation FROM eosbatch.source_topics WHERE pipeline = %s",
        "source_resets": "SELECT topic, partition, to_offset FROM eosbatch.source_resets WHERE pipeline = %s",
        "committed_ranges": "SELECT topic, partition, offsets::text FROM eosbatch.committed_ranges "
                            "WHERE pipeline = %s ORDER BY 1, 2, 3",
        "lane_leases": "SELECT lane, owner FROM eosbatch.lane_leases WHERE pipeline = %s ORDER BY lane",
    }
    with psycopg2.connect(settings.psycopg_dsn) as connection, connection.cursor() as cur:
        found = {}
        for table, query in queries.items():
            cur.execute(query, (pipeline,))
            found[table] = cur.fetchall()
    connection.close()
    return found


@pytest.fixture
def planned(settings, unique) -> Iterator[tuple[Scenario, int]]:
    """A pipeline whose runner died right after planning its first batch: one unfinished batch."""
    scenario = Scenario(settings, unique, "totals", records=600, batch=1000)
    assert scenario.run("plan.after_commit").returncode == faults.EXIT_CODE
    (batch_id, _, state), = scenario.batches()
    assert state == "planned"
    yield scenario, batch_id


def test_abort_dry_run_prints_the_batches_and_changes_nothing(settings, planned):
    scenario, batch_id = planned
    before = ledger_rows(settings, scenario.pipeline)
    out = ok(scenario.cli("abort", scenario.pipeline, "--dry-run"))
    assert f"batch {batch_id}: planned, would be aborted" in out and "1 batch(es) would be aborted" in out
    assert ledger_rows(settings, scenario.pipeline) == before
    out = ok(scenario.cli("abort", scenario.pipeline, str(batch_id), "--dry-run"))
    assert f"batch {batch_id}: planned, would be aborted" in out
    assert ledger_rows(settings, scenario.pipeline) == before

    assert "aborted 1 batch(es)" in ok(scenario.cli("abort", scenario.pipeline))
    assert scenario.batches() == [(batch_id, "regular", "aborted")]


def test_reset_dry_run_prints_the_moves_changes_nothing_and_the_reset_then_makes_them(settings, planned):
    scenario, batch_id = planned
    move = ["reset", scenario.pipeline, "--partition", f"{scenario.input}:0", "--to", "5", "--reason", "cli test"]
    before = ledger_rows(settings, scenario.pipeline)
    assert before["partition_offsets"] and not before["source_resets"]

    out = ok(scenario.cli(*move, "--dry-run"))
    would = [line for line in out.splitlines() if line.startswith("would reset ")]
    assert would == [f"would reset {scenario.input}:0: skipped 0-5 (incarnation 0)"], out
    assert f"batch {batch_id}: planned, would be aborted by the reset's recovery" in out
    assert "dry run: nothing changed; 1 partition(s) would be reset" in out
    assert ledger_rows(settings, scenario.pipeline) == before

    refused = scenario.cli(*move)  # no terminal, no --yes
    assert refused.returncode == EXIT_USAGE, refused.stderr
    assert "not a terminal" in refused.stderr and "--yes" in refused.stderr and f"{scenario.input}:0" in refused.stderr
    assert ledger_rows(settings, scenario.pipeline) == before

    out = ok(scenario.cli(*move, "--yes"))
    assert [line for line in out.splitlines() if line.startswith("reset ")] == [
        line.removeprefix("would ") for line in would]
    after = ledger_rows(settings, scenario.pipeline)
    assert after["source_resets"] == [(scenario.input, 0, 5)]
    assert (scenario.input, 0, 5, 0) in after["partition_offsets"]
    assert scenario.batches() == [(batch_id, "regular", "aborted")]


def has_ledger(url: str) -> bool:
    with psycopg2.connect(config.to_libpq_url(url)) as connection, connection.cursor() as cur:
        cur.execute("SELECT to_regclass('eosbatch.batches') IS NOT NULL")
        found = bool(cur.fetchone()[0])
    connection.close()
    return found


def test_downgrade_to_base_refuses_without_yes_and_drops_the_ledger_with_it(settings, unique, fresh_database):
    name = fresh_database.rsplit("/", 1)[1]

    def db(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "eosbatch.cli", "db", *args],
                              env={**os.environ, "PYTHONPATH": str(ROOT), config.DATABASE_URL: fresh_database},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, cwd=ROOT)

    ok(db("upgrade"))
    assert has_ledger(fresh_database)
    for refused in (db("downgrade"), db("downgrade", "base")):
        assert refused.returncode == EXIT_USAGE, refused.stderr
        assert "schema eosbatch" in refused.stderr and "dead letters" in refused.stderr
        assert "--yes" in refused.stderr and name in refused.stderr
        assert has_ledger(fresh_database)
    assert ok(db("downgrade", "--yes")).strip() == "ledger at revision None"
    assert not has_ledger(fresh_database)
    ok(db("upgrade"))
    assert has_ledger(fresh_database)


@pytest.mark.spark
def test_json_documents_carry_the_facts_of_the_text(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=600, batch=1000)
    ran = json.loads(ok(scenario.cli("run", scenario.pipeline, "--json")))
    batches = scenario.batches()
    assert ran["pipeline"] == scenario.pipeline and ran["batches"] == len(batches) >= 1
    assert all(state == "published" for _, _, state in batches)
    assert ran["records_read"] > 0 and ran["sink_rows"] > 0 and ran["published"] == ran["sink_rows"]

    verified = scenario.cli("verify", scenario.pipeline, "--no-recompute", "--json")
    audit = json.loads(ok(verified))
    assert audit["pipeline"] == scenario.pipeline and audit["ok"] is True
    assert audit["findings"] and all({"check", "ok", "detail"} == set(f) for f in audit["findings"])
    text = ok(scenario.cli("verify", scenario.pipeline, "--no-recompute"))
    assert len(text.splitlines()) == len(audit["findings"]) + 1
    assert all(f"{f['check']}: {f['detail']}" in text for f in audit["findings"])

    replayed = json.loads(ok(scenario.cli("replay", scenario.pipeline, str(batches[0][0]), "--json")))
    assert (replayed["batch_id"], replayed["action"], replayed["batches"]) == (batches[0][0], "nothing", [])
    assert "already published" in replayed["message"]

    planned = json.loads(ok(scenario.cli("backfill", scenario.pipeline, "--range", f"{scenario.input}:0:0-10",
                                         "--dry-run", "--json")))
    assert planned["dry_run"] is True and planned["mode"] == "fill"
    assert planned["plan"]["requested"] == [f"{scenario.input}:0:0-10"]
    assert planned["plan"]["batches"] == [] and planned["plan"]["offsets"] == 0  # all of it is committed
    assert scenario.batches() == batches


def test_stack_status_json_names_what_the_text_names(settings):
    def status(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "eosbatch.cli", "stack", "status", *args], capture_output=True,
                              text=True, timeout=60, check=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout

    shown = json.loads(status("--json"))
    text = status()
    assert f"home:     {shown['home']}" in text
    assert f"kafka:    {shown['kafka']['bootstrap']} pid={shown['kafka']['pid'] or 'stopped'} " in text
    assert f"postgres: {shown['postgres']['url']} pid={shown['postgres']['pid'] or 'stopped'} " in text
    assert f"spark:    {shown['spark']['remote']} pid={shown['spark']['pid'] or 'stopped'} " in text
