"""The soak's end: the independent count (input vs sink vs read_committed output vs dead letters), the judges of
exactly-once, and the figure of records committed that the floor is asserted on.

Judges, each an anomaly list (empty: it holds):
- the history checker of tests/history when this checkout has it (it imports nothing of eosbatch);
- Scenario.assert_exactly_once, the chaos tests' independent check;
- `eosbatch verify PIPELINE --json`, with its Spark recompute of the sink from the committed input."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field

from psycopg2 import sql

from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import positions, store
from examples.orders import generate
from tests.chaos.control import ROOT
from tests.scenario import Scenario


@dataclass
class Count:
    input_records: int = 0        # read_committed records of the input topic
    input_orders: int = 0         # of them valid orders
    input_malformed: int = 0
    covered_offsets: int = 0      # offsets the ledger says the pipeline consumed (markers and aborted ones too)
    sink_orders: int = 0          # the sink's sum of order_count
    dead_letters: int = 0
    output_records: int = 0       # read_committed records of the output topic
    output_orders: int = 0        # the order counts the output's deltas add up to
    batches: dict[str, int] = field(default_factory=dict)  # the pipeline's batches by state
    longest_stall_s: float = 0.0  # the longest time between two commits of the pipeline's batches (committed_at)

    @property
    def committed(self) -> int:
        """Input records the pipeline committed: the orders in the sink and the dead letters."""
        return self.sink_orders + self.dead_letters


@dataclass
class Verdict:
    judges: dict[str, list[str]] = field(default_factory=dict)  # judge -> its anomalies
    aborted_attempts: int | None = None  # the output log's aborted Kafka transactions (the history checker's count)

    @property
    def anomalies(self) -> int:
        return sum(len(found) for found in self.judges.values())


def committed(scenario: Scenario) -> Count:
    """The ledger's and the sink's side only (cheap: no topic read): for the floor at the end of the faults."""
    count = Count()
    table = sql.Identifier("public", f"crash_totals_{scenario.suffix}")
    with store.transaction(scenario.settings) as cur:
        cur.execute(sql.SQL("SELECT coalesce(sum(order_count), 0) FROM {}").format(table))
        count.sink_orders = int(cur.fetchone()[0])
        cur.execute("SELECT count(*) FROM eosbatch.dead_letters WHERE pipeline = %s", (scenario.pipeline,))
        count.dead_letters = int(cur.fetchone()[0])
        count.covered_offsets = sum(positions.next_offsets(cur, scenario.pipeline).values())
        cur.execute("SELECT state, count(*) FROM eosbatch.batches WHERE pipeline = %s GROUP BY state",
                    (scenario.pipeline,))
        count.batches = {state: int(n) for state, n in cur.fetchall()}
        cur.execute("SELECT max(gap) FROM (SELECT extract(epoch FROM committed_at - lag(committed_at) OVER "
                    "(ORDER BY committed_at)) AS gap FROM eosbatch.batches WHERE pipeline = %s AND committed_at "
                    "IS NOT NULL) AS gaps", (scenario.pipeline,))
        count.longest_stall_s = float(cur.fetchone()[0] or 0)
    return count


def independent_count(scenario: Scenario) -> Count:
    count = committed(scenario)
    inputs = read_topic(scenario.settings, scenario.input)
    orders, malformed = generate.valid_orders(inputs)
    count.input_records, count.input_orders, count.input_malformed = len(inputs), len(orders), malformed
    outputs = read_topic(scenario.settings, scenario.output)
    count.output_records = len(outputs)
    count.output_orders = sum(int(json.loads(r.value)["order_count"]) for r in outputs)
    return count


def count_anomalies(count: Count) -> list[str]:
    found = []
    if count.sink_orders != count.input_orders:
        found.append(f"sink holds {count.sink_orders} orders, the input {count.input_orders}")
    if count.dead_letters != count.input_malformed:
        found.append(f"{count.dead_letters} dead letters for {count.input_malformed} malformed input records")
    if count.output_orders != count.sink_orders:
        found.append(f"the output's deltas add up to {count.output_orders} orders, the sink {count.sink_orders}")
    return found


def scenario_anomalies(scenario: Scenario) -> list[str]:
    try:
        scenario.assert_exactly_once()
    except AssertionError as exc:
        return [f"Scenario.assert_exactly_once: {str(exc)[:2000]}"]
    return []


def verify_anomalies(scenario: Scenario) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "eosbatch.cli", "verify", scenario.pipeline, "--json"],
                          env=scenario.env(), capture_output=True, text=True, timeout=1800, cwd=ROOT)
    try:
        document = json.loads(done.stdout)
    except ValueError:
        return [f"eosbatch verify: exit {done.returncode}, no JSON: {done.stderr[-1500:]}"]
    return [f"eosbatch verify {f['check']}: {f['detail']}" for f in document["findings"] if f["ok"] is False]


def history_available() -> bool:
    return importlib.util.find_spec("tests.history") is not None


def judge(scenario: Scenario, count: Count) -> Verdict:
    """Every judge's anomalies; a judge that could not judge says so as one (the soak cannot pass then)."""
    verdict = Verdict()
    verdict.judges["independent count"] = count_anomalies(count)

    def history() -> list[str]:
        from tests.soak.history import history_anomalies

        found, verdict.aborted_attempts = history_anomalies(scenario)
        return found

    judges = {"history checker": history} if history_available() else {}
    judges.update({"Scenario.assert_exactly_once": lambda: scenario_anomalies(scenario),
                   "eosbatch verify": lambda: verify_anomalies(scenario)})
    for name, run in judges.items():
        try:
            verdict.judges[name] = run()
        except Exception as exc:  # noqa: BLE001 - reported as the judge's failure, the others still judge
            verdict.judges[name] = [f"could not judge: {type(exc).__name__}: {str(exc)[:500]}"]
    return verdict

