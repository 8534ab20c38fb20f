"""The spark-submit engine: each batch is a Spark application of its own (a JVM, a SparkSession), for
clusters without a Spark Connect server. Its driver reports through an exit code and a result file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from datetime import datetime
from importlib.util import find_spec
from pathlib import Path
from typing import Any, NamedTuple

from eosbatch import config, faults, registry
from eosbatch.engine.exceptions import SparkJobFailed
from eosbatch.engine.log4j import LEVELS, TO_STDERR, roll_over
from eosbatch.exceptions import EosbatchError, Fenced, TerminalError, TransientError
from eosbatch.package_data import FOLDER as PACKAGE_DATA
from eosbatch.package_data import SPARK_APPS
from eosbatch.spark.entry import EXIT_FENCED, EXIT_TERMINAL, RESULT_FILE
from eosbatch.spark_kafka_options import REDACTION_REGEX

CONNECT_MODE = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")


class SparkRun(NamedTuple):
    command: list[str]
    env: dict[str, str]
    log: Path
    result: Path


def _installed_dirs() -> list[Path]:
    """Where installed code lives (the standard library, site-packages): not the user's to ship."""
    import site
    import sysconfig

    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
    found |= {p for p in sysconfig.get_paths().values() if p}
    return [Path(p).resolve() for p in found]


def _code_roots(pipeline_modules: list[str]) -> set[Path]:
    """The top-level packages (or single modules) of eosbatch, of the pipeline modules, and of every module
    of the user's own that they imported (a pipeline importing a sibling package of the project): what the
    executors must be able to import. Installed packages are the executors' environment's business."""
    for module in pipeline_modules:
        __import__(module)
    installed = _installed_dirs()
    roots = {Path(__file__).resolve().parents[1]}
    for name, loaded in list(sys.modules.items()):
        origin = getattr(loaded, "__file__", None)
        if "." in name or not origin or not origin.endswith(".py") or name == "__main__":
            continue
        path = Path(origin).resolve()
        if any(path.is_relative_to(folder) for folder in installed):
            continue
        roots.add(path.parent if path.name == "__init__.py" else path)
    for module in pipeline_modules:
        spec = find_spec(module.split(".")[0])
        if spec is not None and spec.origin:
            origin = Path(spec.origin).resolve()
            roots.add(origin.parent if origin.name == "__init__.py" else origin)
    return roots


def code_archive(pipeline_modules: list[str], folder: Path) -> Path:
    """A zip of the code the executors import (see _code_roots): eosbatch, the pipelines and their imports. Not
    eosbatch's package data (migrations, apps): no executor imports it."""
    archive = folder / "eosbatch-app.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for root in sorted(_code_roots(pipeline_modules)):
            files = [root] if root.is_file() else sorted(
                p for p in root.rglob("*.py") if "__pycache__" not in p.parts and not p.is_relative_to(PACKAGE_DATA))
            for path in files:
                zf.write(path, path.relative_to(root.parent))
    return archive


def command(app: str, args: list[str], settings: config.Settings, log_name: str, work: Path) -> SparkRun:
    """The spark-submit command of one of spark_apps/ with the connector jars and the pipelines' code, its
    files (code archive, log4j2 configuration, result) in `work`."""
    import pyspark

    logs = Path(settings.log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    jars = ["--jars", ",".join(settings.spark_jars)] if settings.spark_jars else []
    log4j = work / "log4j2.properties"
    log4j.write_text(LEVELS + TO_STDERR)  # the Kafka clients' INFO chatter out (see eosbatch.engine.log4j)
    line = [str(submit), "--master", settings.spark_master, *jars,
            "--py-files", str(code_archive(registry.modules(), work)),
            "--driver-java-options", f"-Dlog4j2.configurationFile=file:{log4j}",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=2g",
            # the Kafka reader's JAAS line (a password): out of plans, the UI and event logs
            "--conf", f"spark.redaction.regex={REDACTION_REGEX}",
            "--conf", f"spark.sql.redaction.options.regex={REDACTION_REGEX}",
            str(SPARK_APPS / app), *args]
    result = work / "result.json"
    # The settings go in the child's environment, never its command line (a password in ps).
    env = {**os.environ, **config.to_env(settings), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, RESULT_FILE: str(result)}
    for name in CONNECT_MODE:  # set by PySpark in a process that opened a Connect session: not for this driver
        env.pop(name, None)
    if settings.spark_master.startswith("local"):
        env["SPARK_LOCAL_IP"] = "127.0.0.1"  # keep a local run's traffic on loopback
    return SparkRun(line, env, logs / f"{log_name}.log", result)


def failure_kind(returncode: int) -> type[EosbatchError]:
    """The kind of a Spark app's failure from its exit code (spark_apps/: 2 terminal, 4 fenced, else transient)."""
    return {EXIT_TERMINAL: TerminalError, EXIT_FENCED: Fenced}.get(returncode, TransientError)


def run(app: str, args: list[str], settings: config.Settings, log_name: str) -> Any:
    """Run one of spark_apps/ to its end and return its work's value; a failure is an eosbatch error with
    the app's one-line reason, naming the log. Each run is appended to `<log_name>.log` under a header line,
    rolled over by size; its files (code archive, result) go with it."""
    with tempfile.TemporaryDirectory(prefix="eosbatch-submit-") as work:
        run = command(app, args, settings, log_name, Path(work))
        roll_over(run.log)
        with run.log.open("ab") as out:
            out.write(f"==== eosbatch {datetime.now():%Y-%m-%d %H:%M:%S}: {app} {' '.join(args)}\n".encode())
            out.flush()
            done = subprocess.run(run.command, env=run.env, stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode == faults.EXIT_CODE:
            faults.die(f"{app} (the Spark driver was killed by a fault)")  # the runner dies with it
        try:
            result = json.loads(run.result.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            result = {"status": "transient", "message": f"spark-submit exited {done.returncode} without a result"}
    if done.returncode == 0 and result.get("status") == "done":
        return result.get("value")
    error = failure_kind(done.returncode) if done.returncode else SparkJobFailed
    raise error(f"{app}: {result.get('message')} (log: {run.log})")
