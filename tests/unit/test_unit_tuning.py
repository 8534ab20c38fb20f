"""The Spark settings eosbatch's sessions run with (eosbatch.spark.tuning): only a setting still at Spark's
default is changed, so a value given on the server or to spark-submit stays."""

from __future__ import annotations

import pytest

from eosbatch.spark import tuning

pytestmark = pytest.mark.unit


def test_a_setting_at_spark_default_or_unset_is_changed() -> None:
    wanted = {tuning.ARROW_MAX_BYTES: "2147483647", tuning.V1_SOURCES: "avro,csv,json,orc,parquet,text"}
    for default in ("67108864b", "64m", None):
        current = {tuning.ARROW_MAX_BYTES: default, tuning.V1_SOURCES: "avro,csv,json,kafka,orc,parquet,text"}
        assert tuning.to_change(current) == wanted
    assert tuning.to_change({}) == tuning.SESSION_CONF


def test_a_setting_given_on_the_server_stays() -> None:
    assert tuning.to_change({tuning.ARROW_MAX_BYTES: "16m", tuning.V1_SOURCES: "kafka"}) == {}
    assert tuning.to_change(tuning.SESSION_CONF) == {}  # already so
