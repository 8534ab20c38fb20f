"""Event-driven runs: a pipeline's micro-batch DAG scheduled on an Asset that Airflow's triggerer watches.

With `AirflowOptions(trigger="data")`, the DAG's schedule is `source_asset(pipeline)`: an Asset
(`x-eosbatch://<pipeline>/source`) whose AssetWatcher runs `SourceAhead` in the triggerer. Every
`data_poll_seconds` the trigger reads the source's last stable offsets and the ledger's next offsets
(eosbatch.orchestration.arrivals, in a thread), and yields one event when the pipeline is behind, then waits
until the position moves again or the ledger catches up (arrivals.decide). Each event is an asset event, so the
scheduler starts a run (events that arrive while a run is queued make no second one).

No consumer group, nothing committed: the run's plan reads the ledger, so it is exactly-once whatever started
it. Kafka or the ledger unreachable: the trigger logs it and polls again later; it never ends by itself.
This module imports only Airflow's trigger base: the triggerer loads it by its class path, and eosbatch's
clients are imported inside `run`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

if TYPE_CHECKING:
    from eosbatch.pipeline import Pipeline

# After a failed read, the next one waits this long (times the poll interval), at most RETRY_MOST_S.
RETRY_FACTOR = 5
RETRY_MOST_S = 30.0


def asset_uri(pipeline: str) -> str:
    return f"x-eosbatch://{pipeline}/source"


def asset_name(pipeline: str) -> str:
    return f"eosbatch__{pipeline}__source"


class SourceAhead(BaseEventTrigger):
    """Fires when `pipeline`'s source topics hold committed records past the ledger's next offsets."""

    def __init__(self, pipeline: str, topics: Sequence[str], poll_seconds: float = 1.0) -> None:
        super().__init__()
        self.pipeline, self.topics, self.poll_seconds = pipeline, list(topics), float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"pipeline": self.pipeline, "topics": self.topics, "poll_seconds": self.poll_seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from eosbatch.orchestration import arrivals

        settings = None
        last: arrivals.Position | None = None
        failing = False
        while True:
            try:
                if settings is None:
                    settings = await asyncio.to_thread(arrivals.settings_of, self.pipeline, self.log.info)
                now = await asyncio.to_thread(arrivals.read_position, settings, self.pipeline, self.topics)
            except Exception as exc:  # noqa: BLE001 - unreachable, a topic missing, bad settings: say so, retry
                if not failing:
                    self.log.warning("eosbatch %s: cannot read the source or the ledger (%s: %s); retrying",
                                     self.pipeline, type(exc).__name__, exc)
                failing = True
                settings = None  # the connections may be fixed meanwhile
                await asyncio.sleep(min(RETRY_MOST_S, self.poll_seconds * RETRY_FACTOR))
                continue
            if failing:
                self.log.info("eosbatch %s: source and ledger readable again", self.pipeline)
                failing = False
            fire, last = arrivals.decide(last, now)
            if fire:
                found = arrivals.payload(self.pipeline, now)
                self.log.info("eosbatch %s: %s records behind in %s partitions; starting a run", self.pipeline,
                              found["records_behind"], found["partitions_behind"])
                yield TriggerEvent(found)
            await asyncio.sleep(self.poll_seconds)


def source_asset(pipeline: Pipeline) -> Any:
    """The Asset a `trigger="data"` pipeline's micro-batch DAG is scheduled on, watched by `SourceAhead`."""
    from airflow.sdk import Asset, AssetWatcher

    trigger = SourceAhead(pipeline.name, pipeline.source.topics, pipeline.airflow.data_poll_seconds)
    return Asset(name=asset_name(pipeline.name), uri=asset_uri(pipeline.name),
                 watchers=[AssetWatcher(name=f"eosbatch__{pipeline.name}__source_ahead", trigger=trigger)])
