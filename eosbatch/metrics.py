"""What eosbatch measures, as OpenTelemetry instruments (the API only: which provider and exporter carry them is
eosbatch.telemetry's choice, made once at an edge; with none, the API's no-op meter measures nothing).

The instruments, with their attributes (docs/monitoring.md):
  eosbatch.lag               gauge, {record}: last stable offset - the pipeline's next offset, per partition, as the
                             plan step sees it (pipeline, topic, partition)
  eosbatch.step.duration     histogram, s: one protocol step of one batch (pipeline, step; error.type on a failure)
  eosbatch.records.read      counter, {record}: records the committed batches read (pipeline, kind)
  eosbatch.sink.rows         counter, {row}: rows the committed batches wrote to the sink (pipeline, kind)
  eosbatch.dead_letters      counter, {record}: dead letters the committed batches recorded (pipeline, kind)
  eosbatch.batches.committed counter, {batch}: batches committed (pipeline, kind)
  eosbatch.errors.terminal   counter, {error}: a step failed for good, retrying cannot help (pipeline, step,
                             error.type); a fenced runner (another one owns the lane) is not counted
The counts are added by the commit that decides them, once per batch, so they add up to the ledger's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import metrics as otel

from eosbatch.exceptions import Fenced, TerminalError

METER = "eosbatch"
LAG = "eosbatch.lag"
STEP_DURATION = "eosbatch.step.duration"
RECORDS_READ = "eosbatch.records.read"
SINK_ROWS = "eosbatch.sink.rows"
DEAD_LETTERS = "eosbatch.dead_letters"
BATCHES_COMMITTED = "eosbatch.batches.committed"
TERMINAL_ERRORS = "eosbatch.errors.terminal"
# Steps take from milliseconds (a plan with nothing to do) to many minutes (a large batch on Spark).
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class Metrics:
    """The instruments of one meter, and the measurements the steps make with them."""

    def __init__(self, meter: otel.Meter) -> None:
        self._lag = meter.create_gauge(LAG, unit="{record}", description="Records in the source partition after "
                                       "the pipeline's next offset, up to the last stable offset")
        self._duration = meter.create_histogram(STEP_DURATION, unit="s", description="Duration of one protocol "
                                                "step of one batch", explicit_bucket_boundaries_advisory=list(
                                                    DURATION_BUCKETS))
        self._read = meter.create_counter(RECORDS_READ, unit="{record}", description="Records read by the "
                                          "committed batches")
        self._sink = meter.create_counter(SINK_ROWS, unit="{row}", description="Sink rows written by the "
                                          "committed batches")
        self._dead = meter.create_counter(DEAD_LETTERS, unit="{record}", description="Dead letters recorded by "
                                          "the committed batches")
        self._committed = meter.create_counter(BATCHES_COMMITTED, unit="{batch}", description="Batches committed")
        self._terminal = meter.create_counter(TERMINAL_ERRORS, unit="{error}", description="Steps that failed "
                                              "with a terminal error (retrying cannot help)")

    @contextmanager
    def step(self, pipeline: str, step: str) -> Iterator[None]:
        """Around one step: its duration, and a terminal error counted by its type (then raised)."""
        started = time.perf_counter()
        attributes = {"pipeline": pipeline, "step": step}
        try:
            yield
        except BaseException as exc:
            attributes["error.type"] = type(exc).__name__
            if isinstance(exc, TerminalError) and not isinstance(exc, Fenced):
                self._terminal.add(1, attributes)
            raise
        finally:
            self._duration.record(time.perf_counter() - started, attributes)

    def lag(self, pipeline: str, topic: str, partition: int, records: int) -> None:
        self._lag.set(records, {"pipeline": pipeline, "topic": topic, "partition": partition})

    def committed(self, pipeline: str, kind: str, records_read: int, sink_rows: int, dead_letters: int) -> None:
        """A batch this process committed (counted once: a second commit call finds it committed already)."""
        attributes = {"pipeline": pipeline, "kind": kind}
        self._committed.add(1, attributes)
        self._read.add(records_read, attributes)
        self._sink.add(sink_rows, attributes)
        self._dead.add(dead_letters, attributes)


NO_METRICS = Metrics(otel.NoOpMeter(METER))
