"""Event-driven runs, sans I/O: when a pipeline is behind its source, when the trigger fires (once per move of
the position, never once per record), AirflowOptions(trigger="data") and the DAG it schedules on an Asset."""

from __future__ import annotations

import pytest

from eosbatch import AirflowOptions, KafkaSource, Pipeline, PostgresSink
from eosbatch.exceptions import ConfigError
from eosbatch.orchestration.arrivals import Position, behind, decide, payload, records_behind

pytestmark = pytest.mark.unit
A0, A1 = ("orders", 0), ("orders", 1)


def test_behind_when_a_last_stable_offset_passes_the_next_offset() -> None:
    assert not behind({A0: 5, A1: 7}, {A0: 5, A1: 7})
    assert behind({A0: 6, A1: 7}, {A0: 5, A1: 7})
    assert not behind({}, {})


def test_a_next_offset_past_the_stable_offset_is_not_behind() -> None:
    # an open transaction holds the LSO back; the ledger never plans past it, but a reset could move it on
    assert not behind({A0: 5}, {A0: 9})


def test_an_untracked_partition_is_behind_so_a_plan_starts_tracking_it() -> None:
    assert behind({A0: 5, A1: 0}, {A0: 5})
    assert behind({A0: 0}, {})  # a new pipeline, an empty topic: one run registers its partitions


def test_fires_once_when_behind_then_not_again_until_the_position_moves() -> None:
    first = Position({A0: 10}, {A0: 5})
    fire, last = decide(None, first)
    assert fire and last == first
    for _ in range(3):  # polls while the run has not committed yet: no more events
        fire, last = decide(last, Position({A0: 10}, {A0: 5}))
        assert not fire and last == first


def test_fires_again_when_the_lso_advances_while_behind() -> None:
    _, last = decide(None, Position({A0: 10}, {A0: 5}))
    fire, last = decide(last, Position({A0: 12}, {A0: 5}))
    assert fire and last == Position({A0: 12}, {A0: 5})


def test_fires_again_when_a_run_left_a_backlog() -> None:
    # the ledger moved but did not catch up (a backlog larger than a run's batches): another run is needed
    _, last = decide(None, Position({A0: 1000}, {A0: 0}))
    fire, _ = decide(last, Position({A0: 1000}, {A0: 400}))
    assert fire


def test_a_plan_that_only_starts_tracking_partitions_does_not_fire_again() -> None:
    _, last = decide(None, Position({A0: 10, A1: 4}, {}))  # a new pipeline: its first run tracks them
    fire, last = decide(last, Position({A0: 10, A1: 4}, {A0: 0, A1: 0}))
    assert not fire and last is not None
    fire, _ = decide(last, Position({A0: 10, A1: 4}, {A0: 0, A1: 0}))
    assert not fire
    fire, _ = decide(last, Position({A0: 10, A1: 4}, {A0: 10, A1: 0}))  # its first batch, not caught up yet
    assert fire


def test_caught_up_forgets_so_the_next_arrival_fires() -> None:
    _, last = decide(None, Position({A0: 10}, {A0: 5}))
    fire, last = decide(last, Position({A0: 10}, {A0: 10}))
    assert not fire and last is None
    fire, _ = decide(last, Position({A0: 11}, {A0: 10}))
    assert fire


def test_a_failed_run_is_not_retried_in_a_loop() -> None:
    _, last = decide(None, Position({A0: 10}, {A0: 5}))
    assert all(not decide(last, Position({A0: 10}, {A0: 5}))[0] for _ in range(100))


def test_the_payload_stays_small_whatever_the_partition_count() -> None:
    position = Position({("t", p): 10 for p in range(1000)}, {("t", p): 10 - (p % 2) for p in range(999)})
    found = payload("orders", position)
    assert found == {"pipeline": "orders", "partitions": 1000, "partitions_behind": 500, "records_behind": 509}
    assert records_behind(Position({A0: 3}, {A0: 7})) == 0


def _pipeline(**kwargs) -> Pipeline:
    schedule = kwargs.pop("schedule", None)
    return Pipeline(name="watched", source=KafkaSource(["orders", "refunds"]), transform=lambda df: df,
                    sink=PostgresSink("t", key=["k"]), schedule=schedule, airflow=AirflowOptions(**kwargs))


def test_options_default_to_the_schedule_and_a_one_second_poll() -> None:
    options = AirflowOptions()
    assert options.trigger == "schedule" and options.data_poll_seconds == 1.0


@pytest.mark.parametrize(("overrides", "field"), [
    ({"trigger": "kafka"}, "airflow.trigger"),
    ({"trigger": None}, "airflow.trigger"),
    ({"data_poll_seconds": 0}, "airflow.data_poll_seconds"),
    ({"data_poll_seconds": 0.01}, "airflow.data_poll_seconds"),
    ({"data_poll_seconds": 7200}, "airflow.data_poll_seconds"),
    ({"data_poll_seconds": "1"}, "airflow.data_poll_seconds"),
    ({"data_poll_seconds": True}, "airflow.data_poll_seconds"),
])
def test_bad_options_fail_naming_the_field(overrides, field) -> None:
    with pytest.raises(ConfigError) as raised:
        AirflowOptions(**overrides)
    assert raised.value.field == field


def test_a_data_triggered_pipeline_has_no_cron_schedule() -> None:
    with pytest.raises(ConfigError) as raised:
        _pipeline(trigger="data", schedule="*/5 * * * *")
    assert raised.value.field == "schedule"


def test_the_dag_is_scheduled_on_a_watched_source_asset() -> None:
    from airflow.sdk import Asset

    from eosbatch.orchestration import dags, triggers

    dag = dags.microbatch_dag(_pipeline(trigger="data", data_poll_seconds=0.5))
    assets = list(dag.timetable.asset_condition.objects)
    assert len(assets) == 1 and isinstance(assets[0], Asset)
    asset = assets[0]
    assert asset.uri == "x-eosbatch://watched/source" and asset.name == "eosbatch__watched__source"
    [watcher] = asset.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == "eosbatch.orchestration.triggers.SourceAhead"
    assert kwargs == {"pipeline": "watched", "topics": ["orders", "refunds"], "poll_seconds": 0.5}
    assert isinstance(watcher.trigger, triggers.SourceAhead)
    assert dags.schedule(_pipeline()) is None and dags.schedule(_pipeline(schedule="@hourly")) == "@hourly"
