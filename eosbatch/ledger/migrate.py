"""Run the ledger's Alembic migrations from Python (the CLI, tests and DAG tasks call these)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import psycopg2
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, exc, pool

from eosbatch import config

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
VERSION_TABLE = "eosbatch_alembic_version"


def _config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _forget_checked() -> None:
    from eosbatch.ledger import store

    store.forget_schema_check()  # the revision changes: connections check it again


def connect_timeout() -> int:
    """EOSBATCH_CONNECT_TIMEOUT_S as libpq takes it (whole seconds, at least 2); migrations/env.py uses it."""
    return max(2, math.ceil(config.connect_timeout_s()))


@contextlib.contextmanager
def _mapped(url: str) -> Iterator[None]:
    """SQLAlchemy wraps psycopg2's errors: unwrap them and map them as the ledger's own connections do."""
    from eosbatch.ledger import errors

    try:
        yield
    except exc.DBAPIError as failure:
        original, where = failure.orig, config.redact(url)
        if isinstance(original, psycopg2.Error) and original.pgcode is None \
                and str(original).startswith("connection to server"):  # libpq could not open the connection
            raise errors.connect_error(original, where, connect_timeout()) from None
        mapped = errors.to_eosbatch(original, where) if isinstance(original, BaseException) else None
        if mapped is None:
            raise
        raise mapped from failure


def upgrade(url: str, revision: str = "head") -> None:
    _forget_checked()
    with _mapped(url):
        command.upgrade(_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    _forget_checked()
    with _mapped(url):
        command.downgrade(_config(url), revision)


def revisions() -> list[str]:
    """Every revision this eosbatch knows, oldest first (the ledger must be at the last)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config("postgresql://"))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def head() -> str | None:
    """The newest revision this eosbatch knows."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config("postgresql://")).get_current_head()


def current(url: str) -> str | None:
    engine = create_engine(url, poolclass=pool.NullPool, connect_args={"connect_timeout": connect_timeout()})
    try:
        with _mapped(url), engine.connect() as connection:
            return MigrationContext.configure(
                connection, opts={"version_table": VERSION_TABLE}
            ).get_current_revision()
    finally:
        engine.dispose()
