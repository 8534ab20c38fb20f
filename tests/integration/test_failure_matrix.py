"""DESIGN.md's failure matrix, row by row: the runner dies for real (os._exit through EOSBATCH_FAULT) at a
protocol step; the next run must end with nothing lost and nothing duplicated, in the sink and in the
output topic read with read_committed. The input holds aborted transactions (so ranges have gaps),
repeated order ids and malformed records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from eosbatch import faults
from eosbatch.ledger import store
from eosbatch.verify import check_output, coverage_gaps, read_topic
from examples.orders import generate

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


class Scenario:
    """One test's own topics, pipelines and ledger rows, and the checks of the end state."""

    def __init__(self, settings, suffix: str, kind: str) -> None:
        self.settings, self.suffix, self.kind = settings, suffix, kind
        self.pipeline = f"crash_{kind}_{suffix}"
        self.input = f"crash_in_{suffix}"
        self.output = f"crash_{kind}_out_{suffix}"
        generate.ensure_topics(settings, {self.input: 3, self.output: 3})
        generate.generate(settings, self.input, records=2400, partitions=3, transaction_size=200,
                          malformed_every=331, seed=len(suffix) + 11, customers=40)

    def run(self, fault: str | None = None, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "EOSBATCH_PIPELINES": "tests.pipelines.crash", "EOSBATCH_TEST_SUFFIX": self.suffix,
               "PYTHONPATH": str(ROOT), "EOSBATCH_SPARK_MASTER": "local[2,3]"}  # 3 tries per Spark task
        env.pop(faults.FAULT, None)
        if fault:
            env[faults.FAULT] = fault
        return subprocess.run([sys.executable, "-m", "eosbatch.cli", "run", self.pipeline, *args], env=env,
                              capture_output=True, text=True, timeout=900, cwd=ROOT)

    def states(self) -> list[str]:
        with store.transaction(self.settings) as cur:
            cur.execute("SELECT state FROM eosbatch.batches WHERE pipeline = %s ORDER BY id", (self.pipeline,))
            return [row[0] for row in cur.fetchall()]

    def assert_exactly_once(self) -> None:
        inputs = read_topic(self.settings, self.input)
        orders, malformed = generate.valid_orders(inputs)
        assert not any(o["customer_id"].startswith("ghost") for o in orders), "read_committed leaked"
        with store.transaction(self.settings) as cur:
            if self.kind == "totals":
                cur.execute(f'SELECT customer_id, total_amount, order_count FROM public."crash_totals_{self.suffix}"')
                got = {c: (Decimal(t), n) for c, t, n in cur.fetchall()}
                assert got == generate.expected_totals(orders)
            else:
                cur.execute(f'SELECT order_id, amount FROM public."crash_latest_{self.suffix}"')
                got_latest = dict(cur.fetchall())
                assert got_latest == {k: v["amount"] for k, v in generate.expected_latest(orders).items()}
            cur.execute('SELECT topic, partition, "offset" FROM eosbatch.dead_letters WHERE pipeline = %s',
                        (self.pipeline,))
            dead = cur.fetchall()
            next_offsets = store.next_offsets(cur, self.pipeline)
        assert len(dead) == malformed and all(t == self.input for t, _, _ in dead)
        stable = {tp.partition: o for tp, o in next_offsets.items()}
        assert stable and all(o > 0 for o in stable.values())
        assert not coverage_gaps(self.settings, self.pipeline)
        assert set(self.states()) <= {"published", "aborted"}
        outputs = read_topic(self.settings, self.output)
        check = check_output(self.settings, self.pipeline, self.output, outputs)
        assert check.ok, check
        if self.kind == "totals":  # the deltas published add up to the sink: no batch published twice
            sums: dict[str, Decimal] = {}
            for record in outputs:
                row = json.loads(record.value)
                sums[row["customer_id"]] = sums.get(row["customer_id"], Decimal(0)) + Decimal(str(row["total_amount"]))
            assert sums == {k: v[0] for k, v in generate.expected_totals(orders).items()}


@pytest.mark.parametrize(("fault", "kind", "left"), [
    ("plan.after_commit", "totals", "planned"),
    ("process.before_staged", "totals", "planned"),
    ("process.after_staged", "latest", "staged"),
    ("commit.before_commit", "totals", "staged"),
    ("commit.after_commit", "totals", "committed"),
    ("publish.mid_produce", "totals", "committed"),
    ("publish.after_kafka_commit", "latest", "committed"),
])
def test_runner_killed_at_step_then_next_run_recovers_exactly_once(settings, unique, fault, kind, left):
    scenario = Scenario(settings, unique, kind)
    crashed = scenario.run(fault, "--max-batches", "2")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-2000:]
    assert f"fault injected at" in crashed.stderr
    assert scenario.states()[-1] == left
    if fault == "publish.mid_produce":  # the open transaction's records are in the log, invisible
        assert len(read_topic(settings, scenario.output, "read_uncommitted")) > 0
        assert read_topic(settings, scenario.output) == []
    recovered = scenario.run()
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    scenario.assert_exactly_once()


def test_spark_task_attempt_dies_after_writing_staging_rows(settings, unique):
    """An executor dies after its rows are committed to staging; Spark retries the task; only the
    successful attempt's rows count (the first attempt's stay in staging until finalize)."""
    scenario = Scenario(settings, unique, "totals")
    result = scenario.run("process.mid_staging")
    assert result.returncode == 0, result.stderr[-3000:]
    scenario.assert_exactly_once()
    assert "published" in scenario.states()
