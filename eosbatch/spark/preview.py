"""The transform's output schema without reading a record: the pipeline's parse and transform applied to an
empty frame shaped as the Kafka reader's, and only analysed (no Spark job runs). The columns are the ones a
batch would stage, typed as the staging table would type them."""

from __future__ import annotations

import logging
from typing import Any

from eosbatch.ledger.sinks import Column
from eosbatch.pipeline import Pipeline
from eosbatch.spark import reader, shaping
from eosbatch.spark.kafka_columns import KAFKA_COLUMNS

# PySpark logs an analysis error with its whole plan and the server's stack trace before raising it; the check
# reports the error itself, on one line.
_QUERY_CONTEXT_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")


def output_columns_on(spark: Any, pipeline: Pipeline) -> list[Column]:
    """The columns `pipeline.transform` returns for the records its source parses to (the batch's own path:
    reader.parse, the malformed records' error column dropped, the transform, the sink's shaping)."""
    for name in _QUERY_CONTEXT_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    empty = spark.createDataFrame([], reader.struct(KAFKA_COLUMNS))
    parsed = reader.parse(empty, pipeline.source)
    good = parsed.where(parsed[reader.ERROR_COLUMN].isNull()).drop(*reader.INTERNAL_COLUMNS)
    return shaping.transformed(pipeline, good, []).columns  # no ranges: nothing is read
