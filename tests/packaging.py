"""Shared by the tests that install eosbatch as a user would: the wheel, built from a copy of the sources, and
a database of a test's own on the stack's PostgreSQL."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eosbatch.config import Settings
from tests.scenario import ROOT

SOURCES = ["pyproject.toml", "README.md", "eosbatch", "migrations", "spark_apps"]


def run(command: list[str], timeout: float = 900, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{command[:4]}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def build_wheel(work: Path) -> Path:
    """`pip wheel`, as the docs say, on a copy of the sources (the links in eosbatch/package-data/ kept as
    links), so the build leaves nothing in the checkout. With build isolation: pip brings the setuptools that
    pyproject.toml asks for (this environment's may be older)."""
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(source)])
    [wheel] = (work / "dist").glob("eosbatch-*.whl")
    return wheel


@contextmanager
def own_database(settings: Settings, name: str) -> Iterator[str]:
    """A database `name` on the stack's PostgreSQL, created empty and dropped after; yields its URL."""
    import psycopg2
    from psycopg2 import sql
    from sqlalchemy.engine import make_url

    def on_server(statement: sql.Composable) -> None:  # a connection each: the test may restart the server
        admin = psycopg2.connect(settings.psycopg_dsn)
        admin.autocommit = True
        try:
            with admin.cursor() as cur:
                cur.execute(statement)
        finally:
            admin.close()

    on_server(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_url(settings.database_url).set(database=name).render_as_string(hide_password=False)
    finally:
        on_server(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
