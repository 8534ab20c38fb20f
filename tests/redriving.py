"""A scenario for redriving dead letters (tests/integration/test_redrive.py, tests/chaos/test_chaos.py): the
pipeline of tests/pipelines/redrive.py, whose schema makes some records dead letters until it is fixed, its
own topics and table, the CLI run against them, and the independent count of the end state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime

from psycopg2 import sql

from eosbatch import faults
from eosbatch.kafka import clients
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import store
from examples.orders.generate import await_markers, ensure_topics
from tests.scenario import ROOT

NOT_NULL = "id STRING NOT NULL, n INT NOT NULL"
NULLABLE = "id STRING NOT NULL, n INT"


class Redrive:
    """tests/pipelines/redrive.py's pipeline, its topics and table, run by the CLI in processes of their own."""

    def __init__(self, settings, suffix: str, records: int = 30) -> None:
        self.settings, self.suffix = settings, suffix
        self.pipeline, self.input, self.output = f"redrive_{suffix}", f"redrive_in_{suffix}", f"redrive_out_{suffix}"
        ensure_topics(settings, {self.input: 2, self.output: 2})
        # Stamped by the test (the redriven records must reach the transform with their own), recently: Kafka's
        # time-based retention would delete records stamped days ago.
        self.base_ms = int(time.time() * 1000) - 60_000
        producer = clients.producer(settings)
        for i in range(records):  # every 5th lacks n (fixable); every 7th is not JSON at all (never fixable)
            value = b"not json" if i % 7 == 3 else json.dumps(
                {"id": f"r{i}", **({} if i % 5 == 1 else {"n": i})}).encode()
            producer.produce(self.input, value=value, key=f"r{i}".encode(), partition=i % 2,
                             timestamp=self.base_ms + i)
        producer.flush(30)
        await_markers(settings, [self.input])

    def env(self, fault: str | None = None, fixed: bool = True) -> dict[str, str]:
        """The CLI's environment; `fixed`: the pipeline with its schema fixed."""
        env = {**os.environ, "EOSBATCH_PIPELINES": "tests.pipelines.redrive", "EOSBATCH_TEST_SUFFIX": self.suffix,
               "EOSBATCH_TEST_FIXED": "1" if fixed else "0", "PYTHONPATH": str(ROOT)}
        env.pop(faults.FAULT, None)
        if fault:
            env[faults.FAULT] = fault
        return env

    def cli(self, *args: str, fixed: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "eosbatch.cli", *args], env=self.env(fixed=fixed),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, cwd=ROOT)

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

    def sink(self) -> dict[str, tuple[int | None, int]]:
        with store.transaction(self.settings) as cur:
            cur.execute(sql.SQL("SELECT id, n, ts FROM {}").format(sql.Identifier("public", self.pipeline)))
            return {i: (n, ts) for i, n, ts in cur.fetchall()}

    def batches(self) -> list[tuple[int, str, str]]:
        with store.transaction(self.settings) as cur:
            cur.execute("SELECT id, kind, state FROM eosbatch.batches WHERE pipeline = %s ORDER BY id",
                        (self.pipeline,))
            return [tuple(row) for row in cur.fetchall()]

    def assert_exactly_once(self, fixed: bool, verify: bool = True, recompute: bool = False) -> None:
        """The independent count: the input read back and parsed by the rules in plain Python against the sink,
        the read_committed output and the dead letters; then `eosbatch verify` (`recompute`: with its Spark
        recompute of the sink and the malformed records from the committed input)."""
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
        stamp = {r.key.decode(): self.base_ms + int(r.key[1:]) for r in inputs}  # as produced
        sink, wanted = self.sink(), {i: (n, stamp[i]) for i, (n, _, _) in expected.items()}
        assert sink == wanted, (sorted(set(sink.items()) - set(wanted.items())),
                                sorted(set(wanted.items()) - set(sink.items())), self.batches())
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
        if verify:
            self.ok("verify", self.pipeline, *([] if recompute else ["--no-recompute"]), fixed=fixed)
