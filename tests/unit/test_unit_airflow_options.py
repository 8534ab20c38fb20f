"""AirflowOptions: a pipeline's DAG settings, validated when built, naming the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from eosbatch import AirflowOptions, KafkaSource, Pipeline, PostgresSink
from eosbatch.exceptions import ConfigError
from eosbatch.pipeline import BATCHES_PER_RUN, MOST_BATCHES_PER_RUN

pytestmark = pytest.mark.unit


def notify(context: dict[str, Any]) -> None:
    """A user's callback (never called here)."""


def test_defaults_leave_eosbatch_its_own_retries_and_a_cap_above_one() -> None:
    options = AirflowOptions()
    assert options.batches_per_run == BATCHES_PER_RUN > 1 and options.max_active_runs == 1
    assert options.default_args() == {"owner": "eosbatch"}  # retries: eosbatch's own (dags.RETRIES)
    pipeline = Pipeline(name="p", source=KafkaSource(["in"]), transform=lambda df: df,
                        sink=PostgresSink("t", key=["k"]))
    assert pipeline.airflow == options


def test_settings_become_default_args_lists_and_tags_become_tuples() -> None:
    options = AirflowOptions(batches_per_run=MOST_BATCHES_PER_RUN, owner="data", retries=0,
                             retry_delay=timedelta(seconds=30), pool="etl", queue="spark",
                             on_failure_callback=[notify], on_success_callback=notify, tags=["team"])
    assert options.tags == ("team",) and options.on_failure_callback == (notify,)
    assert options.default_args() == {"owner": "data", "retries": 0, "retry_delay": timedelta(seconds=30),
                                      "pool": "etl", "queue": "spark", "on_failure_callback": [notify],
                                      "on_success_callback": notify}
    hash(options)  # a frozen value, like the Pipeline that holds it


@pytest.mark.parametrize(("overrides", "field"), [
    ({"batches_per_run": 0}, "airflow.batches_per_run"),
    ({"batches_per_run": MOST_BATCHES_PER_RUN + 1}, "airflow.batches_per_run"),
    ({"batches_per_run": "4"}, "airflow.batches_per_run"),
    ({"batches_per_run": True}, "airflow.batches_per_run"),
    ({"owner": ""}, "airflow.owner"),
    ({"retries": -1}, "airflow.retries"),
    ({"retries": 2.5}, "airflow.retries"),
    ({"retry_delay": 10}, "airflow.retry_delay"),
    ({"retry_delay": timedelta(seconds=-1)}, "airflow.retry_delay"),
    ({"pool": ""}, "airflow.pool"),
    ({"queue": 3}, "airflow.queue"),
    ({"on_failure_callback": "page_me"}, "airflow.on_failure_callback"),
    ({"on_retry_callback": [notify, "x"]}, "airflow.on_retry_callback"),
    ({"on_success_callback": []}, "airflow.on_success_callback"),
    ({"tags": "team"}, "airflow.tags"),
    ({"tags": ["ok", ""]}, "airflow.tags[1]"),
    ({"tags": ["x" * 101]}, "airflow.tags[0]"),
    ({"max_active_runs": 2}, "airflow.max_active_runs"),
    ({"max_active_runs": 0}, "airflow.max_active_runs"),
    ({"shape": "fast"}, "airflow.shape"),
])
def test_bad_options_fail_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        AirflowOptions(**overrides)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")


def test_max_active_runs_error_says_why() -> None:
    with pytest.raises(ConfigError, match="lease"):
        AirflowOptions(max_active_runs=3)


def test_a_pipeline_takes_only_airflow_options_and_options_is_gone() -> None:
    base: dict[str, Any] = {"name": "p", "source": KafkaSource(["in"]), "transform": lambda df: df,
                            "sink": PostgresSink("t", key=["k"])}
    with pytest.raises(ConfigError) as raised:
        Pipeline(**base, airflow={"retries": 1})  # type: ignore[arg-type]
    assert raised.value.field == "airflow"
    with pytest.raises(TypeError, match="options"):  # the old, never read, dict: an error, not a silent no-op
        Pipeline(**base, options={"retries": 1})  # type: ignore[call-arg]


def test_the_docs_python_blocks_run() -> None:
    """docs/airflow-dags.md: every Python block runs as written, and its pipelines are valid values."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "airflow-dags.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert blocks
    for block in blocks:
        namespace: dict[str, Any] = {}
        exec(compile(block, str(page), "exec"), namespace)  # noqa: S102 - the page's own code
        pipelines = [v for v in namespace.values() if isinstance(v, Pipeline)]
        assert pipelines and all(p.airflow.batches_per_run > 1 for p in pipelines)
