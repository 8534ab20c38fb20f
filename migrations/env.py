"""Alembic environment for the eosbatch ledger. The URL comes from the caller or EOSBATCH_DATABASE_URL."""

from alembic import context
from sqlalchemy import create_engine, pool, text

from eosbatch import config as settings
from eosbatch.ledger.migrate import connect_timeout

url = context.config.get_main_option("sqlalchemy.url") or settings.load().database_url
# Fails within EOSBATCH_CONNECT_TIMEOUT_S when the database does not answer, like every eosbatch connection.
engine = create_engine(url, poolclass=pool.NullPool, connect_args={"connect_timeout": connect_timeout()})

with engine.connect() as connection:
    # The version table lives outside the `eosbatch` schema so that a full downgrade can drop the schema.
    context.configure(connection=connection, version_table="eosbatch_alembic_version", transactional_ddl=True)
    with context.begin_transaction():
        connection.execute(text("SELECT pg_advisory_xact_lock(hashtext('eosbatch.migrations'))"))
        context.run_migrations()
engine.dispose()
