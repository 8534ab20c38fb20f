"""The oldest-versions venv and its Spark Connect server, once for the tests of this folder (tests/deploy/oldest.py):
the server stops when they are done, not at the end of the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eosbatch import stack
from eosbatch.stack.spark_connect import SparkConnectServer
from tests.deploy import oldest
from tests.packaging import build_wheel


@pytest.fixture(scope="package")
def oldest_venv(tmp_path_factory) -> Path:
    """The wheel built from the sources, installed with `[airflow]` into .venv-oldest under the constraints.
    Anything failing here fails the tests that use it (never a skip): the venv is CI's job."""
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    oldest.ensure_venv(wheel)
    return oldest.VENV


@pytest.fixture(scope="package")
def oldest_connect(settings, oldest_venv) -> Iterator[SparkConnectServer]:
    """A Spark Connect server of the venv's PySpark, beside the stack's own (same home, its own folder)."""
    server, version = oldest.start_connect(stack.home(), oldest.free_port())
    try:
        assert version == oldest.pinned()["pyspark"], (version, oldest.pinned()["pyspark"])
        print(f"spark-connect of PySpark {version} on {server.url}")
        yield server
    finally:
        server.stop()


USER_PIPELINE = '''"""A user's pipeline module, in a folder of its own outside any checkout."""

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink

ORDER_SCHEMA = "order_id STRING NOT NULL, customer_id STRING NOT NULL, amount DOUBLE NOT NULL, status STRING"


def to_totals(orders):
    from pyspark.sql import functions as F

    return orders.groupBy("customer_id").agg(
        F.sum(F.col("amount").cast("decimal(18,2)")).cast("decimal(18,2)").alias("total_amount"),
        F.count("*").alias("order_count"))


totals = Pipeline(
    name="crash_totals_{suffix}",
    source=KafkaSource(topics=["crash_in_{suffix}"], max_records_per_batch=100_000, value_schema=ORDER_SCHEMA),
    transform=to_totals,
    sink=PostgresSink(table="crash_totals_{suffix}", key=["customer_id"], mode="accumulate",
                      accumulate=["total_amount", "order_count"]),
    output=KafkaOutput(topic="crash_totals_out_{suffix}", key="customer_id"),
)
'''


def user_pipeline(folder: Path, suffix: str, module: str = "shop_pipelines") -> str:
    """Write a user's pipeline module (named as tests.scenario.Scenario counts them) into `folder`; its name."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(USER_PIPELINE.replace("{suffix}", suffix))
    return module
