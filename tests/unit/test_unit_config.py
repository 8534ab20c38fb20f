"""Settings read from an explicit environment: fail fast, name the field, never show the password."""

from __future__ import annotations

import re

import pytest

from eosbatch.config import (
    CONNECT_TIMEOUT,
    DATABASE_URL,
    KAFKA_BOOTSTRAP,
    KAFKA_CONFIG,
    LOG_DIR,
    OVERLAP,
    SPARK_MASTER,
    TRANSACTION_TIMEOUT,
    Settings,
    default_log_dir,
    installed_pyspark,
    load,
    redact,
    to_env,
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
                           KAFKA_CONFIG: '{"security.protocol": "SSL", "linger.ms": 5}'}))
    assert settings.spark_master == "spark://127.0.0.1:7077"
    assert settings.kafka(**{"linger.ms": 0}) == {"bootstrap.servers": "127.0.0.1:9092",
                                                   "security.protocol": "SSL", "linger.ms": 0}


@pytest.mark.parametrize(("extra", "named"), [
    ('{"security.protocol": "SASL_SSL"}', "sasl.mechanism 'GSSAPI'"),     # Kerberos: no reader equivalent
    ('{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}', "needs sasl.username"),
    ('{"ssl.certificate.location": "/c.pem"}', "'ssl.certificate.location'"),  # client certificates
    ('{"sasl.oauthbearer.config": "x"}', "'sasl.oauthbearer.config'"),
    ('{"security.protocol": "TLS"}', "security.protocol 'TLS'"),
])
def test_kafka_config_the_spark_reader_cannot_honour_fails_when_loaded(extra: str, named: str) -> None:
    error = failure(env(**{KAFKA_CONFIG: extra}))
    assert error.field == KAFKA_CONFIG and named in str(error)


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


def test_redact_hides_passwords_in_the_query_too() -> None:
    url = f"postgresql://eos:{SECRET}@h:5432/db?sslmode=verify-full&sslpassword={SECRET}&PassWord={SECRET}&x"
    assert redact(url) == "postgresql://eos:***@h:5432/db?sslmode=verify-full&sslpassword=***&PassWord=***&x"
    assert redact(f"postgresql://eos@h/db?password={SECRET}") == "postgresql://eos@h/db?password=***"


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "1.5"])
def test_a_bad_marker_retention_fails_when_loaded_not_at_publish(raw: str) -> None:
    from eosbatch.config import MARKER_RETENTION

    error = failure(env(**{MARKER_RETENTION: raw}))
    assert error.field == MARKER_RETENTION and raw in str(error)


def test_redact_leaves_a_url_without_password_alone() -> None:
    assert redact("postgresql://eos@127.0.0.1:5432/db") == "postgresql://eos@127.0.0.1:5432/db"


def test_libpq_url_drops_the_driver_and_needs_a_scheme() -> None:
    assert to_libpq_url(URL) == f"postgresql://eos:{SECRET}@127.0.0.1:5432/eosbatch"
    assert load(env()).psycopg_dsn.startswith("postgresql://eos:")
    with pytest.raises(ConfigError) as info:
        to_libpq_url(f"eos:{SECRET}@h/db")
    assert info.value.field == DATABASE_URL
    assert SECRET not in str(info.value)


def test_timeouts_and_log_folder_have_defaults() -> None:
    settings = load(env())
    assert settings.transaction_timeout_ms == 600_000
    assert settings.connect_timeout_s == 10.0
    assert settings.log_dir  # a folder, never "" once loaded


def test_settings_built_by_hand_keep_working() -> None:
    settings = Settings(URL, "127.0.0.1:9092", {}, "local[2]")
    assert (settings.transaction_timeout_ms, settings.connect_timeout_s) == (600_000, 10.0)


