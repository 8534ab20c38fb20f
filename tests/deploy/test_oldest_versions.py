"""CI's old-versions job: the wheel, installed with `[airflow]` into a second venv with the oldest supported
PySpark, Airflow and providers (constraints/oldest.txt, written by ./scripts/oldest-constraints.sh), passes
the unit tests, parses the DAG file, and runs a batch exactly-once on a Spark Connect server of that PySpark.
The venv (.venv-oldest) is kept while the constraints stay the same."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from eosbatch import config
from tests.deploy import oldest
from tests.deploy.conftest import user_pipeline
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

FLOORED = ("pyspark", "apache-airflow", "apache-airflow-providers-apache-kafka",
           "apache-airflow-providers-apache-spark", "apache-airflow-providers-openlineage", "confluent-kafka")


def floors() -> dict[str, str]:
    """pyproject.toml's lower bounds of the floored packages, as full versions (4.0 -> 4.0.0)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for requirement in project["dependencies"] + project["optional-dependencies"]["airflow"]:
        match = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][0-9.]*)", requirement)
        if match and match[1] in FLOORED:
            parts = match[3].split(".")
            found[match[1]] = ".".join(parts + ["0"] * (3 - len(parts)))
    return found


def test_the_venv_holds_the_lower_bounds_of_pyproject(oldest_venv) -> None:
    """The constraints pin each floored package at pyproject's lower bound, and the venv has them."""
    wanted = floors()
    assert set(wanted) == set(FLOORED), wanted
    pinned, installed = oldest.pinned(), oldest.versions()
    assert {name: pinned[name] for name in FLOORED} == wanted
    assert {name: installed[name] for name in pinned} == pinned
    print("oldest: " + ", ".join(f"{name} {installed[name]}" for name in FLOORED))


def test_the_unit_tests_pass_on_the_oldest_versions(oldest_venv) -> None:
    """tests/unit with the venv's own pytest and packages. (Run from the checkout, the pytest config puts it on
    sys.path first: the code is the checkout's, the same as the wheel's; the dependencies are the venv's.)"""
    done = oldest.run([str(oldest.python()), "-m", "pytest", "tests/unit", "-q", "-p", "no:cacheprovider",
                       "-o", "addopts=-ra",
                       "--ignore=tests/unit/test_unit_bench_plots.py"],  # the bench (matplotlib) is not in the wheel
                      env=oldest.clean_env({"CI": "true"}), cwd=ROOT)
    summary = done.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and "error" not in summary, summary
    print(f"tests/unit on the oldest versions: {summary}")


DAG_IMPORT = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1], include_examples=False)
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids)}))
"""


def test_the_dag_file_imports_on_the_oldest_airflow(oldest_venv, tmp_path, unique) -> None:
    """dags/eosbatch_dags.py alone in a dags folder, parsed by the venv's Airflow, from outside the checkout."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "eosbatch_dags.py").write_text((ROOT / "dags" / "eosbatch_dags.py").read_text())
    module = user_pipeline(tmp_path / "pipelines", unique)
    env = oldest.clean_env({"AIRFLOW_HOME": str(tmp_path / "airflow"), config.PIPELINES: module,
                            "PYTHONPATH": str(tmp_path / "pipelines")})
    done = oldest.run([str(oldest.python()), "-c", DAG_IMPORT, str(dags)], env=env, cwd=tmp_path)
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    name = f"crash_totals_{unique}"
    assert parsed == {"errors": {}, "dags": [f"eosbatch__{name}", f"eosbatch__{name}__backfill",
                                             f"eosbatch__{name}__replay"]}


def test_a_batch_runs_exactly_once_on_the_oldest_versions(settings, oldest_connect, tmp_path, unique) -> None:
    """`eosbatch run` of the venv, on the Connect server of the venv's PySpark, a user's pipeline module outside
    the checkout; counted by this process: the sink's rows, the output read with read_committed."""
    scenario = Scenario(settings, unique, "totals", batch=100_000)
    module = user_pipeline(tmp_path / "pipelines", unique)
    env = oldest.clean_env({config.DATABASE_URL: settings.database_url,
                            config.KAFKA_BOOTSTRAP: settings.kafka_bootstrap,
                            config.SPARK_REMOTE: oldest_connect.url, config.PIPELINES: module,
                            "PYTHONPATH": str(tmp_path / "pipelines")})
    done = oldest.run([str(oldest.VENV / "bin" / "eosbatch"), "run", scenario.pipeline], env=env, cwd=tmp_path)
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:])
    assert scenario.states() == ["published"]
    scenario.assert_exactly_once()
