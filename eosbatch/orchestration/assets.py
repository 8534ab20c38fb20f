"""A pipeline's Airflow assets: its sink table and its output topic, named in the providers' URI conventions
(`postgres://host:port/database/schema/table`, `kafka://host:port/topic`).

Airflow records an event for every declared outlet of a task that succeeds, so a retry that found the work
done, or a caught-up run, would announce a change that did not happen. The tasks declare an AssetAlias per
asset instead, and add an event only for a batch the ledger shows committed (sink rows > 0) or published
(records > 0) during that task, with the batch id and its counts in the event's extra. The host and port are
those the task used (its Airflow connections), so they are known only at run time: another reason for aliases.

Schedule a downstream DAG on `sink_asset(pipeline)` or `output_asset(pipeline)` (same URIs, from this
process's settings). The URI functions and `events` are pure; `airflow.sdk` is imported only when an asset is
built.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from eosbatch.config import Settings
    from eosbatch.ledger.store import Batch
    from eosbatch.pipeline import Pipeline
    from eosbatch.protocol.states import Lane

Which = Literal["sink", "output"]
POSTGRES_PORT = 5432
KAFKA_PORT = 9092


def alias_name(pipeline: str, which: Which) -> str:
    return f"eosbatch__{pipeline}__{which}"


def sink_uri(settings: Settings, pipeline: Pipeline) -> str:
    """`postgres://host:port/database/schema/table` of the sink (the postgres provider's convention)."""
    from sqlalchemy.engine import make_url

    from eosbatch.config import database_hosts

    url = make_url(settings.database_url)
    # several servers (a primary and its replicas, `?host=a:p&host=b:p`): the dataset is named by the first
    first_host, first_port = database_hosts(settings.database_url)[0]
    host = (url.host or first_host or "localhost").lower()
    port = url.port or first_port or POSTGRES_PORT
    return f"postgres://{host}:{port}/{url.database}/{pipeline.sink.schema}/{pipeline.sink.table}"


def output_uri(settings: Settings, pipeline: Pipeline) -> str | None:
    """`kafka://host:port/topic` of the output topic (the apache-kafka provider's convention), None without
    one."""
    return None if pipeline.output is None else topic_uri(settings, pipeline.output.topic)


def topic_uri(settings: Settings, topic: str) -> str:
    """`kafka://host:port/topic`; the canonical host is the first bootstrap server in sorted order, whatever
    order a setting lists them in."""
    servers = sorted(s.strip().lower() for s in settings.kafka_bootstrap.split(",") if s.strip())
    host, _, port = servers[0].rpartition(":") if ":" in servers[0] else (servers[0], "", "")
    return f"kafka://{host}:{port or KAFKA_PORT}/{topic}"


class AssetEvent(NamedTuple):
    which: Which
    uri: str
    extra: dict[str, Any]


def events(settings: Settings, pipeline: Pipeline, changed: Iterable[Batch], since_unpublished: Iterable[int],
           in_lane: Lane | None = None) -> list[AssetEvent]:
    """The events for the batches a task changed (store.changed_since): a batch committed in the task changed
    the sink if it stored rows; a batch published in the task (committed in it, or one of `since_unpublished`,
    rolled forward) changed the output topic if it produced records. `in_lane`: only that lane's batches, as
    the other lane runs at the same time and its own tasks announce its batches (a downstream DAG would
    otherwise run twice for one backfill batch)."""
    from eosbatch.protocol.states import lane

    before = set(since_unpublished)
    found: list[AssetEvent] = []
    output = output_uri(settings, pipeline)
    for batch in changed:
        if in_lane is not None and lane(batch.kind) != in_lane:
            continue
        counts = {"pipeline": pipeline.name, "batch": batch.id, "kind": batch.kind, "commit_seq": batch.commit_seq,
                  "ranges": [str(r) for r in batch.ranges]}
        if batch.id not in before and (batch.sink_rows or 0) > 0:
            found.append(AssetEvent("sink", sink_uri(settings, pipeline), {
                **counts, "records_read": batch.records_read, "sink_rows": batch.sink_rows,
                "dead_letters": batch.dead_letters}))
        if output is not None and batch.state == "published" and (batch.published_records or 0) > 0:
            found.append(AssetEvent("output", output, {**counts, "published": batch.published_records}))
    return found


# ---------------------------------------------------------------- Airflow objects (imported when used)

def aliases(pipeline: Pipeline, *which: Which) -> list[Any]:
    """The AssetAlias outlets a task declares (the output's only when the pipeline has an output)."""
    from airflow.sdk import AssetAlias

    return [AssetAlias(alias_name(pipeline.name, w)) for w in which if w == "sink" or pipeline.output is not None]


def sink_asset(pipeline: Pipeline, settings: Settings | None = None) -> Any:
    """The sink as an Asset, to schedule a downstream DAG on: `schedule=[sink_asset(registry.get("orders"))]`."""
    from airflow.sdk import Asset

    from eosbatch import config

    return Asset(sink_uri(settings or config.load(), pipeline))


def output_asset(pipeline: Pipeline, settings: Settings | None = None) -> Any:
    """The output topic as an Asset, to schedule a downstream DAG on: `schedule=[output_asset(pipeline)]`."""
    from airflow.sdk import Asset

    from eosbatch import config

    uri = output_uri(settings or config.load(), pipeline)
    if uri is None:
        raise ValueError(f"pipeline {pipeline.name} has no output topic")
    return Asset(uri)


def emit(outlet_events: Any, pipeline: Pipeline, found: Iterable[AssetEvent]) -> None:
    """Add each event to its alias (the task's outlet), so Airflow records it when the task succeeds."""
    from airflow.sdk import Asset, AssetAlias

    for event in found:
        outlet_events[AssetAlias(alias_name(pipeline.name, event.which))].add(Asset(event.uri), extra=event.extra)
