"""Replace-sink pipelines for the latest-row tests: records written to chosen partitions by the test itself.
`versions_<suffix>` has no order_by (the source position decides); `versions_ts_<suffix>` orders by `version`,
a nullable column; `versions_bare_<suffix>` keeps neither, so nothing orders a key repeated in one batch;
`versions_keys_<suffix>` returns the key alone (its sink has nothing to update)."""

import os

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink

SUFFIX = os.environ.get("EOSBATCH_TEST_SUFFIX", "default")
SCHEMA = "id STRING NOT NULL, val STRING, version BIGINT"


def _by_position(df):  # noqa: ANN001, ANN202 - a PySpark transform
    return df.select("id", "val", "partition", "offset")


def _bare(df):  # noqa: ANN001, ANN202
    return df.select("id", "val")


def _keys_only(df):  # noqa: ANN001, ANN202
    return df.select("id")


def _by_version(df):  # noqa: ANN001, ANN202
    return df.select("id", "val", "version")


versions = Pipeline(
    name=f"versions_{SUFFIX}",
    source=KafkaSource(topics=[f"versions_in_{SUFFIX}"], value_schema=SCHEMA),
    transform=_by_position,
    sink=PostgresSink(table=f"versions_{SUFFIX}", key=["id"]),
    output=KafkaOutput(topic=f"versions_out_{SUFFIX}", key="id"),
)
versions_ts = Pipeline(
    name=f"versions_ts_{SUFFIX}",
    source=KafkaSource(topics=[f"versions_in_{SUFFIX}"], value_schema=SCHEMA),
    transform=_by_version,
    sink=PostgresSink(table=f"versions_ts_{SUFFIX}", key=["id"], order_by=["version"]),
    output=KafkaOutput(topic=f"versions_ts_out_{SUFFIX}", key="id"),
)
versions_bare = Pipeline(
    name=f"versions_bare_{SUFFIX}",
    source=KafkaSource(topics=[f"versions_in_{SUFFIX}"], value_schema=SCHEMA),
    transform=_bare,
    sink=PostgresSink(table=f"versions_bare_{SUFFIX}", key=["id"]),
    output=KafkaOutput(topic=f"versions_bare_out_{SUFFIX}", key="id"),
)
versions_keys = Pipeline(
    name=f"versions_keys_{SUFFIX}",
    source=KafkaSource(topics=[f"versions_in_{SUFFIX}"], value_schema=SCHEMA),
    transform=_keys_only,
    sink=PostgresSink(table=f"versions_keys_{SUFFIX}", key=["id"]),
    output=KafkaOutput(topic=f"versions_keys_out_{SUFFIX}", key="id"),
)
