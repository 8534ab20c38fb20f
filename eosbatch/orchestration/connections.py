"""Airflow connections <-> eosbatch settings.

Tasks resolve `eosbatch_postgres` (conn type postgres), `eosbatch_kafka` (conn type kafka, librdkafka
settings in `extra`, as the apache-kafka provider defines it) and `eosbatch_spark` (conn type spark_connect:
the Spark Connect server) into the settings of EOSBATCH_DATABASE_URL, EOSBATCH_KAFKA_BOOTSTRAP,
EOSBATCH_KAFKA_CONFIG and EOSBATCH_SPARK_REMOTE; the other settings come from the environment, as does one
whose connection does not exist. The task hands them to the steps in its Context (the spark-submit child gets
them in its environment); nothing is written into the task process's environment.

The conversions are pure functions over any object with Airflow's Connection attributes. Passwords are
never logged: messages name fields and keys, never values.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from eosbatch import config
from eosbatch.exceptions import ConfigError

POSTGRES_CONN_ID = "eosbatch_postgres"
KAFKA_CONN_ID = "eosbatch_kafka"
SPARK_CONN_ID = "eosbatch_spark"  # conn type spark_connect (apache-airflow-providers-apache-spark): the engine
# libpq connection parameters that may come from a postgres connection's extra; the provider's own
# keys (cursor, iam, ...) mean nothing to libpq and are left out.
LIBPQ_EXTRA = frozenset({
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcrl", "connect_timeout",
    "application_name", "options", "target_session_attrs", "keepalives", "keepalives_idle",
    "keepalives_interval", "keepalives_count", "gssencmode", "channel_binding",
})
# Settings eosbatch sets itself on every client (config.load refuses them in EOSBATCH_KAFKA_CONFIG).
KAFKA_OWNED = frozenset({"transactional.id", "enable.idempotence", "isolation.level", "group.id"})
# The provider resolves these from dotted paths; eosbatch's clients take no callbacks from JSON.
KAFKA_CALLBACKS = frozenset({"error_cb", "throttle_cb", "stats_cb", "log_cb", "oauth_cb", "on_commit"})

Log = Callable[[str], None]


class ConnectionLike(Protocol):
    conn_type: str | None
    host: str | None
    schema: str | None
    login: str | None
    password: str | None
    port: int | None
    extra: str | None


class Converted(NamedTuple):
    env: dict[str, str]
    notes: list[str]  # what was left out, by key name only


def _extra(conn: ConnectionLike, conn_id: str) -> dict[str, Any]:
    raw = conn.extra
    if not raw:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        extra = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigError(f"connection {conn_id}.extra", "not valid JSON") from None
    if not isinstance(extra, dict):
        raise ConfigError(f"connection {conn_id}.extra", "must be a JSON object")
    return extra


def postgres_env(conn: ConnectionLike, conn_id: str = POSTGRES_CONN_ID) -> Converted:
    """A postgres connection as EOSBATCH_DATABASE_URL (a postgresql+psycopg2 SQLAlchemy URL)."""
    if (conn.conn_type or "").lower() not in ("postgres", "postgresql"):
        raise ConfigError(f"connection {conn_id}.conn_type", f"must be 'postgres', got {conn.conn_type!r}")
    if not conn.host:
        raise ConfigError(f"connection {conn_id}.host", "not set")
    if not conn.schema:
        raise ConfigError(f"connection {conn_id}.schema", "not set (the database name)")
    port = conn.port or 5432
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"connection {conn_id}.port", "must be a port number")
    user = quote(conn.login or "", safe="")
    if conn.password:
        user += ":" + quote(conn.password, safe="")
    extra = _extra(conn, conn_id)
    params = {k: str(v) for k, v in extra.items() if k in LIBPQ_EXTRA and v is not None}
    database = quote(conn.schema, safe="")
    if "," in conn.host:  # several servers, libpq's way: host "a,b", their ports in extra "port" ("5432,5433")
        hosts = [_bracketed(h.strip()) for h in conn.host.split(",")]
        ports = [p.strip() for p in str(extra.get("port", port)).split(",")]
        if len(ports) == 1:
            ports *= len(hosts)
        if len(ports) != len(hosts) or not all(p.isdigit() for p in ports):
            raise ConfigError(f"connection {conn_id}.extra", "\"port\" must list one port per host")
        pairs = [("host", f"{h}:{p}") for h, p in zip(hosts, ports, strict=True)] + sorted(params.items())
        url = f"postgresql+psycopg2://{user}{'@' if user else ''}/{database}?{urlencode(pairs, safe=':[]')}"
    else:
        url = f"postgresql+psycopg2://{user}{'@' if user else ''}{_bracketed(conn.host)}:{port}/{database}"
        if params:
            url += "?" + urlencode(sorted(params.items()))
    ignored = sorted(set(extra) - LIBPQ_EXTRA - {"port"})
    notes = [f"{conn_id}: extra keys not used by eosbatch: {', '.join(ignored)}"] if ignored else []
    return Converted({config.DATABASE_URL: url}, notes)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def kafka_env(conn: ConnectionLike, conn_id: str = KAFKA_CONN_ID) -> Converted:
    """A kafka connection (librdkafka settings in extra) as EOSBATCH_KAFKA_BOOTSTRAP and _CONFIG."""
    if (conn.conn_type or "").lower() != "kafka":
        raise ConfigError(f"connection {conn_id}.conn_type", f"must be 'kafka', got {conn.conn_type!r}")
    extra = _extra(conn, conn_id)
    bootstrap = extra.pop("bootstrap.servers", None)
    if not bootstrap and conn.host:  # a connection made from a URI: kafka://host:port
        bootstrap = f"{conn.host}:{conn.port or 9092}"
    if not bootstrap or not isinstance(bootstrap, str):
        raise ConfigError(f"connection {conn_id}.extra",
                          "needs \"bootstrap.servers\" (host:port[,host:port])")
    notes = []
    dropped = sorted((KAFKA_OWNED | KAFKA_CALLBACKS) & set(extra))
    if dropped:
        notes.append(f"{conn_id}: extra keys left out (eosbatch sets them itself, or they are callbacks): "
                     f"{', '.join(dropped)}")
    rest = {k: v for k, v in extra.items() if k not in KAFKA_OWNED | KAFKA_CALLBACKS}
    for key, value in rest.items():
        if not isinstance(value, str | int | float | bool):
            raise ConfigError(f"connection {conn_id}.extra[{key!r}]",
                              "must be a string, number or boolean")
    env = {config.KAFKA_BOOTSTRAP: bootstrap, config.KAFKA_CONFIG: json.dumps(rest, sort_keys=True)}
    return Converted(env, notes)


# ---------------------------------------------------------------- the other way: settings -> connections

def postgres_connection(database_url: str) -> dict[str, Any]:
    """EOSBATCH_DATABASE_URL as an Airflow connection (the `airflow connections import` JSON shape)."""
    parts = urlsplit(config.to_libpq_url(database_url))
    query = dict(parse_qsl(parts.query))
    servers = config.database_hosts(database_url)
    if len(servers) > 1:  # libpq's way, as the postgres provider passes it on: host "a,b", extra port "p,q"
        query["port"] = ",".join(str(port or 5432) for _, port in servers)
        return {"conn_type": "postgres", "host": ",".join(host for host, _ in servers),
                "port": servers[0][1] or 5432,
                "login": unquote(parts.username) if parts.username else None,
                "password": unquote(parts.password) if parts.password else None,
                "schema": unquote(parts.path.lstrip("/")) or None, "extra": json.dumps(query)}
    return {"conn_type": "postgres", "host": parts.hostname, "port": parts.port or 5432,
            "login": unquote(parts.username) if parts.username else None,
            "password": unquote(parts.password) if parts.password else None,
            "schema": unquote(parts.path.lstrip("/")) or None,
            "extra": json.dumps(query) if query else None}


def kafka_connection(bootstrap: str, kafka_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    extra = {"bootstrap.servers": bootstrap, **(kafka_config or {})}
    return {"conn_type": "kafka", "extra": json.dumps(extra)}


# ---------------------------------------------------------------- at task run time

def _airflow_connection(conn_id: str) -> ConnectionLike | None:
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return Connection.get(conn_id)  # type: ignore[no-any-return]
    except AirflowNotFoundException:
        return None


def _mask(value: str) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # outside Airflow there is no task log to mask
        return
    mask_secret(value)


def spark_connect_env(conn: ConnectionLike, conn_id: str = SPARK_CONN_ID) -> Converted:
    """A spark_connect connection (host, port; extra: use_ssl, token, user_id, as the apache-spark provider
    defines them) as EOSBATCH_SPARK_REMOTE."""
    if (conn.conn_type or "").lower() != "spark_connect":
        raise ConfigError(f"connection {conn_id}.conn_type", f"must be 'spark_connect', got {conn.conn_type!r}")
    host = (conn.host or "").removeprefix("sc://").strip("/")
    if not host:
        raise ConfigError(f"connection {conn_id}.host", "not set")
    extra = _extra(conn, conn_id)
    params = [f"{key}={quote(str(extra[key]), safe='')}" for key in ("user_id", "token") if extra.get(key)]
    if str(extra.get("use_ssl", "")).lower() in ("true", "1"):
        params.append("use_ssl=true")
    if extra.get("token"):
        _mask(str(extra["token"]))
    url = f"sc://{host}:{conn.port or 15002}" + (f"/;{';'.join(params)}" if params else "")
    return Converted({config.SPARK_REMOTE: url}, [])


def pipeline_conn_id(conn_id: str, pipeline: str) -> str:
    """The connection that serves one pipeline only (`eosbatch_postgres__<pipeline>`), before the shared one:
    pipelines of one Airflow can write to different databases, or reach Kafka as different principals."""
    return f"{conn_id}__{pipeline}"


def resolved_env(log: Log = print, get: Callable[[str], ConnectionLike | None] = _airflow_connection,
                 environ: Mapping[str, str] | None = None, pipeline: str | None = None) -> dict[str, str]:
    """`environ` (default: this process's environment, read only) with the connections' settings over it. For
    a pipeline, its own connections (pipeline_conn_id) come first; each setting without a connection stays as
    the environment has it."""
    env = dict(os.environ if environ is None else environ)
    for shared, convert in ((POSTGRES_CONN_ID, postgres_env), (KAFKA_CONN_ID, kafka_env),
                            (SPARK_CONN_ID, spark_connect_env)):
        candidates = [pipeline_conn_id(shared, pipeline), shared] if pipeline else [shared]
        conn_id, conn = next(((c, found) for c in candidates if (found := get(c)) is not None), (shared, None))
        if conn is None:
            log(f"connection {' or '.join(candidates)}: not defined; using the environment")
            continue
        if conn.password:
            _mask(conn.password)
        converted = convert(conn, conn_id)
        if config.DATABASE_URL in converted.env:
            _mask(converted.env[config.DATABASE_URL])
        env.update(converted.env)
        for note in converted.notes:
            log(note)
        log(f"connection {conn_id}: exported {', '.join(sorted(converted.env))}")
    return env


def settings(log: Log = print, get: Callable[[str], ConnectionLike | None] = _airflow_connection,
             environ: Mapping[str, str] | None = None, pipeline: str | None = None) -> config.Settings:
    """The settings of a task: the connections (see resolved_env) and the environment's other settings.
    Nothing is written into the environment: the settings travel in the task's Context."""
    return config.load(resolved_env(log, get, environ, pipeline))


def export_settings(log: Log = print, get: Callable[[str], ConnectionLike | None] = _airflow_connection,
                    environ: dict[str, str] | None = None, pipeline: str | None = None) -> config.Settings:
    """`settings`, also written into `environ` when given (a child process's environment being built); never
    into this process's own."""
    env = resolved_env(log, get, environ, pipeline)
    if environ is not None:
        environ.update(env)
    return config.load(env)
