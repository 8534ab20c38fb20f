"""Replace-sink pipelines with deletes (docs/deletes.md) over one input topic `deletes_in_<suffix>` whose records
the test writes to chosen partitions, with keys, headers and timestamps of its own; a null value is a tombstone.

- `deletes_pos_<suffix>`: no order_by: a tombstone is ordered by its source position;
- `deletes_ts_<suffix>`: order_by `ts`, the record's timestamp; a tombstone's from its timestamp;
- `deletes_hdr_<suffix>`: order_by `version`, a value field; a tombstone's from its header `version`; its
  records keyed by a JSON object {"id": ...} (a struct key), in `deletes_jin_<suffix>`;
- `deletes_none_<suffix>`: as deletes_hdr, without deletes: every tombstone is a dead letter."""

import os

from eosbatch import Deletes, KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.formats import Json, String

SUFFIX = os.environ.get("EOSBATCH_TEST_SUFFIX", "default")
SCHEMA = "id STRING NOT NULL, val STRING, version BIGINT"


def _by_position(df):  # noqa: ANN001, ANN202 - a PySpark transform
    return df.select("id", "val", "partition", "offset")


def _by_time(df):  # noqa: ANN001, ANN202
    return df.select("id", "val", df["timestamp"].alias("ts"))


def _by_version(df):  # noqa: ANN001, ANN202
    return df.select("id", "val", "version")


def _pipeline(suffix: str, prefix: str, transform, struct_key: bool = False,  # noqa: ANN001 - a transform
              **sink) -> Pipeline:
    """Keyed by the record key's text (String()), or with `struct_key` by the field `id` of a JSON key, read
    from `deletes_jin_<suffix>`, the same records keyed so."""
    topic = f"deletes_jin_{suffix}" if struct_key else f"deletes_in_{suffix}"
    return Pipeline(
        name=f"{prefix}_{suffix}",
        source=KafkaSource(topics=[topic], value=Json(SCHEMA), key=Json("id STRING") if struct_key else String()),
        transform=transform,
        sink=PostgresSink(table=f"{prefix}_{suffix}", key=["id"], **sink),
        output=KafkaOutput(topic=f"{prefix}_out_{suffix}", key="id"),
    )


def make(suffix: str) -> dict[str, Pipeline]:
    """The four pipelines of `suffix`, by prefix."""
    return {"deletes_pos": _pipeline(suffix, "deletes_pos", _by_position, deletes=Deletes()),
            "deletes_ts": _pipeline(suffix, "deletes_ts", _by_time, order_by=["ts"],
                                    deletes=Deletes(order_from_timestamp=True)),
            "deletes_hdr": _pipeline(suffix, "deletes_hdr", _by_version, struct_key=True, order_by=["version"],
                                     deletes=Deletes(order_header="version")),
            "deletes_none": _pipeline(suffix, "deletes_none", _by_version, order_by=["version"])}


PIPELINES = list(make(SUFFIX).values())
