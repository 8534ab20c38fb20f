"""The Spark settings eosbatch's sessions run with (eosbatch.spark.tuning): only a setting still at Spark's
default is changed, so a value given on the server or to spark-submit stays."""

from __future__ import annotations

import pytest

from eosbatch.spark import tuning

pytestmark = pytest.mark.unit


def test_a_setting_at_spark_default_or_unset_is_changed() -> None:
    for default in ("67108864b", "64m", None):
        assert tuning.to_change({tuning.ARROW_MAX_BYTES: default}) == {tuning.ARROW_MAX_BYTES: "2147483647"}
    assert tuning.to_change({}) == tuning.SESSION_CONF


def test_a_setting_given_on_the_server_stays() -> None:
    assert tuning.to_change({tuning.ARROW_MAX_BYTES: "16m"}) == {}
    assert tuning.to_change({tuning.ARROW_MAX_BYTES: "2147483647"}) == {}  # already so
