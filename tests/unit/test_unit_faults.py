"""Fault points: the process really dies (os._exit) at the named point, on the pass asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eosbatch import faults

pytestmark = pytest.mark.unit
SCRIPT = ("from eosbatch import faults\n"
          "for i in range(3):\n"
          "    print('pass', i + 1, flush=True)\n"
          "    faults.point('commit.after_commit')\n"
          "print('survived', flush=True)\n")


@pytest.mark.parametrize(("fault", "passes", "code"), [
    ("commit.after_commit", 1, faults.EXIT_CODE),
    ("commit.after_commit@2", 2, faults.EXIT_CODE),
    ("publish.mid_produce", 3, 0),
])
def test_fault_point_dies_on_the_pass_asked_for(fault, passes, code):
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={faults.FAULT: fault}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == code
    assert done.stdout.count("pass") == passes
    assert ("survived" in done.stdout) == (code == 0)
