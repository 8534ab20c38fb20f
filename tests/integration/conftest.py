"""The embedded schema registry (`eosbatch stack up --schema-registry`, Apicurio Registry) for the tests that
need one: started on first use (fetched from Maven Central the first time), started again by the next test that
needs it after one stopped it, and at the session's end left as it was found (stopped, or running)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import pytest

from eosbatch import stack
from eosbatch.stack.schema_registry import SchemaRegistryServer
from tests.conftest import _unavailable


class Registry(NamedTuple):
    server: SchemaRegistryServer
    url: str  # its Confluent-compatible API


@pytest.fixture(scope="session")
def _registry_session() -> Iterator[SchemaRegistryServer]:
    server = stack.registry_server()
    was_running = server.pid() is not None
    yield server
    if was_running and server.pid() is None:
        stack.registry_up(log=lambda _: None)
    elif not was_running:
        stack.registry_down(log=lambda _: None)
        assert server.pid() is None, "registry_down left the registry running"


@pytest.fixture
def schema_registry(_registry_session: SchemaRegistryServer) -> Registry:
    server = _registry_session
    if server.pid() is None or not server.ready():
        try:
            stack.registry_up(log=lambda _: None)
        except Exception as exc:  # noqa: BLE001 - any failure to fetch or start it is reported the same way
            _unavailable(f"the schema registry did not start: {type(exc).__name__}: {exc}")
    return Registry(server, server.url)


@pytest.fixture(params=["spark", "python"])
def kafka_reader(request: pytest.FixtureRequest) -> str:
    """Each Kafka reader of the process step (EOSBATCH_KAFKA_READER), for the tests of the read cases: a test
    gives it to its runs (Scenario.env_overrides)."""
    return str(request.param)
