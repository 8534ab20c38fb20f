"""The chaos suite's spark-submit cases (tests/chaos/conftest.py SUBMIT_CASES) are real cases: a renamed test or
fault point cannot drop one silently. Checked by collecting the suite, which runs nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.chaos.conftest import SUBMIT_CASES
from tests.scenario import ROOT

pytestmark = pytest.mark.unit


def test_every_spark_submit_case_is_collected_and_nothing_else() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/chaos"], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ids = [line.partition("::")[2] for line in done.stdout.splitlines() if "::" in line]

    def cases(engine: str) -> set[str]:
        return {name.replace(f"[{engine}]", "").replace(f"[{engine}-", "[") for name in ids if f"[{engine}" in name}

    assert cases("submit") == SUBMIT_CASES
    assert cases("connect") >= SUBMIT_CASES and len(cases("connect")) == len(ids) - len(SUBMIT_CASES)
