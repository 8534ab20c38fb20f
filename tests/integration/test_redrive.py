"""Redriving dead letters on the real stack, through the `eosbatch` CLI as a user runs it: a pipeline whose
schema makes some records dead letters, the schema fixed, `eosbatch dead-letters redrive`, then the
independent count (input vs sink vs read_committed output vs dead letters, the redriven ones marked); a second
redrive does nothing, and a record that fails again keeps the new reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime

import pytest
from psycopg2 import sql

from eosbatch import faults
from eosbatch.kafka import clients
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import store
from examples.orders.generate import await_markers, ensure_topics
from tests.scenario import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NOT_NULL = "id STRING NOT NULL, n INT NOT NULL"
NULLABLE = "id STRING NOT NULL, n INT"
BASE_MS = 1_700_000_000_000


class Redrive:
    """tests/pipelines/redrive.py's pipeline, its topics and table, run by the CLI in processes of their own."""

    def __init__(self, settings, suffix: str, records: int = 30) -> None:
        self.settings, self.suffix = settings, suffix
        self.pipeline, self.input, self.output = f"redrive_{suffix}", f"redrive_in_{suffix}", f"redrive_out_{suffix}"
        ensure_topics(settings, {self.input: 2, self.output: 2})
        producer = clients.producer(settings)
        for i in range(records):  # every 5th lacks n (fixable); every 7th is not JSON at all (never fixable)
            value = b"not json" if i % 7 == 3 else json.dumps(
                {"id": f"r{i}", **({} if i % 5 == 1 else {"n": i})}).encode()
            producer.produce(self.input, value=value, key=f"r{i}".encode(), partition=i % 2, timestamp=BASE_MS + i)
        producer.flush(30)
        await_markers(settings, [self.input])

    def cli(self, *args: str, fixed: bool, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "EOSBATCH_PIPELINES": "tests.pipelines.redrive", "EOSBATCH_TEST_SUFFIX": self.suffix,
               "EOSBATCH_TEST_FIXED": "1" if fixed else "0", "PYTHONPATH": str(ROOT)}
        env.pop(faults.FAULT, None)
        if fault:
            env[faults.FAULT] = fault
        return subprocess.run([sys.executable, "-m", "eosbatch.cli", *args], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=600, cwd=ROOT)

    def ok(self, *args: str, fixed: bool = True) -> str:
        done = self.cli(*args, fixed=fixed)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    def redrive(self, *args: str) -> dict:
        return json.loads(self.ok("dead-letters", "redrive", self.pipeline, "--json", *args))

    def dead_letters(self) -> dict[tuple[int, int], tuple[int, str, int | None, datetime | None]]:
        """(partition, offset) -> (id, reason, redriven by, timestamp)."""
        with store.transaction(self.settings) as cur:
            cur.execute('SELECT partition, "offset", id, error, redriven_by, "timestamp" FROM eosbatch.dead_letters '
                        "WHERE pipeline = %s", (self.pipeline,))
            return {(p, o): (i, e, r, t) for p, o, i, e, r, t in cur.fetchall()}

    def sink(self) -> dict[str, tuple[int | None, datetime]]:
        with store.transaction(self.settings) as cur:
            cur.execute(sql.SQL("SELECT id, n, ts FROM {}").format(sql.Identifier("public", self.pipeline)))
            return {i: (n, ts) for i, n, ts in cur.fetchall()}

    def batches(self) -> list[tuple[int, str, str]]:
        with store.transaction(self.settings) as cur:
            cur.execute("SELECT id, kind, state FROM eosbatch.batches WHERE pipeline = %s ORDER BY id",
                        (self.pipeline,))
            return [tuple(row) for row in cur.fetchall()]

    def assert_exactly_once(self, fixed: bool) -> None:
        """The independent count: the input read back and parsed by the rules in plain Python against the sink,
        the read_committed output and the dead letters."""
        inputs = read_topic(self.settings, self.input)
        good, fixable, broken = {}, {}, []
        for r in inputs:
            try:
                value = json.loads(r.value)
            except ValueError:
                broken.append((r.partition, r.offset))
                continue
            (fixable if "n" not in value else good)[value["id"]] = (value.get("n"), r.partition, r.offset)
        expected = {**good, **fixable} if fixed else good
        stamp = {r.key.decode(): datetime.fromtimestamp((BASE_MS + int(r.key[1:])) / 1000, UTC) for r in inputs}
        assert self.sink() == {i: (n, stamp[i]) for i, (n, _, _) in expected.items()}
        published = Counter(r.key.decode() for r in read_topic(self.settings, self.output))
        assert published == Counter(set(expected))  # each sink row's record once among read_committed records
        dead = self.dead_letters()
        assert set(dead) == {(p, o) for _, p, o in fixable.values()} | set(broken)  # dead letters stay
        redriven = {k for k, (_, _, by, _) in dead.items() if by is not None}
        assert redriven == ({(p, o) for _, p, o in fixable.values()} if fixed else set())
        schema = NULLABLE if fixed else NOT_NULL
        assert {dead[k][1] for k in broken} == {f"not a JSON object matching schema ({schema})"}
        assert all(dead[k][3] is not None for k in dead)  # the record's Kafka timestamp is kept with it
        assert {s for _, _, s in self.batches()} == {"published"}


@pytest.mark.slow
def test_redrive_after_a_schema_fix_runs_each_dead_letter_once(settings, unique):
    scenario = Redrive(settings, unique)
    scenario.ok("run", scenario.pipeline, fixed=False)
    scenario.assert_exactly_once(fixed=False)
    dead = scenario.dead_letters()
    missing = sorted(i for i, e, _, _ in dead.values() if e == "missing required field 'n'")
    assert len(missing) == 6 and len(dead) == 10

    # Asked without --yes where nobody can answer: refused, nothing changes.
    refused = scenario.cli("dead-letters", "redrive", scenario.pipeline, "--all", fixed=True)
    assert refused.returncode == 2 and "give --yes" in refused.stderr
    listed = scenario.redrive("--error-like", "missing required%", "--dry-run")
    assert [d["id"] for d in listed["chosen"]] == missing and listed["dry_run"]

    # The schema fixed: the missing-n records go through in one redrive batch; the broken ones fail again.
    done = scenario.redrive("--all", "--limit", "100", "--yes")
    assert (len(done["chosen"]), done["redriven"], done["dead_letters"]) == (10, 6, 4)
    assert done["published"] == 6 and len(done["batches"]) == 1
    assert [k for _, k, _ in scenario.batches()] == ["regular", "redrive"]
    scenario.assert_exactly_once(fixed=True)

    # A second redrive of the same records does nothing; only the broken ones are left to choose.
    again = scenario.redrive("--error-like", "missing required%", "--yes")
    assert again["chosen"] == [] and again["batches"] == []
    left = scenario.redrive("--all", "--dry-run")
    assert sorted(d["id"] for d in left["chosen"]) == sorted(i for i, _, by, _ in scenario.dead_letters().values()
                                                              if by is None)
    assert len(scenario.batches()) == 2
    scenario.assert_exactly_once(fixed=True)
