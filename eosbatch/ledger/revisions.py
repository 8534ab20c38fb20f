"""The ledger's revisions: the ones this eosbatch knows (its migrations, package data), the one a database is
at (Alembic's version table), and the databases this process has checked already."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg2
import psycopg2.extensions

from eosbatch.config import Settings
from eosbatch.ledger import errors as ledger_errors
from eosbatch.ledger.exceptions import LedgerSchemaMissing, LedgerUnavailable
from eosbatch.package_data import MIGRATIONS

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE = "eosbatch_alembic_version"

# Databases whose ledger revision this process has checked (the check costs a query and reading the
# migrations; a migration run from this process clears it).
_checked: set[str] = set()


def alembic_config(url: str) -> Config:
    """Alembic's configuration of the ledger's migrations, against `url`. Alembic is imported here, at the
    first use: its import costs ~0.25 s, which a process that never reads the migrations need not pay."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory  # at the first use, as alembic_config

    return ScriptDirectory.from_config(alembic_config("postgresql://"))


def known() -> list[str]:
    """Every revision this eosbatch knows, oldest first (the ledger must be at the last)."""
    return [r.revision for r in reversed(list(_script().walk_revisions()))]


def head() -> str | None:
    """The newest revision this eosbatch knows."""
    return _script().get_current_head()


def forget_checked() -> None:
    """Check the ledger's revision again on the next connection (after a migration)."""
    _checked.clear()


def check_once(connection: psycopg2.extensions.connection, settings: Settings, place: str) -> None:
    """The ledger revision check, once per process and database (again after a migration); a connection
    that fails it is closed. `place`: the database's address, as errors name it (no password)."""
    if settings.database_url in _checked:
        return
    try:
        _check(connection, settings, place)
    except BaseException:
        connection.close()
        raise


def _check(connection: psycopg2.extensions.connection, settings: Settings, place: str) -> None:
    try:
        revisions = known()
    except Exception:  # noqa: BLE001 - no migrations folder (a trimmed install): the table errors still say it
        _checked.add(settings.database_url)
        return
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT to_regclass(%s) IS NOT NULL", (VERSION_TABLE,))
            current = None
            if cur.fetchone()[0]:
                cur.execute(f"SELECT version_num FROM {VERSION_TABLE}")  # noqa: S608 - a constant
                row = cur.fetchone()
                current = row[0] if row else None
        connection.rollback()
    except psycopg2.Error as exc:
        raise (ledger_errors.to_eosbatch(exc, place)
               or LedgerUnavailable(f"PostgreSQL at {place}: {ledger_errors.first_line(exc)}")) from exc
    problem = ledger_errors.schema_problem(current, revisions)
    if problem is not None:
        raise LedgerSchemaMissing(f"PostgreSQL at {place}: {problem}")
    _checked.add(settings.database_url)
