"""The production path never imports the development stack (eosbatch.stack): jars, log folders and URLs are
settings. Checked in a fresh interpreter, where nothing else has loaded it.

The import contracts (pyproject.toml, tests/test_architecture.py) already keep every module but the stack's
commands from importing it, and the steps and services from reaching those commands at all. What they cannot
say is checked here: the CLI, the commands and the DAG tasks, which may reach the stack's commands, import
it only when one of those runs (inside the function); and the Spark application, outside the package."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.scenario import ROOT

PRODUCTION = ["eosbatch.cli", "eosbatch.commands", "eosbatch.orchestration.tasks", "spark_apps.process_batch"]


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
