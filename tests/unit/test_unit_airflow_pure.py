"""The Airflow side's pure parts: Connection <-> settings, the backfill/replay param schemas, airflow.cfg."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

from eosbatch import config
from eosbatch.exceptions import ConfigError
from eosbatch.orchestration import connections, params
from eosbatch.orchestration.local import airflow_cfg

pytestmark = pytest.mark.unit
SECRET = "s3cr:t/p@ss%w"


def conn(conn_type: str, host: str | None = None, port: int | None = None, login: str | None = None,
         password: str | None = None, schema: str | None = None, extra: object = None) -> SimpleNamespace:
    return SimpleNamespace(conn_type=conn_type, host=host, port=port, login=login, password=password,
                           schema=schema, extra=json.dumps(extra) if isinstance(extra, dict) else extra)


# ---------------------------------------------------------------- postgres

def test_postgres_connection_becomes_a_sqlalchemy_url_with_the_password_encoded() -> None:
    out = connections.postgres_env(conn("postgres", "db.example", 5433, "etl", SECRET, "ledger",
                                        {"sslmode": "require", "cursor": "dictcursor"}))
    url = out.env[config.DATABASE_URL]
    assert url == "postgresql+psycopg2://etl:s3cr%3At%2Fp%40ss%25w@db.example:5433/ledger?sslmode=require"
    settings = config.load({config.DATABASE_URL: url, config.KAFKA_BOOTSTRAP: "k:9092"})
    assert SECRET not in config.redact(settings.database_url) and "***" in config.redact(settings.database_url)
    assert out.notes == ["eosbatch_postgres: extra keys not used by eosbatch: cursor"]
    assert all(SECRET not in note for note in out.notes)


def test_postgres_connection_without_password_or_port() -> None:
    out = connections.postgres_env(conn("postgres", "127.0.0.1", None, "eosbatch", None, "eosbatch"))
    assert out.env[config.DATABASE_URL] == "postgresql+psycopg2://eosbatch@127.0.0.1:5432/eosbatch"


@pytest.mark.parametrize(("bad", "field"), [
    (conn("mysql", "h", 1, "u", "p", "d"), "conn_type"),
    (conn("postgres", None, 1, "u", "p", "d"), "host"),
    (conn("postgres", "h", 1, "u", SECRET, None), "schema"),
    (conn("postgres", "h", 1, "u", SECRET, "d", "{not json"), "extra"),
])
def test_postgres_connection_errors_name_the_field_and_never_the_password(bad, field) -> None:
    with pytest.raises(ConfigError) as caught:
        connections.postgres_env(bad)
    assert field in str(caught.value) and SECRET not in str(caught.value)


def test_postgres_round_trip_through_the_connection_shape() -> None:
    url = "postgresql+psycopg2://etl:s3cr%3At%2Fp%40ss%25w@db.example:5433/ledger?sslmode=require"
    shape = connections.postgres_connection(url)
    assert shape["password"] == SECRET and shape["schema"] == "ledger" and shape["port"] == 5433
    back = connections.postgres_env(conn(**{**shape, "extra": shape["extra"]}))
    assert back.env[config.DATABASE_URL] == url


# ---------------------------------------------------------------- kafka

def test_kafka_connection_extra_is_librdkafka_config() -> None:
    extra = {"bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL",
             "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": SECRET,
             "group.id": "my-group", "oauth_cb": "pkg.cb"}
    out = connections.kafka_env(conn("kafka", extra=extra))
    assert out.env[config.KAFKA_BOOTSTRAP] == "b1:9092,b2:9092"
    assert json.loads(out.env[config.KAFKA_CONFIG]) == {
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": SECRET}
    assert "group.id" in out.notes[0] and "oauth_cb" in out.notes[0]
    assert all(SECRET not in note for note in out.notes)
    loaded = config.load({config.DATABASE_URL: "postgresql://h/d", **out.env})  # eosbatch accepts the result
    assert loaded.kafka()["sasl.password"] == SECRET


def test_kafka_connection_needs_bootstrap_servers() -> None:
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        connections.kafka_env(conn("kafka", extra={"security.protocol": "SSL"}))
    with pytest.raises(ConfigError, match="conn_type"):
        connections.kafka_env(conn("postgres", extra={"bootstrap.servers": "b:1"}))
    with pytest.raises(ConfigError, match="string, number or boolean"):
        connections.kafka_env(conn("kafka", extra={"bootstrap.servers": "b:1", "nested": {"a": 1}}))
    assert connections.kafka_env(conn("kafka", host="b", port=19092)).env[config.KAFKA_BOOTSTRAP] == "b:19092"


def test_kafka_round_trip() -> None:
    shape = connections.kafka_connection("b:9092", {"security.protocol": "SSL"})
    out = connections.kafka_env(conn(**shape))
    assert out.env == {config.KAFKA_BOOTSTRAP: "b:9092", config.KAFKA_CONFIG: '{"security.protocol": "SSL"}'}


# ---------------------------------------------------------------- resolution at task run time

def test_export_settings_uses_connections_and_falls_back_to_the_environment() -> None:
    found = {connections.POSTGRES_CONN_ID: conn("postgres", "pg", 5432, "u", SECRET, "db")}
    environ = {config.KAFKA_BOOTSTRAP: "from-env:9092"}
    lines: list[str] = []
    settings = connections.export_settings(lines.append, found.get, environ)
    assert settings.database_url.startswith("postgresql+psycopg2://u:") and settings.kafka_bootstrap == "from-env:9092"
    assert environ[config.DATABASE_URL] == settings.database_url
    assert any("eosbatch_kafka: not defined; using the environment" in line for line in lines)
    assert all(SECRET not in line for line in lines)


def test_a_pipelines_own_connection_comes_before_the_shared_one() -> None:
    found = {connections.POSTGRES_CONN_ID: conn("postgres", "shared", 5432, "u", SECRET, "db"),
             "eosbatch_postgres__orders": conn("postgres", "own", 5432, "u", SECRET, "db"),
             connections.KAFKA_CONN_ID: conn("kafka", extra=json.dumps({"bootstrap.servers": "k:9092"}))}
    lines: list[str] = []
    own = connections.export_settings(lines.append, found.get, {}, pipeline="orders")
    other = connections.export_settings(lines.append, found.get, {}, pipeline="totals")
    assert "@own:5432" in own.database_url and "@shared:5432" in other.database_url
    assert own.kafka_bootstrap == other.kafka_bootstrap == "k:9092"
    assert "connection eosbatch_postgres__orders: exported EOSBATCH_DATABASE_URL" in lines
    assert "connection eosbatch_spark__orders or eosbatch_spark: not defined; using the environment" in lines


def test_a_pipelines_own_connection_does_not_stay_for_the_next_pipeline(monkeypatch) -> None:
    """One process, two pipelines' tasks (dag.test()): B, without connections of its own or shared ones,
    gets the environment as it was, not A's database."""
    monkeypatch.setenv(config.DATABASE_URL, "postgresql+psycopg2://env@from-env:5432/db")
    monkeypatch.setenv(config.KAFKA_BOOTSTRAP, "from-env:9092")
    found = {"eosbatch_postgres__orders": conn("postgres", "own", 5432, "u", SECRET, "db")}
    assert "@own:5432" in connections.export_settings(lambda _: None, found.get, pipeline="orders").database_url
    after = connections.export_settings(lambda _: None, found.get, pipeline="totals")
    assert after.database_url == "postgresql+psycopg2://env@from-env:5432/db"
    assert os.environ[config.DATABASE_URL] == "postgresql+psycopg2://env@from-env:5432/db"