def test_timeouts_and_log_folder_are_read() -> None:
    settings = load(env(**{TRANSACTION_TIMEOUT: "900000", CONNECT_TIMEOUT: "2.5", LOG_DIR: "/var/log/eos"}))
    assert settings.transaction_timeout_ms == 900_000
    assert settings.connect_timeout_s == 2.5
    assert settings.log_dir == "/var/log/eos"


@pytest.mark.parametrize("value", ["0", "999", "-5", "1e6", "ten", "2147483648"])
def test_transaction_timeout_is_validated(value: str) -> None:
    error = failure(env(**{TRANSACTION_TIMEOUT: value}))
    assert error.field == TRANSACTION_TIMEOUT
    assert value in str(error)


@pytest.mark.parametrize("value", ["0", "0.5", "-1", "soon", "3601"])
def test_connect_timeout_is_validated(value: str) -> None:
    assert failure(env(**{CONNECT_TIMEOUT: value})).field == CONNECT_TIMEOUT


def test_transaction_timeout_in_kafka_config_points_at_the_setting() -> None:
    error = failure(env(**{KAFKA_CONFIG: '{"transaction.timeout.ms": 1000}'}))
    assert error.field == KAFKA_CONFIG
    assert TRANSACTION_TIMEOUT in str(error)


def test_default_log_folder_needs_no_stack() -> None:
    assert default_log_dir({"EOSBATCH_HOME": "/srv/eos"}) == "/srv/eos/logs"
    assert default_log_dir({"XDG_STATE_HOME": "/state"}) == "/state/eosbatch/logs"
    assert default_log_dir({}).endswith("/.local/state/eosbatch/logs")


@pytest.mark.parametrize("raw", ["abc", "0", "0.5", "-5", "nan", "inf", "1e999"])
def test_lease_seconds_is_validated_naming_the_field(raw: str) -> None:
    from eosbatch.config import LEASE_SECONDS

    error = failure(env(**{LEASE_SECONDS: raw}))
    assert error.field == LEASE_SECONDS and raw in str(error)


def test_lease_seconds_default_and_value() -> None:
    from eosbatch.config import DEFAULT_LEASE_SECONDS, LEASE_SECONDS

    assert load(env()).lease_seconds == DEFAULT_LEASE_SECONDS == 60
    assert load(env(**{LEASE_SECONDS: " 5 "})).lease_seconds == 5


@pytest.mark.parametrize("bad", ["http://h:15002", "sc://h", "sc://:15002", "sc://h:port"])
def test_spark_remote_must_be_a_connect_url(bad) -> None:
    with pytest.raises(ConfigError, match="EOSBATCH_SPARK_REMOTE"):
        load(env(EOSBATCH_SPARK_REMOTE=bad))


def test_spark_remote_and_jars(tmp_path) -> None:
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"")
    settings = load(env(EOSBATCH_SPARK_REMOTE="sc://127.0.0.1:15002/;use_ssl=true", EOSBATCH_SPARK_JARS=f" {jar} ,"))
    assert settings.spark_remote == "sc://127.0.0.1:15002/;use_ssl=true" and settings.spark_jars == (str(jar),)
    assert load(env()).spark_remote == "" and load(env()).spark_jars == ()
    with pytest.raises(ConfigError, match="EOSBATCH_SPARK_JARS: no such file"):
        load(env(EOSBATCH_SPARK_JARS=str(tmp_path / "missing.jar")))


