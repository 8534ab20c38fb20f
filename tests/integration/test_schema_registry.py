"""SchemaRegistry (eosbatch.formats.registry) against a real Confluent-compatible registry: the embedded stack's
Apicurio Registry (`eosbatch stack up --schema-registry`), fetched from Maven Central and started by this module's
fixture when it is not running (and stopped again at its end). Schemas are registered through the registry's
Confluent API with Confluent's own client, as a producer's serializer registers them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from eosbatch import stack
from eosbatch.exceptions import TerminalError, TransientError
from eosbatch.formats.registry import SchemaRegistry
from eosbatch.stack.schema_registry import SchemaRegistryServer
from tests.conftest import _unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1 = {"type": "record", "name": "Customer", "namespace": "shop",
      "fields": [{"name": "id", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "tier", "type": ["null", "string"], "default": None}]}
FAST = {"max.retries": 0}  # a refused connection answers at once; the client's retries would only wait


class Registry(NamedTuple):
    server: SchemaRegistryServer
    url: str
    was_running: bool


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    server = stack.registry_server()
    was_running = server.pid() is not None
    try:
        url = stack.registry_up(log=lambda _: None)
    except Exception as exc:  # noqa: BLE001 - any failure to fetch or start it is reported the same way
        _unavailable(f"the schema registry did not start: {type(exc).__name__}: {exc}")
    try:
        yield Registry(server, url, was_running)
    finally:
        if not was_running:
            stack.registry_down(log=lambda _: None)
            assert server.pid() is None, "registry_down left the registry running"


def _register(url: str, subject: str, schema: dict, kind: str = "AVRO") -> int:  # type: ignore[type-arg]
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    return int(SchemaRegistryClient({"url": url}).register_schema(subject, Schema(json.dumps(schema), kind)))


def test_registered_schemas_are_found_by_id_and_an_unknown_id_is_none(registry: Registry, unique: str) -> None:
    first = _register(registry.url, f"customers-{unique}-value", V1)
    second = _register(registry.url, f"customers-{unique}-value", V2)  # a compatible new version: a new id
    found = SchemaRegistry(registry.url)
    assert first != second
    assert json.loads(found.schema(first) or "null") == V1
    assert json.loads(found.schema(second) or "null") == V2
    assert found.schema(2_000_000_000) is None  # 404, error code 40403: the records become dead letters
    json_schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                   "properties": {"id": {"type": "string"}}}
    assert found.schema(_register(registry.url, f"events-{unique}-value", json_schema, "JSON")) is None  # not Avro


def test_the_stack_exports_the_registrys_url(registry: Registry) -> None:
    assert stack.status(schema_registry=True).env()[stack.SCHEMA_REGISTRY_URL] == registry.url
    assert stack.status().schema_registry_pid == registry.server.pid() is not None


def test_a_url_that_is_not_a_registrys_api_is_a_terminal_error(registry: Registry) -> None:
    wrong = SchemaRegistry(registry.url.removesuffix("/apis/ccompat/v7") + "/apis/nothing")
    with pytest.raises(TerminalError, match="HTTP status code 404") as raised:
        wrong.schema(1)
    assert not isinstance(raised.value, TransientError)  # every record of the batch would wait for nothing


def test_a_stopped_registry_is_a_transient_error(registry: Registry, unique: str) -> None:
    """Last in this module: it stops the registry (its in-memory schemas go with it), and starts it again only
    when it was running before the module."""
    schema_id = _register(registry.url, f"stopped-{unique}-value", V1)
    assert registry.server.stop()
    try:
        with pytest.raises(TransientError, match="cannot reach the registry"):
            SchemaRegistry(registry.url, FAST).schema(schema_id)
    finally:
        if registry.was_running:
            stack.registry_up(log=lambda _: None)
