"""Pipelines for the tests through a real Airflow: one scheduler serves several tests at once, so every
entry of EOSBATCH_TEST_SUFFIXES ("suffix[:start[:batch[:slow[:batches per run[:shape[:trigger]]]]]]",
comma-separated) gets the crash-test pipelines (tests/pipelines/factory.py), named as tests/scenario.py expects."""

import os

from eosbatch import Pipeline
from tests.pipelines.factory import make

SPECS = [spec.strip() for spec in os.environ.get("EOSBATCH_TEST_SUFFIXES", "").split(",") if spec.strip()]


def _pipelines(spec: str) -> tuple[Pipeline, Pipeline]:
    suffix, _, rest = spec.partition(":")
    start, _, rest = rest.partition(":")
    batch, _, rest = rest.partition(":")
    slow, _, rest = rest.partition(":")
    cap, _, rest = rest.partition(":")
    shape, _, trigger = rest.partition(":")
    return make(suffix, int(batch or 1500), start or "earliest", float(slow or 0), int(cap) if cap else None,
                shape or None, trigger or None)


PIPELINES = [pipeline for spec in SPECS for pipeline in _pipelines(spec)]
