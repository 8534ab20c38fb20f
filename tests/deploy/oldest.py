"""A second venv with the oldest supported versions (constraints/oldest.txt) and the wheel built from the
sources, kept in the checkout (`.venv-oldest/`) and reused while the constraints are the same; and a Spark
Connect server of that venv's PySpark, started by the venv's own eosbatch (so its connector jars are picked
for that PySpark, as `stack up` picks them)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from eosbatch.stack.spark_connect import SparkConnectServer
from tests.packaging import run
from tests.scenario import ROOT

CONSTRAINTS = ROOT / "constraints" / "oldest.txt"
VENV = ROOT / ".venv-oldest"
STAMP = VENV / "eosbatch-constraints.sha256"
# Packages beyond the wheel's: the unit tests run with the venv's own pytest.
TEST_TOOLS = ["pytest", "pytest-timeout"]
CONNECT_FOLDER = "spark-connect-oldest"  # under the stack's home, beside the stack's own server


def _fingerprint() -> str:
    """What the venv's packages depend on: the constraints' pins, this Python, and the wheel's requirements."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = json.dumps([project["dependencies"], project["optional-dependencies"]["airflow"], TEST_TOOLS])
    pins = json.dumps(sorted(pinned().items()))  # the pins, not the comments (the date the file was written)
    return hashlib.sha256((pins + sys.version + requirements).encode()).hexdigest()


def python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv(wheel: Path, log: Callable[[str], None] = print) -> float:
    """The venv with the constraints' packages and this wheel (`[airflow]`), created again when the
    fingerprint changed; a kept one only has its eosbatch replaced. Returns the seconds it took."""
    started = time.monotonic()
    pip = [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(CONSTRAINTS)]
    fresh = not STAMP.exists() or STAMP.read_text() != _fingerprint()
    # Outside the checkout and without PYTHONPATH: pip must not take an eosbatch.egg-info there for an
    # installed eosbatch.
    outside = {"env": clean_env(), "cwd": wheel.parent}
    if fresh:
        shutil.rmtree(VENV, ignore_errors=True)
        run([sys.executable, "-m", "venv", str(VENV)], **outside)
        run([*pip, f"{wheel}[airflow]", *TEST_TOOLS], **outside)
        STAMP.write_text(_fingerprint())
    else:  # the same requirements, all installed: only eosbatch changes
        run([*pip, "--force-reinstall", "--no-deps", str(wheel)], **outside)
    installed = run([str(python()), "-c", "import eosbatch; print(eosbatch.__file__)"], **outside).stdout.strip()
    assert Path(installed).is_relative_to(VENV), installed
    took = time.monotonic() - started
    log(f"{VENV.name}: {'created' if fresh else 'reused'} in {took:.1f}s")
    return took


def versions() -> dict[str, str]:
    """The venv's installed versions, by distribution name."""
    code = "import json, importlib.metadata as m; print(json.dumps({d.metadata['Name'].lower(): d.version " \
           "for d in m.distributions()}))"
    return json.loads(run([str(python()), "-c", code]).stdout)


def pinned() -> dict[str, str]:
    """constraints/oldest.txt: name -> version."""
    return dict(line.split("==", 1) for line in CONSTRAINTS.read_text().splitlines()
                if line and not line.startswith("#"))


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without PYTHONPATH (no checkout on the venv's sys.path), this venv's PATH entry, or
    the stack's connector jars (of the development venv's PySpark: the venv's eosbatch refuses them)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "EOSBATCH_SPARK_JARS")}
    ours = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(VENV / "bin"), *(p for p in env["PATH"].split(os.pathsep) if p != ours)])
    env.update(extra or {})
    return env


def free_port(span: int = 1) -> int:
    """A port with the `span - 1` after it free as well."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + span >= 65535:
            continue
        try:
            for other in range(port + 1, port + span):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", other))
        except OSError:
            continue
        return port
    raise AssertionError("no free port")


START_CONNECT = """
import sys
from pathlib import Path
from eosbatch import stack
from eosbatch.stack.spark_connect import SparkConnectServer
home, port, folder = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
server = SparkConnectServer(home, port, folder=folder)
server.start(stack.connector_jars(home))
server.wait_ready(180)
print(stack.PYSPARK_VERSION)
"""


def start_connect(home: Path, port: int) -> tuple[SparkConnectServer, str]:
    """The venv's eosbatch starts the server: its PySpark's spark-submit, the connector jars of that version
    (fetched into the stack's cache once). Returns the server and the Spark version it runs."""
    server = SparkConnectServer(home, port, folder=CONNECT_FOLDER)
    server.stop()  # one a killed session left behind
    done = run([str(python()), "-c", START_CONNECT, str(home), str(port), CONNECT_FOLDER], timeout=600,
               env=clean_env(), cwd=home)
    return server, done.stdout.strip().splitlines()[-1]
