"""The batch context: the settings, the pipeline and the log a protocol step works with, as one immutable value.

It is resolved once at an edge (the CLI's commands, an Airflow task, the Spark entry point) and handed to
every step; no step reads the environment or the pipeline registry itself, nor finds its own meter: the
edge hands in `metrics` (eosbatch.telemetry.metrics; by default nothing is measured). So a step runs as well on an
in-memory Pipeline and test settings as on what the environment names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from eosbatch.config import Settings
from eosbatch.metrics import NO_METRICS, Metrics
from eosbatch.pipeline import Pipeline

Log = Callable[[str], None]


def quiet(_: str) -> None:
    """The log of a step nobody watches."""


@dataclass(frozen=True)
class Context:
    settings: Settings
    pipeline: Pipeline
    log: Log = quiet
    metrics: Metrics = NO_METRICS

    def logging_to(self, log: Log) -> Context:
        return dataclasses.replace(self, log=log)
