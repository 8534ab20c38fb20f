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


def _pipeline(prefix: str, transform, **sink) -> Pipeline:  # noqa: ANN001 - a PySpark transform
    """`<prefix>_<suffix>`: the shared input topic, its own sink table and output topic, keyed by id."""
    return Pipeline(
        name=f"{prefix}_{SUFFIX}",
        source=KafkaSource(topics=[f"versions_in_{SUFFIX}"], value_schema=SCHEMA),
        transform=transform,
        sink=PostgresSink(table=f"{prefix}_{SUFFIX}", key=["id"], **sink),
        output=KafkaOutput(topic=f"{prefix}_out_{SUFFIX}", key="id"),
    )


versions = _pipeline("versions", _by_position)
versions_ts = _pipeline("versions_ts", _by_version, order_by=["version"])
versions_bare = _pipeline("versions_bare", _bare)
versions_keys = _pipeline("versions_keys", _keys_only)
