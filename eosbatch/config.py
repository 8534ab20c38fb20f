"""Connection settings, read from the environment and validated up front (fail fast, name the field)."""

from __future__ import annotations

import json
import os
import re
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from eosbatch.exceptions import ConfigError
from eosbatch.spark_kafka_options import Unsupported, reader_options

DATABASE_URL = "EOSBATCH_DATABASE_URL"  # the ledger and sinks: postgresql+psycopg2://user:password@host:port/db
KAFKA_BOOTSTRAP = "EOSBATCH_KAFKA_BOOTSTRAP"  # host:port[,host:port] of the Kafka brokers
KAFKA_CONFIG = "EOSBATCH_KAFKA_CONFIG"  # a JSON object of librdkafka settings for every client (security, tuning)
SPARK_MASTER = "EOSBATCH_SPARK_MASTER"  # without a Connect server: spark-submit per batch on this master
SPARK_REMOTE = "EOSBATCH_SPARK_REMOTE"  # sc://host:port of a Spark Connect server: the long-lived engine
SPARK_JARS = "EOSBATCH_SPARK_JARS"      # the Kafka connector jars for spark-submit (comma-separated paths)
PIPELINES = "EOSBATCH_PIPELINES"  # comma-separated modules whose Pipeline globals (or PIPELINES list) are found
MARKER_RETENTION = "EOSBATCH_MARKER_RETENTION_MINUTES"  # must match the broker's offsets.retention.minutes
TRANSACTION_TIMEOUT = "EOSBATCH_TRANSACTION_TIMEOUT_MS"  # > the longest publish, <= transaction.max.timeout.ms
# How long a transactional call (init, commit, abort, sending the marker, the produce's flush) waits for the
# broker; past it the transaction's outcome is unknown and its producer is abandoned (tests lower it).
TRANSACTION_CALL_TIMEOUT = "EOSBATCH_TRANSACTION_CALL_TIMEOUT_S"
CONNECT_TIMEOUT = "EOSBATCH_CONNECT_TIMEOUT_S"  # how long to wait for Kafka or PostgreSQL to answer
LOG_DIR = "EOSBATCH_LOG_DIR"  # librdkafka's log (kafka.log), spark-submit drivers' logs; else default_log_dir()
STAGING_WRITERS = "EOSBATCH_STAGING_WRITERS"  # at most this many Spark tasks stage a batch (PostgreSQL connections)
COMPACT_EVERY = "EOSBATCH_COMPACT_EVERY"  # compact the ledger after every N-th commit of a pipeline (0: never)
COMPACT_AFTER_DAYS = "EOSBATCH_COMPACT_AFTER_DAYS"  # ... of the published batches committed longer ago than this
OVERLAP = "EOSBATCH_OVERLAP"  # `eosbatch run` overlaps its batches' steps (process N+1 | commit N | publish N-1)
EARLY_PUBLISH = "EOSBATCH_EARLY_PUBLISH"  # a batch's Kafka transaction is filled while its commit runs
METRICS = "EOSBATCH_METRICS"  # where the OpenTelemetry metrics go: global, otlp, file:PATH or none (docs/monitoring.md)
METRICS_TARGETS = ("global", "otlp", "none")
# How the process step reads Kafka: spark (Spark's Kafka source), python (one librdkafka consumer per Spark task,
# over many partitions), or auto (python for a batch of 64 ranges or more whose tasks would each read several;
# docs/engine.md).
KAFKA_READER = "EOSBATCH_KAFKA_READER"
KAFKA_READERS = ("spark", "python", "auto")
DEFAULT_COMPACT_EVERY = 1000
DEFAULT_COMPACT_AFTER_DAYS = 7.0

# librdkafka's own bounds for transaction.timeout.ms; the broker's transaction.max.timeout.ms (15 min by
# default) is checked by the broker at init_transactions(), and eosbatch names both values then.
TRANSACTION_TIMEOUT_RANGE = (1_000, 2_147_483_647)
DEFAULT_TRANSACTION_TIMEOUT_MS = 600_000
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_TRANSACTION_CALL_TIMEOUT_S = 60.0


