"""Run the ledger's Alembic migrations from Python (the CLI, tests and DAG tasks call these)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, pool

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
VERSION_TABLE = "eosbatch_alembic_version"


def _config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(_config(url), revision)


def head() -> str | None:
    """The newest revision this eosbatch knows."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config("postgresql://")).get_current_head()


def current(url: str) -> str | None:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(
                connection, opts={"version_table": VERSION_TABLE}
            ).get_current_revision()
    finally:
        engine.dispose()
