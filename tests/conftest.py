"""The real stack, once per session: the embedded Kafka + PostgreSQL, or the ones the environment names.

With CI=true a service that cannot be reached fails the run; elsewhere the tests that need it skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from eosbatch import config
from tests.packaging import own_database


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the stack is unavailable: {reason}", pytrace=False)
    pytest.skip(f"stack unavailable: {reason}")


LONG_LIVED_BATCH_ID = 3_000_000


def long_lived_ids(settings: config.Settings) -> None:
    """Start the ledger's batch ids where a long-lived ledger has them (a batch a minute for years), not at 1:
    a fresh ledger hid a commit that overflowed 32-bit arithmetic once batch ids passed 2,147."""
    from eosbatch.ledger import store

    with store.transaction(settings) as cur:
        cur.execute("SELECT setval('eosbatch.batches_id_seq', %s) FROM eosbatch.batches_id_seq WHERE last_value < %s",
                    (LONG_LIVED_BATCH_ID, LONG_LIVED_BATCH_ID))


@pytest.fixture(scope="session")
def settings() -> config.Settings:
    try:
        if not (os.environ.get(config.DATABASE_URL) and os.environ.get(config.KAFKA_BOOTSTRAP)):
            from eosbatch import stack

            os.environ.update(stack.up(log=lambda _: None).env())
        loaded = config.load()
        from eosbatch.ledger import migrate

        migrate.upgrade(loaded.database_url)
        long_lived_ids(loaded)
        from eosbatch.kafka.offsets import admin

        admin(loaded).list_topics(timeout=20)
    except Exception as exc:  # noqa: BLE001 - any failure to reach a service is reported the same way
        _unavailable(f"{type(exc).__name__}: {exc}")
    return loaded


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def fresh_database(settings, unique) -> Iterator[str]:
    """The URL of a database of this test's own on the stack's PostgreSQL, where `eosbatch db upgrade` never
    ran (so a test may upgrade or downgrade it without touching any other run); dropped after the test."""
    with own_database(settings, f"eosbatch_fresh_{unique}") as url:
        yield url