def test_export_settings_fails_naming_the_missing_setting() -> None:
    with pytest.raises(ConfigError, match=config.DATABASE_URL):
        connections.export_settings(lambda _: None, lambda _: None, {})


# ---------------------------------------------------------------- params

def _check(name: str, value: object) -> None:
    default, schema, _ = params.BACKFILL[name]
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize(("name", "value"), [
    ("ranges", []), ("ranges", ["orders:0:0-100", "my.topic-x:12:5-6"]),
    ("from", None), ("from", "2026-11-22T03:00:00Z"), ("to", "2026-11-22 03:00:00.123+01:00"), ("to", "2026-11-22"),
    ("mode", "fill"), ("mode", "reprocess"), ("publish", None), ("publish", False),
])
def test_backfill_params_accept(name, value) -> None:
    _check(name, value)


@pytest.mark.parametrize(("name", "value"), [
    ("ranges", "orders:0:0-100"), ("ranges", ["orders:0:0-x"]), ("ranges", ["orders:0-100"]),
    ("ranges", ["orders:0:0-1", "orders:0:0-1"]), ("from", "yesterday"), ("from", 1700000000),
    ("to", "2026-11-22T03"), ("mode", "fast"), ("publish", "yes"),
])
def test_backfill_params_refuse(name, value) -> None:
    with pytest.raises(jsonschema.ValidationError):
        _check(name, value)


