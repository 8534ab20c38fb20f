"""Running a batch on Spark: the one place that knows how. Two engines behind two functions:

- Spark Connect (`EOSBATCH_SPARK_REMOTE=sc://host:port`): a long-lived server; the batch's driver code runs
  in this process as a Connect client, with no JVM of its own;
- spark-submit (otherwise, on `EOSBATCH_SPARK_MASTER`): an application per batch, for clusters without Connect.

Both run the same code (eosbatch.spark.app and .recompute) and report failures as eosbatch errors: a lost
engine is transient, a transform that cannot run on the data is terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from eosbatch import config, faults
from eosbatch.context import Context

if TYPE_CHECKING:
    from eosbatch.ledger.sinks.names import Column

Engine = Literal["connect", "submit"]


def kind(settings: config.Settings) -> Engine:
    return "connect" if settings.spark_remote else "submit"


def process(ctx: Context, batch_id: int) -> dict[str, int] | None:
    """Stage a planned batch and mark it staged; the staged counts (None when the engine does not say)."""
    settings, pipeline_name = ctx.settings, ctx.pipeline.name
    if kind(settings) == "connect":
        from eosbatch.engine import connect
        from eosbatch.spark.app import process_on

        counts: dict[str, int] = connect.run(settings, f"process batch {batch_id}", process_on, ctx,
                                             batch_id, faults.carried())
        return counts
    from eosbatch.engine import submit

    # one log per pipeline, each batch under its header line: a log file per batch would pile up
    value = submit.run("process_batch.py", [pipeline_name, str(batch_id)], settings, pipeline_name)
    return value if isinstance(value, dict) else None


def recompute(ctx: Context) -> dict[str, Any]:
    """The verifier's recompute of a pipeline's committed input (eosbatch.spark.recompute)."""
    settings, pipeline_name = ctx.settings, ctx.pipeline.name
    if kind(settings) == "connect":
        from eosbatch.engine import connect
        from eosbatch.spark.recompute import recompute_on

        result: dict[str, Any] = connect.run(settings, f"verify {pipeline_name}", recompute_on, ctx)
        return result
    from eosbatch.engine import submit

    value = submit.run("recompute.py", [pipeline_name], settings, f"{pipeline_name}-verify")
    assert isinstance(value, dict), "recompute.py returns its result"
    return value


def output_columns(ctx: Context) -> list[Column] | None:
    """The transform's output columns (eosbatch.spark.preview), analysed on the Connect server without running
    a Spark job; None on the spark-submit engine, which has no session to ask short of starting an application."""
    if kind(ctx.settings) != "connect":
        return None
    from eosbatch.engine import connect
    from eosbatch.spark.preview import output_columns_on

    columns: list[Column] = connect.run(ctx.settings, f"check {ctx.pipeline.name}", output_columns_on, ctx.pipeline)
    return columns
