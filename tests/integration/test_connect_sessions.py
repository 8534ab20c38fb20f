"""The shared Spark Connect session of the runners: a server closes it after an idle hour and refuses its id
from then on. A process that meets it closed must move on to a session that works, and PySpark must not keep
the closed one as the process's active session (mapInArrow reads its settings through that)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eosbatch.engine import connect

pytestmark = [pytest.mark.integration]


def _doubled(batches: Iterator) -> Iterator:
    import pyarrow.compute as pc

    for batch in batches:
        yield batch.set_column(0, "id", pc.multiply(batch.column(0), 2))


def _sum_through_arrow(spark) -> int:
    """Work that goes through a Python UDF, as a batch's staging does."""
    return spark.range(4).mapInArrow(_doubled, "id long").groupBy().sum("id").collect()[0][0]


def test_a_closed_shared_session_gives_way_to_one_that_works(settings) -> None:
    from pyspark.sql import SparkSession

    before = connect.run(settings, "probe", _sum_through_arrow)
    assert before == 12
    closed = connect.session(settings).session_id
    # The server closes it, as its idle timeout does; this process still holds its channel, as a runner does.
    closer = SparkSession.builder.remote(connect.session_url(settings.spark_remote, closed)).create()
    closer.client.release_session()
    closer.release_session_on_close = False
    closer.stop()
    with pytest.raises(Exception, match="SESSION_CLOSED|INVALID_HANDLE"):
        connect.run(settings, "probe on the closed session", _sum_through_arrow)

    # The failure dropped it (a transient error, retried by the caller); the retry works on another session.
    assert connect.run(settings, "probe again", _sum_through_arrow) == 12
    assert connect.session(settings).session_id != closed
    assert SparkSession.getActiveSession().session_id != closed

    # A new process (no cached session) that meets the closed id first: it moves on at once.
    connect.forget(settings)
    assert connect.run(settings, "probe from a new process", _sum_through_arrow) == 12
    assert connect.session(settings).session_id != closed