def test_spark_jars_must_be_built_for_the_installed_pyspark(tmp_path) -> None:
    installed = installed_pyspark()
    connector = tmp_path / f"spark-sql-kafka-0-10_2.13-{installed}.jar"
    older = tmp_path / "spark-token-provider-kafka-0-10_2.13-3.5.1.jar"
    clients = tmp_path / "kafka-clients-3.9.2.jar"  # not Spark's own: its version is Kafka's
    for jar in (connector, older, clients):
        jar.write_bytes(b"")
    assert load(env(EOSBATCH_SPARK_JARS=f"{connector},{clients}")).spark_jars == (str(connector), str(clients))
    with pytest.raises(ConfigError, match=rf"EOSBATCH_SPARK_JARS: {re.escape(older.name)} is built for Spark "
                                          rf"3\.5\.1, but the installed PySpark is {re.escape(installed)}"):
        load(env(EOSBATCH_SPARK_JARS=f"{connector},{older},{clients}"))
    # spark-avro (eosbatch.formats.Avro) is a jar of Spark's own too: checked alike
    avro, older_avro = tmp_path / f"spark-avro_2.13-{installed}.jar", tmp_path / "spark-avro_2.13-3.5.1.jar"
    for jar in (avro, older_avro):
        jar.write_bytes(b"")
    assert load(env(EOSBATCH_SPARK_JARS=f"{connector},{avro}")).spark_jars == (str(connector), str(avro))
    with pytest.raises(ConfigError, match=rf"{re.escape(older_avro.name)} is built for Spark 3\.5\.1"):
        load(env(EOSBATCH_SPARK_JARS=f"{connector},{older_avro}"))


def test_staging_writers_is_a_bounded_whole_number() -> None:
    assert load(env()).staging_writers == 0
    assert load(env(EOSBATCH_STAGING_WRITERS="8")).staging_writers == 8
    for bad in ("0", "-1", "many", "10001"):
        error = failure(env(EOSBATCH_STAGING_WRITERS=bad))
        assert error.field == "EOSBATCH_STAGING_WRITERS" and "PostgreSQL connections" in str(error)


def test_the_kafka_reader_is_auto_unless_another_is_asked_for_and_travels_to_children() -> None:
    assert load(env()).kafka_reader == "auto"
    assert load(env(EOSBATCH_KAFKA_READER="spark")).kafka_reader == "spark"
    assert load(env(EOSBATCH_KAFKA_READER=" Python ")).kafka_reader == "python"
    assert load(to_env(load(env(EOSBATCH_KAFKA_READER="python")))).kafka_reader == "python"
    assert load(env(EOSBATCH_KAFKA_READER="auto")).kafka_reader == "auto"
    for bad in ("java", "spark,python", "1"):
        error = failure(env(EOSBATCH_KAFKA_READER=bad))
        assert error.field == "EOSBATCH_KAFKA_READER" and "spark, python or auto" in str(error) and bad in str(error)


def test_compaction_settings_default_and_are_validated() -> None:
    defaults = load(env())
    assert (defaults.compact_every, defaults.compact_after_days) == (1000, 7.0)
    assert (load(env(EOSBATCH_COMPACT_EVERY="0", EOSBATCH_COMPACT_AFTER_DAYS="0.5")).compact_every,
            load(env(EOSBATCH_COMPACT_AFTER_DAYS="0.5")).compact_after_days) == (0, 0.5)
    for field, bad in (("EOSBATCH_COMPACT_EVERY", "-1"), ("EOSBATCH_COMPACT_EVERY", "often"),
                       ("EOSBATCH_COMPACT_EVERY", "²"), ("EOSBATCH_STAGING_WRITERS", "²"),
                       ("EOSBATCH_COMPACT_AFTER_DAYS", "-2"), ("EOSBATCH_COMPACT_AFTER_DAYS", "a week")):
        error = failure(env(**{field: bad}))
        assert error.field == field and bad in str(error)


@pytest.mark.parametrize(("value", "expected"), [("", False), ("0", False), ("off", False), ("1", True),
                                                 ("TRUE", True), (" yes ", True)])
def test_overlap_is_off_unless_asked_for(value: str, expected: bool) -> None:
    assert load(env(**{OVERLAP: value})).overlap is expected


def test_an_overlap_that_is_not_a_yes_or_no_fails_naming_the_setting() -> None:
    error = failure(env(**{OVERLAP: "2"}))
    assert error.field == OVERLAP and "'2'" in str(error)
