"""The shared Spark Connect session of the runners: a server closes it after an idle hour and refuses its id
from then on. A process that meets it closed must move on to a session that works, and PySpark must not keep
the closed one as the process's active session (mapInArrow reads its settings through that)."""

from __future__ import annotations

import gc
import subprocess
import sys
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
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator

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

    # Dropping a session must leave the thread pool that all of the process's sessions share running: PySpark's
    # close (stop, or the collected object's __del__) shuts it down, and a live session's next job then fails or
    # hangs, depending on the moment.
    pool = ExecutePlanResponseReattachableIterator._release_thread_pool_instance
    assert pool is not None
    connect.forget(settings)
    gc.collect()
    assert ExecutePlanResponseReattachableIterator._release_thread_pool_instance is pool

    # A new process (no cached session) that meets the closed id first: it moves on at once.
    assert connect.run(settings, "probe from a new process", _sum_through_arrow) == 12
    assert connect.session(settings).session_id != closed
