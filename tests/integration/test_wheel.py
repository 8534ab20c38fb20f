"""The wheel works without a checkout: built from the sources, installed into a fresh venv (its dependencies
taken from this environment's site-packages, not its editable eosbatch), `eosbatch db upgrade` run from a
folder outside the repository takes an empty database to the newest revision, so the migrations come from
the installed package. The wheel carries the migrations and the spark-submit apps."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from eosbatch import config
from eosbatch.ledger import revisions
from tests.packaging import build_wheel
from tests.scenario import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]



def _venv_with_wheel(work: Path, wheel: Path) -> Path:
    """A fresh venv holding the wheel alone; a .pth line lists this environment's site-packages for the
    dependencies (a plain path: the .pth files there, such as the editable install's hook, do not run)."""
    folder = work / "venv"
    venv.create(folder, with_pip=False)
    python = folder / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                           str(wheel)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ours = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    theirs = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    Path(theirs, "eosbatch-test-dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return folder


def test_the_installed_wheel_upgrades_a_database_from_outside_the_checkout(settings, fresh_database, tmp_path
                                                                              ) -> None:
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, patterns in (("migrations", ["*.py", "*.mako", "versions/*.py"]), ("spark_apps", ["*.py"])):
        expected = {f"eosbatch/package-data/{folder}/{p.relative_to(ROOT / folder)}"
                    for pattern in patterns for p in (ROOT / folder).glob(pattern)}
        assert expected and expected <= names, sorted(expected - names)

    env_folder = _venv_with_wheel(tmp_path, wheel)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert not outside.resolve().is_relative_to(ROOT)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(config.to_env(settings))
    env[config.DATABASE_URL] = fresh_database

    def run(*args: str) -> str:
        done = subprocess.run(list(args), cwd=outside, env=env, capture_output=True, text=True, check=False,
                              timeout=120)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout.strip()

    imported = run(str(env_folder / "bin" / "python"), "-c", "import eosbatch; print(eosbatch.__file__)")
    assert Path(imported).resolve().is_relative_to(env_folder.resolve()), imported
    head = revisions.head()
    assert run(str(env_folder / "bin" / "eosbatch"), "db", "upgrade") == f"ledger at revision {head}"
    assert run(str(env_folder / "bin" / "eosbatch"), "db", "current") == head

