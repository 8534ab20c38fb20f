"""The soak's use of the history checker (tests/history, issue 37 item 5): the totals pipeline's history, its
sink compared with its output as an accumulate sink, every input record below the next offsets (the soak judges
after the drain, caught up). Imported only when this checkout has tests/history."""

from __future__ import annotations

from tests.history.check import run
from tests.history.collect import SinkSpec, Where
from tests.scenario import Scenario


def history_anomalies(scenario: Scenario) -> list[str]:
    sink = SinkSpec(f"public.crash_totals_{scenario.suffix}", ("customer_id",), "accumulate",
                    ("total_amount", "order_count"))
    found = run(scenario.pipeline, scenario.output, sink, Where.from_env(scenario.env()), caught_up=True)
    return [anomaly.line() for anomaly in found]
