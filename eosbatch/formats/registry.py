"""Writer schemas from a Confluent-compatible Schema Registry, by id (eosbatch.formats.schemas.WriterSchemas).

    Avro(reader_schema=Path("customer.avsc"), writer_schemas=SchemaRegistry("http://registry:8081"))

The lookups go through Confluent's own client (confluent_kafka.schema_registry.SchemaRegistryClient, the
`schema-registry` extra), which caches each id; its errors are mapped to eosbatch's here:

- an id the registry does not know (HTTP 404 with Confluent's error code 40403, "schema not found") -> None:
  its records become dead letters. So does an id of a schema that is not Avro (JSON Schema, Protobuf), or of an
  Avro schema with references to other subjects (which a writer schema's text alone cannot resolve);
- a registry that cannot be reached (connection refused, a time-out) or answers 5xx, 408 or 429 ->
  TransientError: the batch is retried, and no record is dead-lettered for it;
- any other answer (401/403, a 404 that is not 40403: the URL is not a registry's API) -> TerminalError: no
  retry helps until the configuration changes, and dead-lettering every record would hide the mistake.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from eosbatch.exceptions import ConfigError, TerminalError, TransientError

SCHEMA_NOT_FOUND = 40403  # Confluent's error code for an unknown schema id (Apicurio's and Karapace's too)
RETRIABLE_STATUS = frozenset({408, 429})  # and every 5xx
DEFAULT_TIMEOUT = 10.0  # seconds per request; Confluent's client waits forever without one
EXTRA = "schema-registry"  # pip install eosbatch[schema-registry]


class SchemaRegistry:
    """Writer schemas by id from the Confluent-compatible API at `url` (Confluent Schema Registry's base URL, or
    Apicurio Registry's `.../apis/ccompat/v7`). `config`: more of SchemaRegistryClient's settings
    (`basic.auth.user.info`, `ssl.ca.location`, `timeout`, `max.retries`, ...), never printed."""

    def __init__(self, url: str, config: Mapping[str, Any] | None = None, field: str = "writer_schemas") -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{field}.url", f"expected the registry's http(s):// URL, got {url!r}")
        settings = dict(config or {})
        if "url" in settings or not all(isinstance(key, str) for key in settings):
            raise ConfigError(f"{field}.config", "expected SchemaRegistryClient settings by name, without `url`")
        self.url = url.rstrip("/")
        self.config: dict[str, Any] = {"timeout": DEFAULT_TIMEOUT, **settings}
        self._client: Any = None

    def _connect(self) -> Any:
        if self._client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:
                raise ConfigError("writer_schemas", f"a schema registry needs confluent-kafka's schema registry "
                                  f"client: pip install 'eosbatch[{EXTRA}]' ({exc})") from None
            self._client = SchemaRegistryClient({"url": self.url, **self.config})
        return self._client

    def schema(self, schema_id: int) -> str | None:
        client = self._connect()
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            found = client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            if status == 404 and exc.error_code == SCHEMA_NOT_FOUND:
                return None
            problem = f"{self}: schema id {schema_id}: {exc}"
            if status >= 500 or status in RETRIABLE_STATUS:
                raise TransientError(problem) from None
            raise TerminalError(problem) from None
        except _transport_errors() as exc:
            raise TransientError(f"{self}: schema id {schema_id}: cannot reach the registry: "
                                 f"{type(exc).__name__}: {exc}") from None
        if (found.schema_type or "AVRO").upper() != "AVRO" or found.references:
            return None
        return str(found.schema_str)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}  # the HTTP client stays in its process

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SchemaRegistry) and (self.url, self.config) == (other.url, other.config)

    def __hash__(self) -> int:
        return hash(self.url)

    def __repr__(self) -> str:
        return f"SchemaRegistry({self.url!r})"  # its config may hold credentials

    def __str__(self) -> str:
        return f"the schema registry at {self.url}"


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What the client raises when no answer came (refused, reset, timed out): httpx2's or httpx's TransportError,
    or requests' errors, by the client's version (it takes whichever is installed)."""
    found: list[type[BaseException]] = []
    for module, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                          ("requests", ("ConnectionError", "Timeout"))):
        try:
            imported = importlib.import_module(module)
        except ImportError:
            continue
        found += [getattr(imported, name) for name in names if hasattr(imported, name)]
    return tuple(found)
