"""Spark settings eosbatch's sessions run with (a Spark Connect session, and the spark-submit engine's own), each
measured on the bench (bench/RESULTS.md). Only a setting still at Spark's default is changed: a value given on
the server (or to spark-submit) stays."""

from __future__ import annotations

from typing import Any

ARROW_MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
# Spark's default byte bound of an Arrow batch to Python (64 MB) makes it measure the batch after every row it
# adds (ArrowWriter.sizeInBytes walks every vector); at exactly Int.MaxValue it skips the measuring. The rows of
# a batch stay bounded by spark.sql.execution.arrow.maxRecordsPerBatch (10,000), so only rows over 6.7 KB on
# average could make a batch bigger than 64 MB. Measured on the process step of 1M 200-byte records: the
# server's CPU 4.8 -> 4.3 s, the step 3.66 -> 3.37 s (bench/RESULTS.md). A pipeline of larger rows sets the
# bound on its server; eosbatch leaves a value other than Spark's default alone.
V1_SOURCES = "spark.sql.sources.useV1SourceList"
# Spark reads `format("kafka")` with its V1 relation while "kafka" is on this list (it is by default): a scan that
# turns each record into an external Row and back (measured: a quarter of the server's allocations). Off the
# list, the same connector's V2 scan gives Spark's rows directly, with the same offsets, options and columns.
# Measured on one server, rounds taking turns (bench.process_ab), the process step of 1M records: 3.21 -> 2.97 s
# in one sitting, 2.88 -> 2.86 s in another; the allocations it saves are the steadier gain.
V1_DEFAULT = "avro,csv,json,kafka,orc,parquet,text"
SPARK_DEFAULTS = {ARROW_MAX_BYTES: ("64m", "67108864b", "67108864"), V1_SOURCES: (V1_DEFAULT,)}
SESSION_CONF = {ARROW_MAX_BYTES: str(2**31 - 1),
                V1_SOURCES: ",".join(s for s in V1_DEFAULT.split(",") if s != "kafka")}


def to_change(current: dict[str, str | None]) -> dict[str, str]:
    """Of SESSION_CONF, what to set given the session's `current` values (None: not set)."""
    return {key: value for key, value in SESSION_CONF.items()
            if current.get(key) is None or str(current[key]).lower() in SPARK_DEFAULTS.get(key, ())}


def tune(spark: Any) -> dict[str, str]:
    """Set SESSION_CONF's settings that are at Spark's default on `spark`; what was set."""
    changes = to_change({key: spark.conf.get(key, None) for key in SESSION_CONF})
    for key, value in changes.items():
        spark.conf.set(key, value)
    return changes
