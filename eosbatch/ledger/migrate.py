"""Run the ledger's Alembic migrations from Python (the CLI, tests and DAG tasks call these)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import psycopg2
from alembic import command
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, exc, pool

from eosbatch import config
from eosbatch.ledger import errors, revisions


def connect_timeout() -> int:
    """EOSBATCH_CONNECT_TIMEOUT_S as libpq takes it (whole seconds, at least 2); migrations/env.py uses it."""
    return max(2, math.ceil(config.connect_timeout_s()))


@contextlib.contextmanager
def _mapped(url: str) -> Iterator[None]:
    """SQLAlchemy wraps psycopg2's errors: unwrap them and map them as the ledger's own connections do."""
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
    revisions.forget_checked()  # the revision changes: connections check it again
    with _mapped(url):
        command.upgrade(revisions.alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    revisions.forget_checked()  # the revision changes: connections check it again
    with _mapped(url):
        command.downgrade(revisions.alembic_config(url), revision)


def current(url: str) -> str | None:
    engine = create_engine(url, poolclass=pool.NullPool, connect_args={"connect_timeout": connect_timeout()})
    try:
        with _mapped(url), engine.connect() as connection:
            return MigrationContext.configure(
                connection, opts={"version_table": revisions.VERSION_TABLE}
            ).get_current_revision()
    finally:
        engine.dispose()
