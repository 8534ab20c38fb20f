"""The Airflow side of a password: micro-batch runs through dag.test() whose `eosbatch_postgres` connection
(from the environment, as a secrets backend would give it) holds a SCRAM role's password, one of them killed
mid-commit; and runs through the real scheduler whose pipeline has a connection of its own in Airflow's
metadata database, the first of them failing. The password is in no task output, task log file, Airflow
process log, client or stack log, process argument, `status` or ledger row."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import pytest

from eosbatch import faults, stack
from eosbatch.ledger import store
from eosbatch.orchestration import connections, local
from tests import leaks
from tests.conftest import long_lived_ids
from tests.orchestration.helpers import LocalAirflow
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
    long_lived_ids(secured)
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


def test_a_pipelines_own_connection_through_the_real_scheduler_leaks_no_password(
        scheduler: LocalAirflow, settings) -> None:
    """A second database for one pipeline, reached as a SCRAM role through `eosbatch_postgres__<pipeline>`
    (added as a user adds it in the UI); the scheduler's other pipelines keep the shared connection. The first
    run fails (that database has no ledger yet: a terminal error, named), `eosbatch db upgrade`, the second
    runs the batch exactly-once."""
    from sqlalchemy.engine import make_url

    suffix = scheduler.suffixes["secured"]
    password = "pw-" + secrets.token_urlsafe(18)
    role, database = f"eosbatch_sched_{suffix}", f"secured_sched_{suffix}"
    url = stack.add_password_role(role, password, database)
    secured = settings._replace(database_url=url.replace(f"{role}@", f"{role}:{password}@"))
    scenario = Scenario(secured, suffix, "totals", batch=100_000)
    dag = f"eosbatch__{scenario.pipeline}"
    where = make_url(url)
    before = leaks.stack_logs()
    airflow_logs = {p: p.stat().st_size for p in (local.home() / "processes").glob("*.log")}
    scheduler.add_connection(connections.pipeline_conn_id(connections.POSTGRES_CONN_ID, scenario.pipeline), {
        "conn_type": "postgres", "host": where.host, "port": where.port, "login": role, "password": password,
        "schema": database})
    scheduler.unpause(dag)

    with leaks.command_lines() as seen:
        scheduler.trigger(dag, "secured-1")
        assert scheduler.wait_run(dag, "secured-1") == "failed"
        assert scheduler.task_state(dag, "secured-1", "batch_1.plan") == "failed"
        upgraded = scenario.cli("db", "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr[-2000:]
        long_lived_ids(secured)
        scheduler.trigger(dag, "secured-2")
        assert scheduler.wait_run(dag, "secured-2") == "success", scheduler.timeline(dag, "secured-2")
    scenario.assert_exactly_once()
    assert [state for _, _, state in scenario.batches()] == ["published"]
    status = scenario.cli("status", scenario.pipeline)
    assert status.returncode == 0 and scenario.pipeline in status.stdout

    task_logs = [p for p in (local.home() / "logs").glob(f"dag_id={dag}/**/*") if p.is_file()]
    plan_failed = "\n".join(p.read_text(errors="replace") for p in task_logs if "run_id=secured-1" in str(p)
                            and "task_id=batch_1.plan" in str(p))
    assert "LedgerSchemaMissing" in plan_failed and "eosbatch db upgrade" in plan_failed, plan_failed[-3000:]
    assert f"connection eosbatch_postgres__{scenario.pipeline}: exported" in plan_failed
    places = {str(p): p.read_text(errors="replace") for p in task_logs}
    for path in (local.home() / "processes").glob("*.log"):  # what the scheduler, API server and DAG
        with path.open("rb") as log:                        # processor logged meanwhile (new files whole)
            log.seek(airflow_logs.get(path, 0))
            places[str(path)] = log.read().decode(errors="replace")
    places.update(leaks.grown_since(before))
    places.update({"status": status.stdout + status.stderr, "process arguments": "\n".join(seen),
                   "the ledger's rows": "\n".join(leaks.ledger_rows(secured))})
    # (the gates between batches, `batch_1_failed` and the like, are never run: they have no log)
    ran = {run: {t for t, (state, _, _) in scheduler.tasks(dag, run).items() if state in ("success", "failed")
                 and "." in t} for run in ("secured-1", "secured-2")}
    assert {f"batch_1.{step}" for step in ("plan", "process", "commit", "publish", "finalize", "done")} <= \
        ran["secured-2"], ran
    # every task that ran wrote its log file, and every one of them was searched
    assert {(r, t) for r, tasks in ran.items() for t in tasks} <= {
        (part.removeprefix("run_id="), task.removeprefix("task_id="))
        for p in task_logs for part, task in [(p.parts[-3], p.parts[-2])]}, [str(p) for p in task_logs]
    found = [where for where, text in places.items() if password in text]
    assert found == [], f"the password appears in: {found}"
    print(f"searched {len(places)} places ({sum(map(len, places.values())):,} characters, {len(task_logs)} task "
          "log files) for the password: none")
