"""OpenLineage, when apache-airflow-providers-openlineage is installed and configured (a transport).

The tasks are TaskFlow functions, which no OpenLineage extractor knows, so they report what they read and
wrote to Airflow's hook lineage collector, which the provider turns into the task's input and output datasets
(through the Kafka and PostgreSQL providers' converters: namespace `kafka://host:port`, name the topic;
`postgres://host:port`, name `database.schema.table`). Dataset names carry no offsets, so the batches a task
worked on, with their offset ranges, go into a run facet (`eosbatch`), added by `batch_facets`, which the
provider calls when `[openlineage] custom_run_facets` names it (the local Airflow's airflow.cfg does).

Both the collector and the facet function live in the task's process, and one task process runs one task.
Without the provider, everything here does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eosbatch.config import Settings
    from eosbatch.ledger.store import Batch
    from eosbatch.pipeline import Pipeline

FACET = "eosbatch"
# The batches this task process reported: (pipeline, batch id, kind, ranges).
_reported: list[tuple[str, int, str, tuple[str, ...]]] = []


class _Context:
    """What the collector files the assets under (it asks for a hook; eosbatch has none)."""


_CONTEXT = _Context()


def _collector() -> Any | None:
    try:
        from airflow.sdk.lineage import get_hook_lineage_collector
    except ImportError:
        return None
    return get_hook_lineage_collector()


def start_task() -> None:
    """A task begins: forget the batches of an earlier task run in this process (dag.test runs them all in
    one)."""
    _reported.clear()


def report(settings: Settings, pipeline: Pipeline, batches: Iterable[Batch], sink: bool = False,
           output: bool = False) -> None:
    """The task read `batches`' source ranges (always) and wrote the sink and/or the output topic."""
    from eosbatch.orchestration import assets

    batches = list(batches)
    collector = _collector()
    if collector is None or not batches:
        return
    for topic in sorted({r.topic for batch in batches for r in batch.ranges}):
        collector.add_input_asset(context=_CONTEXT, uri=assets.topic_uri(settings, topic))
    if sink:
        collector.add_output_asset(context=_CONTEXT, uri=assets.sink_uri(settings, pipeline))
    if output and (uri := assets.output_uri(settings, pipeline)) is not None:
        collector.add_output_asset(context=_CONTEXT, uri=uri)
    _reported.extend((pipeline.name, b.id, b.kind, tuple(map(str, b.ranges))) for b in batches)


def batch_facets(ti: Any, ti_state: Any) -> dict[str, Any]:
    """`[openlineage] custom_run_facets`: the batches this task worked on, with their offset ranges."""
    if not _reported:
        return {}
    import attr
    from openlineage.client.facet_v2 import RunFacet

    @attr.define
    class EosbatchRunFacet(RunFacet):
        batches: list[dict[str, Any]]

    return {FACET: EosbatchRunFacet(batches=[{"pipeline": p, "batch": b, "kind": k, "ranges": list(r)}
                                             for p, b, k, r in _reported])}
