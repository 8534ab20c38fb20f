"""The metrics' setting (fail fast, naming EOSBATCH_METRICS), what a step measures (read back through the SDK's
own in-memory reader), the lanes `eosbatch status` calls blocked or failing, and the page that documents them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from eosbatch import config, metrics, telemetry
from eosbatch.cli_parser import parser
from eosbatch.exceptions import ConfigError, Fenced, TerminalError, TransientError
from eosbatch.ledger.store import Batch
from eosbatch.overview import lane_states
from eosbatch.protocol.lease import Lease

pytestmark = pytest.mark.unit

ENV = {config.DATABASE_URL: "postgresql+psycopg2://eos@127.0.0.1:5432/eosbatch",
       config.KAFKA_BOOTSTRAP: "127.0.0.1:9092"}
DOC = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


@pytest.mark.parametrize("raw, target", [("", "global"), (" OTLP ", "otlp"), ("none", "none"),
                                         ("global", "global")])
def test_metrics_targets_are_read(raw, target):
    assert config.load({**ENV, config.METRICS: raw}).metrics == target


def test_a_metrics_file_is_an_absolute_path_in_a_folder_that_exists(tmp_path):
    target = f"file:{tmp_path / 'metrics.jsonl'}"
    settings = config.load({**ENV, config.METRICS: target})
    assert settings.metrics == target and config.load(config.to_env(settings)).metrics == target


@pytest.mark.parametrize("raw", ["prometheus", "file:relative.jsonl", "file:/no/such/folder/m.jsonl", "otlp:x"])
def test_a_bad_metrics_setting_fails_naming_it(raw):
    with pytest.raises(ConfigError) as found:
        config.load({**ENV, config.METRICS: raw})
    assert found.value.field == config.METRICS and repr(raw.split(":", 1)[-1])[1:-1] in str(found.value)


def test_an_unknown_otlp_protocol_fails_naming_the_setting(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigError) as found:
        telemetry.metrics(config.load({**ENV, config.METRICS: "otlp"}))
    assert found.value.field == config.METRICS and "http/json" in str(found.value)


def test_none_measures_nothing():
    assert telemetry.metrics(config.load({**ENV, config.METRICS: "none"})) is metrics.NO_METRICS


def _measured(body: Any) -> dict[str, list[Any]]:
    reader = InMemoryMetricReader()
    measure = metrics.Metrics(MeterProvider(metric_readers=[reader]).get_meter(metrics.METER))
    body(measure)
    data = reader.get_metrics_data()
    return {m.name: list(m.data.data_points) for r in data.resource_metrics for s in r.scope_metrics
            for m in s.metrics}


@pytest.mark.parametrize("error, counted", [(TerminalError("bad data"), True), (ConfigError("x", "y"), True),
                                            (Fenced("another runner"), False), (TransientError("later"), False),
                                            (ValueError("a bug"), False)])
def test_a_step_counts_a_terminal_error_by_its_type_and_times_every_outcome(error, counted):
    def fail(measure: metrics.Metrics) -> None:
        with pytest.raises(type(error)), measure.step("orders", "commit"):
            raise error

    found = _measured(fail)
    attributes = {"pipeline": "orders", "step": "commit", "error.type": type(error).__name__}
    [duration] = found[metrics.STEP_DURATION]
    assert dict(duration.attributes) == attributes and duration.count == 1
    assert [(dict(p.attributes), p.value) for p in found.get(metrics.TERMINAL_ERRORS, [])] == \
        ([(attributes, 1)] if counted else [])


def test_a_commit_adds_its_counts_and_the_lag_is_the_last_value_set():
    def run(measure: metrics.Metrics) -> None:
        with measure.step("orders", "plan"):
            measure.lag("orders", "in", 0, 500)
            measure.lag("orders", "in", 0, 0)
        measure.committed("orders", "regular", 100, 40, 3)
        measure.committed("orders", "regular", 50, 10, 0)

    found = _measured(run)
    assert [(dict(p.attributes), p.value) for p in found[metrics.LAG]] == \
        [({"pipeline": "orders", "topic": "in", "partition": 0}, 0)]
    totals = {name: [p.value for p in found[name]] for name in (metrics.BATCHES_COMMITTED, metrics.RECORDS_READ,
                                                                 metrics.SINK_ROWS, metrics.DEAD_LETTERS)}
    assert totals == {metrics.BATCHES_COMMITTED: [2], metrics.RECORDS_READ: [150], metrics.SINK_ROWS: [50],
                      metrics.DEAD_LETTERS: [3]}
    [plan] = found[metrics.STEP_DURATION]
    assert dict(plan.attributes) == {"pipeline": "orders", "step": "plan"} and plan.sum >= 0


def _batch(batch_id: int, kind: str, state: str, error: str | None = None) -> Batch:
    now = datetime.now(UTC)
    return Batch(batch_id, "orders", kind, state, 1, True, "g", None, None, None, None, None, None,  # type: ignore[arg-type]
                 error, now, now, None, None, None, None, ())


def _states(problems: list[str], unfinished: list[Batch], last: list[Batch], owners: dict[str, str] | None = None
            ) -> dict[str, tuple[str, int | None, str | None]]:
    leases = {lane: Lease(owner, None) for lane, owner in (owners or {}).items()}
    return {s["lane"]: (s["state"], s["batch"], s["error"]) for s in lane_states(problems, unfinished, last, leases)}


def test_lanes_are_idle_busy_failing_or_blocked():
    assert _states([], [], []) == {"regular": ("idle", None, None), "backfill": ("idle", None, None)}
    assert _states([], [_batch(7, "regular", "staged")], [_batch(7, "regular", "staged")])["regular"] == \
        ("busy", 7, None)
    assert _states([], [], [_batch(5, "backfill", "published")], {"backfill": "runner-1"})["backfill"] == \
        ("busy", 5, None)
    aborted = _batch(8, "replay", "aborted", "ValueError: no such column")
    assert _states([], [], [aborted])["backfill"] == ("failing", 8, "ValueError: no such column")
    stuck = _batch(9, "regular", "committed", "publish: TopicMissing: out")
    assert _states([], [stuck], [stuck])["regular"] == ("blocked", 9, "publish: TopicMissing: out")
    assert _states(["source topic 'in' was deleted and recreated"], [], [aborted]) == {
        lane: ("blocked", None, "source topic 'in' was deleted and recreated") for lane in ("regular", "backfill")}


def test_status_takes_one_pipeline_or_none():
    assert parser().parse_args(["status"]).pipeline is None
    assert parser().parse_args(["status", "orders", "--json"]).pipeline == "orders"


def test_the_monitoring_page_documents_every_metric_and_the_setting():
    page = DOC.read_text()
    names = [value for key, value in vars(metrics).items() if key.isupper() and isinstance(value, str)
             and value.startswith("eosbatch.")]
    assert len(names) == 7
    for name in names:
        assert re.search(rf"`{re.escape(name)}`", page), name
    for setting in (config.METRICS, *(f"`{t}`" for t in config.METRICS_TARGETS), "`file:"):
        assert setting in page


def test_global_measures_with_the_provider_the_process_sets_even_later():
    """What Airflow does with `[metrics] otel_on`: it sets the global MeterProvider as its task starts; the
    steps' measurements go to it, whether the meter was handed in before or after (a fresh interpreter: the
    global provider can be set once per process)."""
    probe = """
import json
from opentelemetry import metrics as otel
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from eosbatch import config, telemetry
settings = config.load({config.DATABASE_URL: "postgresql://eos@127.0.0.1:5432/e", config.KAFKA_BOOTSTRAP: "h:1"})
before = telemetry.metrics(settings)
reader = InMemoryMetricReader()
otel.set_meter_provider(MeterProvider(metric_readers=[reader]))
with before.step("orders", "plan"):
    pass
telemetry.metrics(settings).committed("orders", "regular", 7, 5, 1)
telemetry.flush()
found = {m.name: [p.attributes.get("step", p.attributes.get("kind")) for p in m.data.data_points]
         for r in reader.get_metrics_data().resource_metrics for s in r.scope_metrics for m in s.metrics}
print(json.dumps(found, sort_keys=True))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          cwd=DOC.parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        metrics.STEP_DURATION: ["plan"], metrics.BATCHES_COMMITTED: ["regular"], metrics.RECORDS_READ: ["regular"],
        metrics.SINK_ROWS: ["regular"], metrics.DEAD_LETTERS: ["regular"]}
