"""The Spark Connect engine: batches run on a long-lived Spark Connect server (`EOSBATCH_SPARK_REMOTE`),
so a batch costs its Spark jobs, not a JVM, a SparkSession and a zip of the code.

The client needs no JDK. The server's executors do not see this process's environment or files: the
pipelines' code reaches them as a session artifact (a zip, `addArtifacts(pyfile=True)`), and the fault
points of the tests travel inside the staging closure (faults.carried). Client and server must run the same
Python minor version (Spark pickles the staging functions)."""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import uuid
import zipfile
from pathlib import Path
from typing import Any

from eosbatch import config, registry
from eosbatch.engine.errors import map_spark_error
from eosbatch.engine.exceptions import EngineUnavailable
from eosbatch.spark import tuning
from eosbatch.spark_kafka_options import REDACTION_REGEX

_lock = threading.Lock()
_sessions: dict[str, Any] = {}  # one session per server URL, kept for the further batches of this process


# A server closes an idle session (spark.connect.session.manager.defaultSessionTimeout, 60 min by default) and
# then refuses its id until it restarts: the shared id gets a generation, and the first one not closed is used.
SHARED_GENERATIONS = 16
_CLOSED_MARKS = ("SESSION_CLOSED", "INVALID_HANDLE", "SESSION_CHANGED")


def session(settings: config.Settings) -> Any:
    """This process's session on the server, with the pipelines' code attached; made on first use.

    Runners with the same code share one server-side session (its id derives from the code): its Python
    workers stay warm between runs (a new session starts new ones, ~1.5 s per batch here) and its
    artifacts are already there. A session the server closed (idle timeout) gives way to the code's next
    generation of shared id; past SHARED_GENERATIONS of them, to a session of this process's own."""
    with _lock:
        found = _sessions.get(settings.spark_remote)
        if found is not None:
            return found
        from eosbatch.engine.submit import code_archive

        with tempfile.TemporaryDirectory(prefix="eosbatch-artifacts-") as folder:
            archive = code_archive(registry.modules(), Path(folder))
            code = _digest(archive)
            ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"eosbatch:{os.getuid()}:{code}:{generation}"))
                   for generation in range(SHARED_GENERATIONS)] + [str(uuid.uuid4())]
            for session_id in ids:
                try:
                    spark = _open(settings, session_id, archive)
                    break
                except EngineUnavailable as exc:
                    if session_id == ids[-1] or not any(mark in str(exc) for mark in _CLOSED_MARKS):
                        raise
        _sessions[settings.spark_remote] = spark
        return spark


def _digest(archive: Path) -> str:
    """The code's identity: its files' names and contents (not the zip's timestamps)."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(archive) as zf:
        for name in sorted(zf.namelist()):
            digest.update(name.encode() + b"\0" + zf.read(name))
    return digest.hexdigest()


def session_url(remote: str, session_id: str) -> str:
    """The server's URL with this session's id added to its parameters (`sc://host:port/;use_ssl=true;...`
    keeps them: a token comes from SPARK_CONNECT_AUTHENTICATE_TOKEN or `;token=`)."""
    base = remote.rstrip("/")
    return f"{base};session_id={session_id}" if "/;" in base else f"{base}/;session_id={session_id}"


def _open(settings: config.Settings, session_id: str, archive: Path) -> Any:
    from pyspark.sql import SparkSession

    url = session_url(settings.spark_remote, session_id)
    spark = None
    try:
        spark = SparkSession.builder.remote(url).create()
        spark.client.set_retry_policies([_bounded_retries(settings.connect_timeout_s)])
        # The Kafka reader's JAAS line (a password) is an option: keep it out of plans, whatever the server says.
        spark.conf.set("spark.sql.redaction.options.regex", REDACTION_REGEX)
        tuning.tune(spark)
        try:
            spark.addArtifacts(str(archive), pyfile=True)
        except Exception as exc:  # noqa: BLE001 - a shared session has this very archive already
            if "already exists" not in str(exc).lower() and "ARTIFACT_ALREADY_EXISTS" not in str(exc):
                raise
    except Exception as exc:  # noqa: BLE001 - mapped at the boundary
        if spark is not None:
            _detach(spark)
        raise EngineUnavailable(f"Spark Connect server {settings.spark_remote}: cannot open a session "
                                f"({map_spark_error(exc, 'connect')})") from None
    return spark


def _detach(spark: Any) -> None:
    """Stop using a session without closing it on the server, where other runners may share it.

    PySpark's stop() releases the session on the server unless `release_session_on_close` is off; either way
    it closes this process's channel and unsets the session as PySpark's default and active one. That matters:
    PySpark keeps the first session a process creates as both, and its UDFs (mapInArrow) read their settings
    through that, so a closed session left there fails every later batch. (PySpark 4.0's close also shut down a
    thread pool every session of the process shares, SPARK-55362 and SPARK-55406; 4.2 does only when idle.)"""
    spark.release_session_on_close = False
    spark.stop()


def _bounded_retries(seconds: float) -> Any:
    """Retry a lost server for about `seconds` (EOSBATCH_CONNECT_TIMEOUT_S), then fail. The client's default
    waits at least 10 minutes, so a runner whose server died would hang long after its lease expired."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    retries, waited, backoff = 0, 0.0, 0.2
    while waited < seconds:
        waited += min(backoff, 5.0)
        backoff *= 2
        retries += 1
    return DefaultPolicy(max_retries=retries, initial_backoff=200, backoff_multiplier=2.0, max_backoff=5000)


def forget(settings: config.Settings) -> None:
    """Drop the cached session (after the server failed): the next batch opens one again. Never released
    here: that would close it on the server for every runner that shares it."""
    with _lock:
        dropped = _sessions.pop(settings.spark_remote, None)
    if dropped is not None:
        _detach(dropped)


def run(settings: config.Settings, where: str, work: Any, *args: Any) -> Any:
    """`work(session, *args)` on the server; Spark's errors leave as eosbatch errors."""
    spark = session(settings)
    try:
        return work(spark, *args)
    except Exception as exc:  # noqa: BLE001 - mapped at the boundary
        error = map_spark_error(exc, where, settings.database_url)
        if isinstance(error, EngineUnavailable):
            forget(settings)
        if error is exc:
            raise
        raise error from None
