"""README's first command runs the demo end to end: `./scripts/demo.sh` sets up, starts the stack and runs
`examples.orders.demo`. Here the demo module runs as that script runs it, on the suite's stack, with fewer
records; its own check (input vs sink vs read_committed output vs dead letters, then `eosbatch verify`) must pass.

It lives at the top of tests/ so that it runs after the integration and orchestration tests: some of those drop the
ledger (a downgrade to base), and a demo run before that would leave sink rows and output records of batches the
ledger then forgets, so that `./scripts/demo.sh` on the same stack afterwards would (rightly) report them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eosbatch import config

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_runs_end_to_end_and_checks_exactly_once(settings) -> None:
    env = {**os.environ, **config.to_env(settings),
           config.PIPELINES: "examples.orders.pipeline,examples.customers.pipeline", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "examples.orders.demo", "--records", "3000"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "exactly-once: PASS" in done.stdout, done.stdout[-4000:]
