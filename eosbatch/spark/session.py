"""The spark-submit engine's drivers: one SparkSession of their own (spark-submit gives it its master)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from eosbatch.spark import tuning

T = TypeVar("T")


def on_own_session(app_name: str, work: Callable[..., T], *args: Any) -> T:
    """`work(session, *args)` on a new classic SparkSession, stopped afterwards."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(app_name).config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    tuning.tune(spark)
    try:
        return work(spark, *args)
    finally:
        spark.stop()
