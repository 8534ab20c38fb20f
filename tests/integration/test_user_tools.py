"""The commands a new user starts with, on the real stack and through the CLI as a user runs it: `topic create`
(again with the same partitions is fine, with others an error naming both counts), `produce` of a JSON-lines
file read back read_committed with its keys, a bad line refused by its number with nothing produced,
`pipelines --json` listing a test pipeline, and `check` passing for a ready pipeline and failing by name for a
missing source topic or a sink table without the key's unique index."""

from __future__ import annotations

import json
import subprocess

import pytest
from psycopg2 import sql

from eosbatch.cli_parser import EXIT_TERMINAL, EXIT_VIOLATION
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import store
from tests.scenario import Scenario

pytestmark = pytest.mark.integration


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def test_a_topic_is_created_and_a_file_of_json_lines_produced_into_it(settings, unique, tmp_path) -> None:
    s = Scenario(settings, unique, "latest", records=0, create_output=False)
    topic = f"user_tools_{unique}"
    assert f"topic {topic}: created with 3 partition(s)" in ok(s.cli("topic", "create", topic, "--partitions", "3"))
    assert "exists already with 3 partition(s)" in ok(s.cli("topic", "create", topic, "--partitions", "3"))
    other = s.cli("topic", "create", topic, "--partitions", "2")
    assert other.returncode == EXIT_TERMINAL
    assert "exists with 3 partition(s), not the 2 asked for" in other.stderr
    too_many = s.cli("topic", "create", f"{topic}_rf", "--replication-factor", "3")  # a broker of one node
    assert too_many.returncode == EXIT_TERMINAL and "ConfigError: --replication-factor: " in too_many.stderr

    lines = [json.dumps({"order_id": f"o-{i}", "amount": i}) for i in range(25)]
    path = tmp_path / "orders.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    assert f"25 record(s) committed to {topic}" in ok(s.cli("produce", topic, str(path), "--key", "order_id",
                                                            "--per-transaction", "10"))
    records = read_topic(settings, topic)
    assert sorted((r.key, r.value) for r in records) == sorted(
        (f"o-{i}".encode(), line.encode()) for i, line in enumerate(lines))
    nowhere = s.cli("produce", f"{topic}_none", str(path))
    assert nowhere.returncode == EXIT_TERMINAL and f"topic '{topic}_none' does not exist" in nowhere.stderr


def test_a_bad_line_is_refused_by_its_number_and_nothing_is_produced(settings, unique, tmp_path) -> None:
    s = Scenario(settings, unique, "latest", records=0, create_output=False)
    topic = f"user_tools_bad_{unique}"
    ok(s.cli("topic", "create", topic))
    path = tmp_path / "orders.jsonl"
    path.write_text('{"order_id": "a"}\n{"order_id": "b"}\n\n[1, 2]\n{"order_id": "c"}\n')
    refused = s.cli("produce", topic, str(path), "--per-transaction", "1")
    assert refused.returncode == EXIT_TERMINAL
    assert "line 4: a JSON list, not an object; nothing produced" in refused.stderr
    assert read_topic(settings, topic, isolation="read_uncommitted") == []


def test_pipelines_lists_the_registered_pipelines(settings, unique) -> None:
    s = Scenario(settings, unique, "latest", records=0, create_output=False)
    listed = {p["name"]: p for p in json.loads(ok(s.cli("pipelines", "--json")))}
    assert listed[s.pipeline] == {"name": s.pipeline, "source_topics": [s.input],
                                  "sink": {"table": f"public.crash_latest_{unique}", "key": ["order_id"],
                                           "mode": "replace"},
                                  "output_topic": s.output, "schedule": None}
    assert listed[f"crash_totals_{unique}"]["sink"]["mode"] == "accumulate"
    assert f"{s.pipeline}: {s.input} -> public.crash_latest_{unique} (replace, key order_id) -> {s.output}" \
        in ok(s.cli("pipelines"))


def test_check_passes_for_a_ready_pipeline_and_names_what_is_missing(settings, unique) -> None:
    s = Scenario(settings, unique, "latest", records=0)
    shown = ok(s.cli("check", s.pipeline))
    assert f"ok    source topic {s.input}: 3 partition(s)" in shown
    assert f"ok    output topic {s.output}: 3 partition(s)" in shown
    assert f"{s.pipeline}: ready" in shown
    verdict = json.loads(ok(s.cli("check", s.pipeline, "--json")))
    assert verdict["ok"] and {c["name"] for c in verdict["checks"]} == {
        "pipeline", f"source topic {s.input}", f"output topic {s.output}", "kafka permissions", "ledger",
        "transform output", f"sink table public.crash_latest_{unique}", "postgres privileges"}

    s.env_overrides["EOSBATCH_TEST_SUFFIX"] = f"{unique}x"  # the same pipelines over topics nobody created
    missing = s.cli("check", f"crash_latest_{unique}x")
    assert missing.returncode == EXIT_VIOLATION, missing.stdout + missing.stderr
    assert f"FAIL  source topic crash_in_{unique}x: does not exist" in missing.stdout
    del s.env_overrides["EOSBATCH_TEST_SUFFIX"]

    unknown = s.cli("check", f"no_such_{unique}")
    assert unknown.returncode == EXIT_VIOLATION and "FAIL  pipeline: " in unknown.stdout

    table = sql.Identifier("public", f"crash_latest_{unique}")
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("CREATE TABLE {} (order_id text, amount numeric)").format(table))
    try:
        no_index = s.cli("check", s.pipeline)
        assert no_index.returncode == EXIT_VIOLATION
        assert "has no unique index on exactly ['order_id']" in no_index.stdout
    finally:
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("DROP TABLE {}").format(table))
