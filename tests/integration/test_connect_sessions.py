"""The shared Spark Connect session of the runners: a server closes it after an idle hour and refuses its id
from then on. A process that meets it closed must move on to a session that works, and PySpark must not keep
the closed one as the process's active session (mapInArrow reads its settings through that)."""

from __future__ import annotations

import gc
import subprocess
import sys
import uuid
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


def _sum(spark) -> int:
    """Work with no Python of ours (a session of the test's own has no eosbatch artifact)."""
    return spark.range(4).groupBy().sum("id").collect()[0][0]


def _release_on_the_server(remote: str, session_id: str) -> None:
    script = (
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.remote(sys.argv[1]).create()\n"
        "spark.client.release_session()\n"
    )
    subprocess.run([sys.executable, "-c", script, connect.session_url(remote, session_id)], check=True,
                   timeout=120)


def test_a_closed_shared_session_gives_way_to_one_that_works(settings) -> None:
    from pyspark.sql import SparkSession

    before = connect.run(settings, "probe", _sum_through_arrow)
    assert before == 12
    closed = connect.session(settings).session_id
    # The server closes it, as its idle timeout does, while this process still holds its channel, as a runner
    # does. Another process asks for that: a PySpark session closed in this one would upset its other sessions.
    _release_on_the_server(settings.spark_remote, closed)
    with pytest.raises(Exception, match="SESSION_CLOSED|INVALID_HANDLE"):
        connect.run(settings, "probe on the closed session", _sum_through_arrow)

    # The failure dropped it (a transient error, retried by the caller); the retry works on another session.
    assert connect.run(settings, "probe again", _sum_through_arrow) == 12
    assert connect.session(settings).session_id != closed
    assert SparkSession.getActiveSession().session_id != closed

    # Dropping a session (forget, after an engine failure) must not upset the process's other sessions (PySpark
    # 4.0's close shut down a thread pool they all share: SPARK-55362), nor close it on the server, where other
    # runners share it.
    live = connect.session(settings)
    other = SparkSession.builder.remote(connect.session_url(settings.spark_remote, str(uuid.uuid4()))).create()
    try:
        assert _sum(other) == 6
        connect.forget(settings)
        gc.collect()
        assert live.is_stopped
        assert SparkSession.getActiveSession() is not live
        assert _sum(other) == 6
    finally:
        other.stop()

    # A new process (no cached session) meets the closed id first and moves on at once, to the session the
    # dropped one was: still open on the server.
    assert connect.run(settings, "probe from a new process", _sum_through_arrow) == 12
    assert connect.session(settings).session_id == live.session_id != closed
