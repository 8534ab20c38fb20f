"""The Spark Connect engine: batches run on a long-lived Spark Connect server (`EOSBATCH_SPARK_REMOTE`),
so a batch costs its Spark jobs, not a JVM, a SparkSession and a zip of the code.

The client needs no JDK. The server's executors do not see this process's environment or files: the
pipelines' code reaches them as a session artifact (a zip, `addArtifacts(pyfile=True)`), and the fault
points of the tests travel inside the staging closure (faults.carried). Client and server must run the same
Python minor version (Spark pickles the staging functions)."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

from eosbatch import config, registry
from eosbatch.engine.errors import map_spark_error
from eosbatch.engine.exceptions import EngineUnavailable

_lock = threading.Lock()
_sessions: dict[str, Any] = {}  # one session per server URL, kept for the further batches of this process


def session(settings: config.Settings) -> Any:
    """This process's session on the server, with the pipelines' code attached; made on first use."""
    with _lock:
        found = _sessions.get(settings.spark_remote)
        if found is not None:
            return found
        from pyspark.sql import SparkSession

        from eosbatch.engine.submit import code_archive

        try:
            spark = SparkSession.builder.remote(settings.spark_remote).create()
            spark.client.set_retry_policies([_bounded_retries(settings.connect_timeout_s)])
            with tempfile.TemporaryDirectory(prefix="eosbatch-artifacts-") as folder:
                spark.addArtifacts(str(code_archive(registry.modules(), Path(folder))), pyfile=True)
        except Exception as exc:  # noqa: BLE001 - mapped at the boundary
            raise EngineUnavailable(f"Spark Connect server {settings.spark_remote}: cannot open a session "
                                    f"({map_spark_error(exc, 'connect')})") from None
        _sessions[settings.spark_remote] = spark
        return spark


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
    """Drop the cached session (after the server failed): the next batch opens a new one."""
    with _lock:
        spark = _sessions.pop(settings.spark_remote, None)
    if spark is not None:
        try:
            spark.stop()
        except Exception:  # noqa: BLE001, S110 - a dead server cannot close the session; nothing to do
            pass


def run(settings: config.Settings, where: str, work: Any, *args: Any) -> Any:
    """`work(session, *args)` on the server; Spark's errors leave as eosbatch errors."""
    spark = session(settings)
    try:
        return work(spark, *args)
    except Exception as exc:  # noqa: BLE001 - mapped at the boundary
        error = map_spark_error(exc, where)
        if isinstance(error, EngineUnavailable):
            forget(settings)
        if error is exc:
            raise
        raise error from None
