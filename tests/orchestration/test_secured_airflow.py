"""The Airflow side of a password: micro-batch runs through dag.test() whose `eosbatch_postgres` connection
(from the environment, as a secrets backend would give it) holds a SCRAM role's password, one of them killed
mid-commit; the password is in no task output, task log file, client log or ledger row."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import pytest

from eosbatch import faults, stack
from eosbatch.ledger import store
from eosbatch.orchestration import local
from tests.scenario import ROOT, Scenario

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

RUN = """
import sys

from eosbatch import registry
from eosbatch.orchestration import dags

print("RUN", dags.microbatch_dag(registry.get(sys.argv[1])).test().state)
"""


def test_a_connections_password_reaches_no_task_log(settings, airflow_db, unique, tmp_path) -> None:
    from sqlalchemy.engine import make_url

    password = "pw-" + secrets.token_urlsafe(18)
    role, database = f"eosbatch_af_{unique}", f"secured_af_{unique}"
    url = stack.add_password_role(role, password, database)
    secured = settings._replace(database_url=url.replace(f"{role}@", f"{role}:{password}@"))
    scenario = Scenario(secured, unique, "totals", batch=1000)
    assert scenario.cli("db", "upgrade").returncode == 0
    where = make_url(url)
    env = {**scenario.env(), "EOSBATCH_PIPELINES": "tests.pipelines.scheduled", "PYTHONPATH": str(ROOT),
           "EOSBATCH_TEST_SUFFIXES": f"{unique}:earliest:1000", "EOSBATCH_LOG_DIR": str(tmp_path / "logs"),
           "AIRFLOW_HOME": str(local.home()), "EOSBATCH_DATABASE_URL": "",  # only the connection knows it
           "AIRFLOW_CONN_EOSBATCH_POSTGRES": json.dumps({
               "conn_type": "postgres", "host": where.host, "port": where.port, "login": role,
               "password": password, "schema": database})}
    said: list[str] = []

    def dag_test(fault: str | None = None) -> subprocess.CompletedProcess[str]:
        run_env = {k: v for k, v in env.items() if k != faults.FAULT}
        if fault:
            run_env[faults.FAULT] = fault
        done = subprocess.run([sys.executable, "-c", RUN, scenario.pipeline], env=run_env, capture_output=True,
                              text=True, timeout=600, cwd=ROOT)
        said.extend([done.stdout, done.stderr])
        return done

    crashed = dag_test("commit.before_commit")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    for _ in range(3):  # the crashed run's batch is recovered, then the rest of the input (1,000 per batch)
        done = dag_test()
        assert "RUN success" in done.stdout, done.stderr[-3000:]
    scenario.assert_exactly_once()
    assert "aborted" in scenario.states()

    logs = [p for p in (local.home() / "logs").rglob("*") if p.is_file() and f"eosbatch__{scenario.pipeline}" in str(p)]
    logs += [p for p in (tmp_path / "logs").rglob("*") if p.is_file()]
    with store.transaction(secured) as cur:
        cur.execute("SELECT t::text FROM eosbatch.batches t UNION ALL SELECT t::text FROM eosbatch.dead_letters t")
        ledger = [row for (row,) in cur.fetchall()]
    places = {"task output": "\n".join(said), "ledger": "\n".join(ledger),
              **{str(p): p.read_text(errors="replace") for p in logs}}
    assert [where for where, text in places.items() if password in text] == []
    assert any("batch" in text for text in said), "the runs logged nothing: nothing was searched"
    print(f"searched the output of {len(said) // 2} dag.test() runs, {len(logs)} log files and {len(ledger)} "
          "ledger rows for the password: none")
