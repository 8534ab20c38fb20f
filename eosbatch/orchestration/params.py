"""The backfill and replay DAGs' parameters: JSON Schemas that Airflow checks when a run is triggered
(`airflow dags trigger --conf`, the REST API, the UI form), so a malformed conf never creates a run.

Airflow validates each Param on its own; rules across params (ranges *or* a window, from before to, a
reprocess of an accumulating sink) are the engine's, checked by the backfill DAG's first task with a dry
run that changes nothing and fails without retries.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# TOPIC:PARTITION:START-END, END exclusive (the engine's eosbatch.protocol.backfill.parse_range).
RANGE_PATTERN = r"^[A-Za-z0-9._-]{1,249}:[0-9]{1,9}:[0-9]{1,19}-[0-9]{1,19}$"
# An ISO 8601 time as Python's datetime.fromisoformat reads it; UTC when it names no zone.
TIME_PATTERN = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?"
                r"(Z|[+-][0-9]{2}:?[0-9]{2})?$")
MODES = ("fill", "reprocess")

# name -> (default, JSON Schema, description); the DAG factory wraps them in airflow.sdk.Param.
BACKFILL: dict[str, tuple[Any, dict[str, Any], str]] = {
    "ranges": ([], {"type": "array", "items": {"type": "string", "pattern": RANGE_PATTERN},
                    "uniqueItems": True},
               "Offset ranges TOPIC:PARTITION:START-END (END exclusive), e.g. orders:0:0-1000. "
               "Give these or a time window, not both."),
    "from": (None, {"type": ["null", "string"], "pattern": TIME_PATTERN},
             "Start of a time window (ISO 8601, UTC unless zoned), with `to`."),
    "to": (None, {"type": ["null", "string"], "pattern": TIME_PATTERN},
           "End of the time window (exclusive), with `from`."),
    "mode": ("fill", {"type": "string", "enum": list(MODES)},
             "fill: process the holes (uncommitted parts); reprocess: re-run committed parts into a "
             "replace sink."),
    "publish": (None, {"type": ["null", "boolean"]},
                "Publish the output topic; null: yes for fill, no for reprocess."),
}
# No default: a replay run without a batch id is refused at trigger time.
REPLAY_BATCH_ID: dict[str, Any] = {"type": "integer", "minimum": 1}


class BackfillRequest(NamedTuple):
    ranges: list[str]
    time_from: str | None
    time_to: str | None
    mode: str
    publish: bool | None


def backfill_request(conf: dict[str, Any]) -> BackfillRequest:
    """The validated params as the engine's arguments (Airflow has resolved defaults already)."""
    return BackfillRequest(list(conf.get("ranges") or []), conf.get("from") or None, conf.get("to") or None,
                           conf.get("mode") or "fill", conf.get("publish"))
