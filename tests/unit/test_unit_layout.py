"""The production path never imports the development stack (eosbatch.stack): jars, log folders and URLs are
settings. Checked in a fresh interpreter, where nothing else has loaded it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.scenario import ROOT

PRODUCTION = ["eosbatch.cli", "eosbatch.commands", "eosbatch.steps", "eosbatch.running", "eosbatch.backfill",
              "eosbatch.verify", "eosbatch.engine.connect", "eosbatch.engine.submit", "eosbatch.orchestration.tasks",
              "spark_apps.process_batch"]


def test_the_production_modules_do_not_load_the_development_stack() -> None:
    probe = ("import importlib, json, sys\n"
             f"for name in {PRODUCTION!r}:\n"
             "    importlib.import_module(name)\n"
             "print(json.dumps(sorted(m for m in sys.modules if m == 'eosbatch.stack' "
             "or m.startswith('eosbatch.stack.'))))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
