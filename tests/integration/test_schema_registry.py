"""SchemaRegistry (eosbatch.formats.registry) against a real Confluent-compatible registry: the embedded stack's
Apicurio Registry (`eosbatch stack up --schema-registry`), fetched from Maven Central and started when it is not
running (the `schema_registry` fixture, tests/integration/conftest.py). Schemas are registered through the
registry's Confluent API with Confluent's own client, as a producer's serializer registers them."""

from __future__ import annotations

import json

import pytest

from eosbatch import stack
from eosbatch.exceptions import TerminalError, TransientError
from eosbatch.formats.registry import SchemaRegistry
from tests.integration.conftest import Registry

pytestmark = [pytest.mark.integration, pytest.mark.slow]

V1 = {"type": "record", "name": "Customer", "namespace": "shop",
      "fields": [{"name": "id", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "tier", "type": ["null", "string"], "default": None}]}
FAST = {"max.retries": 0}  # a refused connection answers at once; the client's retries would only wait


def _register(url: str, subject: str, schema: dict, kind: str = "AVRO") -> int:  # type: ignore[type-arg]
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    return int(SchemaRegistryClient({"url": url}).register_schema(subject, Schema(json.dumps(schema), kind)))


def test_registered_schemas_are_found_by_id_and_unknown_ids_are_none(schema_registry: Registry, unique: str) -> None:
    first = _register(schema_registry.url, f"customers-{unique}-value", V1)
    second = _register(schema_registry.url, f"customers-{unique}-value", V2)  # a compatible new version: a new id
    found = SchemaRegistry(schema_registry.url)
    assert first != second
    assert json.loads(found.schema(first) or "null") == V1
    assert json.loads(found.schema(second) or "null") == V2
    assert found.schema(2_000_000_000) is None  # 404, error code 40403: the records become dead letters
    json_schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                   "properties": {"id": {"type": "string"}}}
    not_avro = _register(schema_registry.url, f"events-{unique}-value", json_schema, "JSON")
    assert found.schema(not_avro) is None


def test_the_stack_exports_the_registrys_url(schema_registry: Registry) -> None:
    assert stack.status(schema_registry=True).env()[stack.SCHEMA_REGISTRY_URL] == schema_registry.url
    assert stack.status().schema_registry_pid == schema_registry.server.pid() is not None


def test_a_url_that_is_not_a_registrys_api_is_a_terminal_error(schema_registry: Registry) -> None:
    wrong = SchemaRegistry(schema_registry.url.removesuffix("/apis/ccompat/v7") + "/apis/nothing")
    with pytest.raises(TerminalError, match="HTTP status code 404") as raised:
        wrong.schema(1)
    assert not isinstance(raised.value, TransientError)  # every record of the batch would wait for nothing


def test_a_stopped_registry_is_a_transient_error(schema_registry: Registry, unique: str) -> None:
    """It stops the registry (its in-memory schemas go with it); the next test that needs one starts it again."""
    schema_id = _register(schema_registry.url, f"stopped-{unique}-value", V1)
    assert schema_registry.server.stop()
    with pytest.raises(TransientError, match="cannot reach the registry"):
        SchemaRegistry(schema_registry.url, FAST).schema(schema_id)
