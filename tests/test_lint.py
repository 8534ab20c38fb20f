"""The code stays as clean as it is now: ruff over the repository and mypy over the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["ruff", "check", "."], ["mypy", "eosbatch"]], ids=["ruff", "mypy"])
def test_lint_is_clean(command):
    done = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
