"""Connection settings, read from the environment and validated up front (fail fast, name the field)."""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from eosbatch.exceptions import ConfigError

DATABASE_URL = "EOSBATCH_DATABASE_URL"
KAFKA_BOOTSTRAP = "EOSBATCH_KAFKA_BOOTSTRAP"
KAFKA_CONFIG = "EOSBATCH_KAFKA_CONFIG"
SPARK_MASTER = "EOSBATCH_SPARK_MASTER"
PIPELINES = "EOSBATCH_PIPELINES"
LEASE_SECONDS = "EOSBATCH_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 60.0
MIN_LEASE_SECONDS = 1.0


class Settings(NamedTuple):
    database_url: str
    kafka_bootstrap: str
    kafka_config: dict[str, Any]
    spark_master: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS  # a lane's lease: renewed every third of it, taken after it

    def kafka(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings for a client: bootstrap + the user's extra config + the caller's needs."""
        return {"bootstrap.servers": self.kafka_bootstrap, **self.kafka_config, **overrides}

    @property
    def psycopg_dsn(self) -> str:
        """The SQLAlchemy URL as a libpq URL (psycopg2 and COPY from Spark executors use it)."""
        return to_libpq_url(self.database_url)


def to_libpq_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(DATABASE_URL, "expected a URL such as postgresql+psycopg2://user@host:port/db")
    return "postgresql://" + rest if scheme.startswith("postgresql") else url


def redact(url: str) -> str:
    """The URL with its password replaced, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def load(env: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if env is None else env)
    url = env.get(DATABASE_URL, "").strip()
    if not url:
        raise ConfigError(DATABASE_URL, "not set (run `eval \"$(eosbatch stack env)\"` or point it at PostgreSQL)")
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigError(DATABASE_URL, "not a URL; expected postgresql+psycopg2://user@host:port/db")
    if not scheme.startswith("postgresql"):
        raise ConfigError(DATABASE_URL, f"must be a postgresql URL, got scheme {scheme!r}")
    bootstrap = env.get(KAFKA_BOOTSTRAP, "").strip()
    if not bootstrap:
        raise ConfigError(KAFKA_BOOTSTRAP, "not set (host:port[,host:port])")
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(KAFKA_BOOTSTRAP, f"expected host:port, got {server!r}")
    raw = env.get(KAFKA_CONFIG, "").strip() or "{}"
    try:
        extra = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(KAFKA_CONFIG, f"not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(extra, dict):
        raise ConfigError(KAFKA_CONFIG, "must be a JSON object of librdkafka settings")
    reserved = {"transactional.id", "enable.idempotence", "isolation.level", "group.id"} & set(extra)
    if reserved:
        raise ConfigError(KAFKA_CONFIG, f"sets {sorted(reserved)}, which eosbatch owns")
    master = env.get(SPARK_MASTER, "").strip() or "local[2]"
    return Settings(url, bootstrap, extra, master, _lease_seconds(env.get(LEASE_SECONDS, "").strip()))


def _lease_seconds(raw: str) -> float:
    if not raw:
        return DEFAULT_LEASE_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        raise ConfigError(LEASE_SECONDS, f"expected a number of seconds, got {raw!r}") from None
    if not seconds >= MIN_LEASE_SECONDS or seconds == float("inf"):  # also refuses NaN
        raise ConfigError(LEASE_SECONDS, f"must be at least {MIN_LEASE_SECONDS:g} seconds, got {raw!r}")
    return seconds
