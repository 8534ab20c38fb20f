"""Settings read from an explicit environment: fail fast, name the field, never show the password."""

from __future__ import annotations

import pytest

from eosbatch.config import (
    DATABASE_URL,
    KAFKA_BOOTSTRAP,
    KAFKA_CONFIG,
    SPARK_MASTER,
    load,
    redact,
    to_libpq_url,
)
from eosbatch.exceptions import ConfigError, TerminalError

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-Pa55"
URL = f"postgresql+psycopg2://eos:{SECRET}@127.0.0.1:5432/eosbatch"


def env(**overrides: str) -> dict[str, str]:
    base = {DATABASE_URL: URL, KAFKA_BOOTSTRAP: "127.0.0.1:9092"}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def failure(environment: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(environment)
    assert isinstance(info.value, TerminalError)
    assert SECRET not in str(info.value)
    return info.value


def test_load_valid_settings_with_defaults() -> None:
    settings = load(env())
    assert settings.database_url == URL
    assert settings.kafka_bootstrap == "127.0.0.1:9092"
    assert settings.kafka_config == {}
    assert settings.spark_master == "local[2]"


def test_load_reads_spark_master_and_extra_kafka_config() -> None:
    settings = load(env(**{SPARK_MASTER: "spark://127.0.0.1:7077",
                           KAFKA_CONFIG: '{"security.protocol": "SASL_SSL", "linger.ms": 5}'}))
    assert settings.spark_master == "spark://127.0.0.1:7077"
    assert settings.kafka(**{"linger.ms": 0}) == {"bootstrap.servers": "127.0.0.1:9092",
                                                   "security.protocol": "SASL_SSL", "linger.ms": 0}


def test_load_does_not_read_the_process_environment_when_given_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATABASE_URL, URL)
    monkeypatch.setenv(KAFKA_BOOTSTRAP, "127.0.0.1:9092")
    assert failure({}).field == DATABASE_URL


def test_missing_database_url() -> None:
    for value in (None, "", "   "):
        assert failure(env(**{DATABASE_URL: value})).field == DATABASE_URL  # type: ignore[arg-type]


@pytest.mark.parametrize("url", [f"mysql://eos:{SECRET}@h/db", "sqlite:///x.db", f"postgres://eos:{SECRET}@h/db"])
def test_non_postgresql_scheme(url: str) -> None:
    error = failure(env(**{DATABASE_URL: url}))
    assert error.field == DATABASE_URL
    assert "postgresql" in str(error)


def test_a_url_without_scheme_does_not_leak_its_password() -> None:
    error = failure(env(**{DATABASE_URL: f"eos:{SECRET}@127.0.0.1:5432/eosbatch"}))
    assert error.field == DATABASE_URL


def test_missing_bootstrap() -> None:
    for value in (None, "", "  "):
        assert failure(env(**{KAFKA_BOOTSTRAP: value})).field == KAFKA_BOOTSTRAP  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["localhost", "localhost:abc", ":9092", "a:1,,b:2", "a:1,b"])
def test_malformed_bootstrap(value: str) -> None:
    error = failure(env(**{KAFKA_BOOTSTRAP: value}))
    assert error.field == KAFKA_BOOTSTRAP
    assert "host:port" in str(error)


def test_several_bootstrap_servers_are_fine() -> None:
    assert load(env(**{KAFKA_BOOTSTRAP: "k1:9092, k2:9093"})).kafka_bootstrap == "k1:9092, k2:9093"


def test_invalid_json_kafka_config() -> None:
    error = failure(env(**{KAFKA_CONFIG: '{"sasl.password": "' + SECRET}))
    assert error.field == KAFKA_CONFIG
    assert "JSON" in str(error)


def test_kafka_config_must_be_an_object() -> None:
    for raw in ("[]", '"x"', "3", "null"):
        error = failure(env(**{KAFKA_CONFIG: raw}))
        assert error.field == KAFKA_CONFIG, raw
        assert "object" in str(error), raw


@pytest.mark.parametrize("key", ["transactional.id", "enable.idempotence", "isolation.level", "group.id"])
def test_kafka_config_may_not_set_what_eosbatch_owns(key: str) -> None:
    error = failure(env(**{KAFKA_CONFIG: f'{{"{key}": "x", "linger.ms": 1}}'}))
    assert error.field == KAFKA_CONFIG
    assert key in str(error)


def test_redact_hides_the_password() -> None:
    redacted = redact(URL)
    assert SECRET not in redacted
    assert redacted == "postgresql+psycopg2://eos:***@127.0.0.1:5432/eosbatch"


def test_redact_leaves_a_url_without_password_alone() -> None:
    assert redact("postgresql://eos@127.0.0.1:5432/db") == "postgresql://eos@127.0.0.1:5432/db"


def test_libpq_url_drops_the_driver_and_needs_a_scheme() -> None:
    assert to_libpq_url(URL) == f"postgresql://eos:{SECRET}@127.0.0.1:5432/eosbatch"
    assert load(env()).psycopg_dsn.startswith("postgresql://eos:")
    with pytest.raises(ConfigError) as info:
        to_libpq_url(f"eos:{SECRET}@h/db")
    assert info.value.field == DATABASE_URL
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("raw", ["abc", "0", "0.5", "-5", "nan", "inf", "1e999"])
def test_lease_seconds_is_validated_naming_the_field(raw: str) -> None:
    from eosbatch.config import LEASE_SECONDS

    error = failure(env(**{LEASE_SECONDS: raw}))
    assert error.field == LEASE_SECONDS and raw in str(error)


def test_lease_seconds_default_and_value() -> None:
    from eosbatch.config import DEFAULT_LEASE_SECONDS, LEASE_SECONDS

    assert load(env()).lease_seconds == DEFAULT_LEASE_SECONDS == 60
    assert load(env(**{LEASE_SECONDS: " 5 "})).lease_seconds == 5