def test_replay_batch_id_schema() -> None:
    jsonschema.validate(7, params.REPLAY_BATCH_ID)
    for bad in (0, "7", 1.5, None):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, params.REPLAY_BATCH_ID)


def test_backfill_request_from_resolved_params() -> None:
    request = params.backfill_request({"ranges": [], "from": "2026-01-01", "to": "2026-01-02", "mode": "fill",
                                       "publish": None})
    assert request == params.BackfillRequest([], "2026-01-01", "2026-01-02", "fill", None)


# ---------------------------------------------------------------- airflow.cfg

def test_airflow_cfg_binds_to_loopback_on_derived_ports() -> None:
    keys = {"jwt_secret": "j", "secret_key": "s", "fernet_key": "f"}
    text = airflow_cfg(Path("/h/airflow"), Path("/repo/dags"), 28080, "postgresql+psycopg2://u@127.0.0.1:1/airflow",
                       keys)
    for line in ["executor = LocalExecutor", "dags_folder = /repo/dags", "load_examples = False",
                 "execution_api_server_url = http://127.0.0.1:28080/execution/", "port = 28080",
                 "scheduler_health_check_server_port = 28081", "worker_log_server_port = 28082",
                 "trigger_log_server_port = 28083",
                 "sql_alchemy_conn = postgresql+psycopg2://u@127.0.0.1:1/airflow", "jwt_secret = j",
                 "host = 127.0.0.1", "scheduler_health_check_server_host = 127.0.0.1"]:
        assert line in text.splitlines(), line


# ---------------------------------------------------------------- spark_connect

def test_spark_connect_connection_becomes_the_engine_url() -> None:
    plain = connections.spark_connect_env(conn("spark_connect", "spark-connect", 15002))
    assert plain.env == {config.SPARK_REMOTE: "sc://spark-connect:15002"}
    secured = connections.spark_connect_env(conn("spark_connect", "sc://host", None,
                                                 extra={"use_ssl": True, "token": "t/k", "user_id": "airflow"}))
    assert secured.env[config.SPARK_REMOTE] == "sc://host:15002/;user_id=airflow;token=t%2Fk;use_ssl=true"
    assert config.load({config.DATABASE_URL: "postgresql://u@h/db", config.KAFKA_BOOTSTRAP: "k:9092",
                        **secured.env}).spark_remote == secured.env[config.SPARK_REMOTE]


@pytest.mark.parametrize(("bad", "field"), [(conn("spark", "h"), "conn_type"), (conn("spark_connect"), "host")])
def test_spark_connect_connection_errors_name_the_field(bad, field) -> None:
    with pytest.raises(ConfigError, match=f"eosbatch_spark.{field}"):
        connections.spark_connect_env(bad)