def _digits(raw: str) -> bool:
    """ASCII digits only: str.isdigit() accepts "²", which int() refuses."""
    return raw.isascii() and raw.isdigit()


def _number(raw: str) -> float:
    """float(raw), or NaN (which every range check refuses) when it is not a number."""
    try:
        return float(raw)
    except ValueError:
        return float("nan")


def marker_retention_seconds(env: dict[str, str] | None = None) -> float:
    """How long Kafka keeps the marker group's offsets once nothing commits to it: the broker's
    `offsets.retention.minutes` (7 days by default). Set it here when the broker's differs."""
    raw = (os.environ if env is None else env).get(MARKER_RETENTION, "").strip() or "10080"
    if not _digits(raw) or int(raw) < 1:
        raise ConfigError(MARKER_RETENTION, f"must be a whole number of minutes >= 1, got {raw!r}")
    return int(raw) * 60.0
LEASE_SECONDS = "EOSBATCH_LEASE_SECONDS"  # one runner per lane: how long a lease outlives its last renewal
DEFAULT_LEASE_SECONDS = 60.0
MIN_LEASE_SECONDS = 1.0


class Settings(NamedTuple):
    database_url: str
    kafka_bootstrap: str
    kafka_config: dict[str, Any]
    spark_master: str
    # Defaults, so that Settings built by hand (tests, tools) keep working.
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS  # must exceed the longest publish
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S  # first contact with Kafka or PostgreSQL
    log_dir: str = ""  # librdkafka's own log; "" = default_log_dir()
    lease_seconds: float = DEFAULT_LEASE_SECONDS  # a lane's lease: renewed every third of it, taken after it
    spark_remote: str = ""  # a Spark Connect URL: batches run there; "" = spark-submit on spark_master
    spark_jars: tuple[str, ...] = ()  # spark-submit's --jars (a Connect server has its own, from its start)
    staging_writers: int = 0  # 0: one task per Kafka range, or one per engine core past 4 ranges a core (spark.tasks)
    # The ledger keeps a committed range per partition and batch; finalize merges the old ones every N commits
    # (eosbatch compact, on its own), so the ledger does not grow with the history. 0: never.
    compact_every: int = DEFAULT_COMPACT_EVERY
    compact_after_days: float = DEFAULT_COMPACT_AFTER_DAYS
    # A run of several batches keeps one batch in each step at once (eosbatch.running.overlapped); off: one
    # after another.
    overlap: bool = False
    # One batch at a time: its records are produced into its open Kafka transaction while PostgreSQL commits
    # it, and the Kafka transaction commits only after PostgreSQL's COMMIT (steps.commit_and_publish). On by
    # default; where it does not apply (an overlapped run, the steps DAG shape, a backfill, an accumulate sink,
    # ...) the log says why in one line.
    early_publish: bool = True
    # Kafka's offsets.retention.minutes, in seconds: how long a marker outlives its last commit.
    marker_retention_s: float = 10080 * 60.0
    # "global": the process's OpenTelemetry MeterProvider (Airflow's with [metrics] otel_on; else the API's no-op);
    # "otlp": eosbatch's own, exporting by OTLP as the OTEL_EXPORTER_OTLP_* variables say; "file:PATH": JSON lines.
    metrics: str = "global"
    # A transactional call's wait for the broker (EOSBATCH_TRANSACTION_CALL_TIMEOUT_S): past it, the outcome is
    # unknown (eosbatch.kafka.publisher's AMBIGUOUS state); a call still blocked at twice it and 30 s more ends
    # the process, exit 3 (eosbatch.kafka.watchdog).
    transaction_call_timeout_s: float = DEFAULT_TRANSACTION_CALL_TIMEOUT_S
    # The process step's Kafka reader: "spark" (Spark's Kafka source: a task and a Java consumer per partition),
    # "python" (eosbatch.spark.kafka_datasource: one librdkafka consumer per task, over many partitions) or "auto"
    # (the default: python for a batch whose tasks each read several partitions, spark otherwise).
    kafka_reader: str = "auto"

    def kafka(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings for a client: bootstrap + the user's extra config + the caller's needs."""
        return {"bootstrap.servers": self.kafka_bootstrap, **self.kafka_config, **overrides}

    @property
    def psycopg_dsn(self) -> str:
        """The SQLAlchemy URL as a libpq URL (psycopg2 and COPY from Spark executors use it)."""
        return to_libpq_url(self.database_url)


def default_log_dir(env: dict[str, str] | None = None) -> str:
    """Where client logs go when EOSBATCH_LOG_DIR is unset: $EOSBATCH_HOME/logs (next to the embedded stack's
    logs) when that is set, else the user's state folder. Read from the environment only: the production
    path never imports eosbatch.stack."""
    found = dict(os.environ) if env is None else env
    if found.get("EOSBATCH_HOME", "").strip():
        return os.path.join(found["EOSBATCH_HOME"].strip(), "logs")
    state = found.get("XDG_STATE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "eosbatch", "logs")


def _transaction_timeout(env: dict[str, str]) -> int:
    raw = env.get(TRANSACTION_TIMEOUT, "").strip() or str(DEFAULT_TRANSACTION_TIMEOUT_MS)
    low, high = TRANSACTION_TIMEOUT_RANGE
    if not _digits(raw) or not low <= int(raw) <= high:
        raise ConfigError(TRANSACTION_TIMEOUT, f"must be a whole number of milliseconds in [{low}, {high}], "
                                               f"got {raw!r}")
    return int(raw)


def connect_timeout_s(env: dict[str, str] | None = None) -> float:
    """EOSBATCH_CONNECT_TIMEOUT_S, validated (also for tools that need no other setting, like migrations)."""
    # libpq counts whole seconds and treats 1 as 2; an hour is already far past any useful wait.
    return _seconds(env, CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT_S)


def transaction_call_timeout_s(env: dict[str, str] | None = None) -> float:
    """EOSBATCH_TRANSACTION_CALL_TIMEOUT_S, validated: seconds in [1, 3600] (default 60)."""
    return _seconds(env, TRANSACTION_CALL_TIMEOUT, DEFAULT_TRANSACTION_CALL_TIMEOUT_S)


def _seconds(env: dict[str, str] | None, name: str, default: float) -> float:
    """The setting `name` (a number of seconds in [1, 3600]) from `env` (None: the environment), else `default`."""
    env = dict(os.environ) if env is None else env
    raw = env.get(name, "").strip() or str(default)
    value = _number(raw)
    if not 1 <= value <= 3600:
        raise ConfigError(name, f"must be a number of seconds in [1, 3600], got {raw!r}")
    return value


def to_libpq_url(url: str) -> str:
    """The SQLAlchemy URL as libpq's. SQLAlchemy 2's multi-host form (`postgresql+psycopg2://user@/db?host=a:5432&
    host=b:5433&target_session_attrs=read-write`, as `stack up --postgres-replica` exports it) becomes libpq's
    (`postgresql://user@a:5432,b:5433/db?target_session_attrs=read-write`): libpq takes `host` in a URL's query as
    a bare host name."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(DATABASE_URL, "expected a URL such as postgresql+psycopg2://user@host:port/db")
    if not scheme.startswith("postgresql"):
        return url
    before, mark, query = rest.partition("?")
    pairs = [pair.partition("=") for pair in query.split("&")] if mark else []
    hosts = [unquote(value) for name, _, value in pairs if name == "host"]
    if not hosts:
        return "postgresql://" + rest
    authority, slash, path = before.partition("/")
    user, at, netloc = authority.rpartition("@")
    netloc = ",".join(([netloc] if netloc else []) + hosts)
    others = "&".join(f"{name}{sep_}{value}" for name, sep_, value in pairs if name != "host")
    return f"postgresql://{user}{at}{netloc}{slash}{path}{'?' + others if others else ''}"


def database_hosts(url: str) -> list[tuple[str, int | None]]:
    """Every (host, port) the URL names, in order: one, or several in SQLAlchemy 2's multi-host form
    (`?host=a:5432&host=b:5433`)."""
    parts = urlsplit(to_libpq_url(url))
    netloc = parts.netloc.rpartition("@")[2]
    found = []
    for entry in netloc.split(","):
        host, colon, port = entry.rpartition(":") if not entry.endswith("]") else ("", "", "")
        if not colon or not port.isdigit():
            host, port = entry, ""
        found.append((unquote(host.strip("[]")), int(port) if port else None))
    return found


SECRET_PARAMETERS = frozenset({"password", "sslpassword"})  # libpq takes these in a URL's query too


def redact(url: str) -> str:
    """The URL with its passwords replaced (the user's and any in its query), for logs and errors."""
    parts = urlsplit(url)
    if parts.password is not None:
        url = url.replace(f":{parts.password}@", ":***@", 1)
    if parts.query:
        pairs = [pair.partition("=") for pair in parts.query.split("&")]
        query = "&".join(f"{name}={'***' if unquote(name).lower() in SECRET_PARAMETERS else value}" if sep else name
                         for name, sep, value in pairs)
        url = url.replace(f"?{parts.query}", f"?{query}", 1)
    return url


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
        if not host or not _digits(port):
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
    if "transaction.timeout.ms" in extra:  # else silently overridden by the publisher
        raise ConfigError(KAFKA_CONFIG, f"sets transaction.timeout.ms: set {TRANSACTION_TIMEOUT} instead")
    try:  # the Spark reader must read with the same security as every other client: fail now, not mid-batch
        reader_options(extra)
    except Unsupported as exc:
        raise ConfigError(KAFKA_CONFIG, str(exc)) from None
    master = env.get(SPARK_MASTER, "").strip() or "local[2]"
    log_dir = env.get(LOG_DIR, "").strip() or default_log_dir(env)
    return Settings(url, bootstrap, extra, master, _transaction_timeout(env), connect_timeout_s(env), log_dir,
                    _lease_seconds(env.get(LEASE_SECONDS, "").strip()), _spark_remote(env.get(SPARK_REMOTE, "")),
                    _spark_jars(env.get(SPARK_JARS, "")), _staging_writers(env.get(STAGING_WRITERS, "").strip()),
                    *_compaction(env), _flag(OVERLAP, env.get(OVERLAP, "")),
                    _flag(EARLY_PUBLISH, env.get(EARLY_PUBLISH) or "1"),
                    marker_retention_seconds(env),  # read by publish: a bad value fails now, not after a COMMIT
                    metrics_target(env.get(METRICS, "")), transaction_call_timeout_s(env),
                    kafka_reader(env.get(KAFKA_READER, "")))


def to_env(settings: Settings) -> dict[str, str]:
    """The settings as the environment variables `load` reads them from: how a child process (the spark-submit
    driver) gets exactly this process's settings, never through its command line."""
    return {DATABASE_URL: settings.database_url, KAFKA_BOOTSTRAP: settings.kafka_bootstrap,
            KAFKA_CONFIG: json.dumps(settings.kafka_config, sort_keys=True), SPARK_MASTER: settings.spark_master,
            TRANSACTION_TIMEOUT: str(settings.transaction_timeout_ms),
            CONNECT_TIMEOUT: repr(settings.connect_timeout_s), LOG_DIR: settings.log_dir,
            LEASE_SECONDS: repr(settings.lease_seconds), SPARK_REMOTE: settings.spark_remote,
            SPARK_JARS: ",".join(settings.spark_jars),
            STAGING_WRITERS: str(settings.staging_writers) if settings.staging_writers else "",
            COMPACT_EVERY: str(settings.compact_every), COMPACT_AFTER_DAYS: repr(settings.compact_after_days),
            OVERLAP: "1" if settings.overlap else "0", EARLY_PUBLISH: "1" if settings.early_publish else "0",
            MARKER_RETENTION: str(round(settings.marker_retention_s / 60)), METRICS: settings.metrics,
            TRANSACTION_CALL_TIMEOUT: repr(settings.transaction_call_timeout_s), KAFKA_READER: settings.kafka_reader}


def metrics_target(raw: str) -> str:
    """EOSBATCH_METRICS: global (the default), otlp, none, or file:PATH (an absolute path in an existing folder)."""
    value = raw.strip() or "global"
    if value.lower() in METRICS_TARGETS:
        return value.lower()
    if value.startswith("file:"):
        path = value[len("file:"):]
        if not os.path.isabs(path) or not os.path.isdir(os.path.dirname(path)):
            raise ConfigError(METRICS, f"file: needs an absolute path in an existing folder, got {path!r}")
        return value
    raise ConfigError(METRICS, f"expected global, otlp, none or file:/absolute/path, got {raw!r}")


def kafka_reader(raw: str) -> str:
    """EOSBATCH_KAFKA_READER: spark, python or auto (the default)."""
    value = raw.strip().lower() or "auto"
    if value not in KAFKA_READERS:
        raise ConfigError(KAFKA_READER, f"expected spark, python or auto, got {raw!r}")
    return value


def _flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(name, f"expected 1/true/yes/on or 0/false/no/off, got {raw!r}")


def _compaction(env: dict[str, str]) -> tuple[int, float]:
    every = env.get(COMPACT_EVERY, "").strip() or str(DEFAULT_COMPACT_EVERY)
    if not _digits(every):
        raise ConfigError(COMPACT_EVERY, f"expected a whole number of commits >= 0 (0: never compact), got {every!r}")
    days = env.get(COMPACT_AFTER_DAYS, "").strip() or str(DEFAULT_COMPACT_AFTER_DAYS)
    after = _number(days)
    if not 0 <= after < 100_000:
        raise ConfigError(COMPACT_AFTER_DAYS, f"expected a number of days from 0 to 100000, got {days!r}")
    return int(every), after


def _staging_writers(raw: str) -> int:
    if not raw:
        return 0
    if not _digits(raw) or not 1 <= int(raw) <= 10_000:
        raise ConfigError(STAGING_WRITERS, f"expected a whole number from 1 to 10000 (PostgreSQL connections at "
                                           f"once while a batch stages), got {raw!r}")
    return int(raw)


def _spark_remote(raw: str) -> str:
    """`sc://host:port[/;param=value...]`, or "" (spark-submit)."""
    raw = raw.strip()
    if not raw:
        return ""
    parts = urlsplit(raw)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "sc" or not parts.hostname or port is None:
        raise ConfigError(SPARK_REMOTE, f"expected a Spark Connect URL sc://host:port, got {raw!r}")
    return raw


def _spark_jars(raw: str) -> tuple[str, ...]:
    jars = tuple(j.strip() for j in raw.split(",") if j.strip())
    if missing := [j for j in jars if "://" not in j and not os.path.isfile(j)]:
        raise ConfigError(SPARK_JARS, f"no such file: {missing[0]}")
    for jar in jars:
        name = jar.rstrip("/").rsplit("/", 1)[-1]
        built_for = SPARK_JAR.fullmatch(name)
        if built_for and built_for["spark"] != (installed := installed_pyspark()):
            raise ConfigError(SPARK_JARS, f"{name} is built for Spark {built_for['spark']}, but the installed PySpark "
                                          f"is {installed}: give the connector jars of Spark {installed} (`eosbatch "
                                          f"stack up` fetches them), or install pyspark=={built_for['spark']}")
    return jars


# Spark's own jars name the Spark they are built for: spark-sql-kafka-0-10_2.13-4.2.0.jar (Scala 2.13, Spark 4.2.0).
SPARK_JAR = re.compile(r"spark-[a-z0-9-]+_\d+\.\d+-(?P<spark>\d+\.\d+\.\d+[^/]*)\.jar")


def installed_pyspark() -> str:
    """The version of the PySpark this process imports: the Spark the Kafka connector jars must be built for
    (read from the package's metadata, which costs no import; a Spark distribution's PySpark on PYTHONPATH has
    none, and then the module says it)."""
    from importlib import metadata

    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        import pyspark

        return str(pyspark.__version__)


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
