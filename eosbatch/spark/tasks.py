"""How many Spark tasks stage a batch.

Each staging task pays a fixed cost whatever it holds: a Python worker's turn (`mapInArrow`) and a PostgreSQL
connection for its COPY, besides the Kafka consumer of each of its partitions. The Kafka source makes one task
per partition, so a batch of many small partitions was mostly that fixed cost (bench.scale, 2 busy cores: 200
partitions of 20 records 48.4 s unbounded, 12.2 s in 2 tasks). Unless EOSBATCH_STAGING_WRITERS says how many,
a batch with more than RANGES_PER_CORE ranges per core of the engine is coalesced (no shuffle) to one task per
core: the cores were the bound on concurrent tasks anyway. A batch of few partitions keeps one task each.
The cores are asked once per session: under dynamic allocation (executors come and go) set the bound instead.
"""

from __future__ import annotations

from typing import Any

RANGES_PER_CORE = 4

_cores: dict[int, int] = {}  # id(session) -> its engine's cores, asked once per session


def needs_cores(ranges: int, configured: int) -> bool:
    """Whether the bound depends on the engine's cores (else no Spark job is spent asking)."""
    return not configured and ranges > RANGES_PER_CORE


def staging_tasks(ranges: int, configured: int, cores: int) -> int | None:
    """The coalesce target for a batch of `ranges` Kafka ranges; None: one task per range, as read."""
    if configured:
        return configured
    if cores > 0 and ranges > RANGES_PER_CORE * cores:
        return cores
    return None


def engine_cores(spark: Any) -> int:
    """The engine's default parallelism (its executors' cores): a classic session says it; on Spark Connect it
    is the partition count of a `range` without one (spark.sql.leafNodeDefaultParallelism, else the cores),
    found by one tiny job, once per session."""
    found = _cores.get(id(spark))
    if found is None:
        try:
            found = int(spark.sparkContext.defaultParallelism)
        except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
            from pyspark.sql import functions as F

            [row] = (spark.range(0, 1 << 16).select(F.spark_partition_id().alias("task"))
                     .agg(F.max("task").alias("last")).collect())
            found = int(row["last"]) + 1
        _cores[id(spark)] = found
    return found
