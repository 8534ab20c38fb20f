"""Runs of many batches: one after another (sequential), or with consecutive batches' steps side by side
(overlapped). Both go through eosbatch.steps."""

from eosbatch.running.sequential import run, run_batch
from eosbatch.running.summary import RunSummary

__all__ = ["RunSummary", "run", "run_batch"]