# ---------------------------------------------------------------- assets

def _batch(batch_id: int, state: str, sink_rows: int | None, published: int | None) -> SimpleNamespace:
    from eosbatch.protocol.ranges import OffsetRange

    return SimpleNamespace(id=batch_id, kind="regular", state=state, commit_seq=batch_id, records_read=10,
                           sink_rows=sink_rows, dead_letters=1, published_records=published,
                           ranges=(OffsetRange("orders", 0, 0, 12),))


def _settings(bootstrap: str) -> config.Settings:
    return config.Settings("postgresql+psycopg2://etl:" + "pw@DB.example:5433/ledger", bootstrap, {}, "local[2]")


def test_asset_uris_follow_the_providers_conventions() -> None:
    from eosbatch.orchestration import assets
    from examples.orders.pipeline import order_totals as pipeline

    assert assets.sink_uri(_settings("k1:9092"), pipeline) == \
        f"postgres://db.example:5433/ledger/{pipeline.sink.schema}/{pipeline.sink.table}"
    # whatever order the bootstrap servers are listed in, one canonical host; the default port when none
    for bootstrap in ("k2:19092,k1:19092", "k1:19092, k2:19092"):
        assert assets.output_uri(_settings(bootstrap), pipeline) == f"kafka://k1:19092/{pipeline.output.topic}"
    assert assets.output_uri(_settings("kafka"), pipeline) == f"kafka://kafka:9092/{pipeline.output.topic}"
    from airflow.sdk import Asset  # the providers' sanitizers accept them unchanged

    assert Asset(assets.sink_uri(_settings("k1:9092"), pipeline)).uri == assets.sink_uri(_settings("k"), pipeline)
    assert pipeline.output is not None
    assert Asset(assets.output_uri(_settings("k1:9092"), pipeline)).uri == "kafka://k1:9092/" + pipeline.output.topic


def test_asset_events_only_for_work_done_in_the_task() -> None:
    from eosbatch.orchestration import assets
    from examples.orders.pipeline import order_totals as pipeline

    settings = _settings("k1:9092")
    changed = [_batch(1, "published", 5, 0),      # rolled forward (unpublished before): produced nothing
               _batch(2, "published", 7, 7),      # rolled forward: the output changed, the sink did not (here)
               _batch(3, "committed", 4, None),   # committed in the task, not published yet
               _batch(4, "published", 0, 0)]      # committed and published, all dead letters: nothing changed
    found = assets.events(settings, pipeline, changed, since_unpublished=[1, 2])
    assert [(e.which, e.extra["batch"]) for e in found] == [("output", 2), ("sink", 3)]
    assert found[1].extra["sink_rows"] == 4 and found[1].extra["ranges"] == ["orders:0:0-12"]
    assert found[0].extra["published"] == 7 and found[0].uri.startswith("kafka://k1:9092/")


def test_asset_events_name_only_the_batches_of_the_tasks_own_lane() -> None:
    """The two lanes run at once: a micro-batch task must not announce the backfill batch committed meanwhile
    (the backfill task announces it; a downstream DAG would run twice for it), nor the other way round."""
    from eosbatch.orchestration import assets
    from examples.orders.pipeline import order_totals as pipeline

    settings = _settings("k1:9092")
    changed = [_batch(5, "published", 3, 3), _with_kind(_batch(6, "published", 4, 4), "backfill"),
               _with_kind(_batch(7, "committed", 2, None), "replay")]

    def batches(in_lane):
        return sorted({e.extra["batch"] for e in assets.events(settings, pipeline, changed, [], in_lane)})

    assert batches("regular") == [5]
    assert batches("backfill") == [6, 7]
    assert batches(None) == [5, 6, 7]


def _with_kind(batch: SimpleNamespace, kind: str) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(batch), "kind": kind})
