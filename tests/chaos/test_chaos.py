"""Chaos against the real stack (issue 11, item 3): PostgreSQL crashed like a power cut at every fault point, the
Kafka broker SIGKILLed mid-publish, runners frozen with SIGSTOP and resumed after a second runner took over.

Each test freezes a runner exactly at a fault point (`EOSBATCH_FAULT=<point>:stop`), asserts that the fault
really fired there (a moved or renamed point cannot pass by accident), does its damage, lets the pipeline
recover, and ends with the independent exactly-once check (input vs sink vs read_committed output vs dead
letters) and `eosbatch verify`. Inputs are small and each scenario is one batch: a spark-submit costs 20-60 s
here, and the suite must stay within 15 minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from psycopg2 import sql

from eosbatch import config
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import lanes, store
from tests.chaos.control import ROOT, end_exactly_once, wait_for_lease_expiry
from tests.chaos.control import session as control_session
from tests.chaos.judge import assert_exactly_once_judged
from tests.history.collect import SinkSpec
from tests.redriving import Redrive
from tests.scenario import Scenario

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

RECORDS = 1200  # ~1,220 offsets over 3 partitions, with aborted transactions, repeated ids, 3 malformed records
BATCH = 1500    # one batch holds them all: one spark-submit per processing

# point, sink kind, the batch's state once PostgreSQL is back, the DAG task that was running there
PG_CRASH = [
    ("plan.after_commit", "totals", "planned", "plan"),
    ("process.mid_staging", "totals", "planned", "process"),       # in an executor's Python worker
    ("process.after_staged", "latest", "staged", "process"),       # staged; the crash empties unlogged staging
    ("commit.before_commit", "totals", "staged", "commit"),        # the commit's transaction dies with the server
    ("commit.after_commit", "totals", "committed", "commit"),
    ("publish.mid_produce", "totals", "committed", "publish"),     # a Kafka transaction left open
    ("publish.after_kafka_commit", "latest", "committed", "publish"),
    ("publish.mid_produce", "events", "committed", "publish"),     # append: committed, then published once
    # A sink with deletes, two batches: the fault acts in the second, whose tombstones delete the first's rows.
    ("commit.after_commit", "deletes", "committed", "commit"),     # a COMMIT that deleted rows and left markers
    ("publish.mid_produce", "deletes", "committed", "publish"),    # tombstones in the open Kafka transaction
    # An evolving sink, two batches: the second brings a jsonb column, added (ADD COLUMN, its own transaction)
    # before staging. Crashed right after the COMMIT that re-checked the shape and wrote the outbox with the new
    # column: the batch was refused an early publish, so its records exist only there, to publish after recovery.
    ("commit.after_commit", "evolving", "committed", "commit"),
]
DELETES_BATCH = 700  # of RECORDS: two batches
TWO_BATCHES = frozenset({"deletes", "evolving"})  # kinds whose fault acts in the second of two batches


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def _epoch(settings, pipeline: str) -> int:
    with store.transaction(settings) as cur:
        return lanes.lock_pipeline(cur, pipeline)


LEASE_SECONDS = 4  # the frozen-runner tests' lease: a frozen holder's lane is free again after it


def dag_retry(scenario: Scenario, batch_id: int, task: str) -> list[dict[str, Any]]:
    """Airflow's retry of `task` and the rest of its DAG run, in a new process (tests/chaos/dag_retry.py)."""
    done = subprocess.run([sys.executable, "-m", "tests.chaos.dag_retry", scenario.pipeline, str(batch_id), task],
                          env=scenario.env(), capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip(), f"dag_retry: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def assert_failures_are_clear(results: list[dict[str, Any]]) -> None:
    """A task may fail after the crash (a commit refusing a batch whose staging was lost), but as an eosbatch
    error (terminal: AirflowFailException around it; transient: eosbatch's own class), never a raw third-party
    exception; and a failed process or commit is followed by the abort task, as in the DAG."""
    for result in results:
        if result["state"] == "failed":
            error = result["error"] or ""
            assert error.startswith(("AirflowFailException: ", "eosbatch.")), f"unclear failure: {result}"
    if any(r["state"] == "failed" and r["task"] in ("process", "commit") for r in results):
        assert results[-1]["task"] == "abort" and results[-1]["state"] == "success", results


# ---------------------------------------------------------------- a. PostgreSQL crashes

@pytest.mark.parametrize("recovery", ["run", "retry"])
@pytest.mark.parametrize(("point", "kind", "left", "task"), PG_CRASH,
                         ids=[p[0] + {"events": "-append", "deletes": "+deletes", "evolving": "+evolving"}.get(p[1], "")
                              for p in PG_CRASH])
def test_postgres_crash_at_fault_point_then_recovery(settings, unique, services, runners, point, kind, left, task,
                                                     recovery):
    """The runner is frozen at `point`; PostgreSQL stops like a power cut and restarts (crash recovery empties
    the UNLOGGED staging tables); the runner is SIGKILLed. Then either `eosbatch run` recovers, or Airflow
    retries the task that was running and carries on with the DAG run, and `eosbatch run` does the next run."""
    second = kind in TWO_BATCHES
    scenario = Scenario(settings, unique, kind, records=RECORDS, batch=DELETES_BATCH if second else BATCH)
    # Commit, then publish, as the steps DAG shape runs them (its tasks are what `retry` retries); early publish,
    # the default of `eosbatch run`, is crashed the same way below (EARLY).
    scenario.env_overrides[config.EARLY_PUBLISH] = "0"
    if kind == "evolving":  # early publish on: the batch that added the column must still go through the outbox
        scenario.env_overrides[config.EARLY_PUBLISH] = "1"
    first = runners.start(scenario, fault=f"{point}{'@2' if second else ''}:stop")
    frozen = first.stopped_at(point)
    if point == "process.mid_staging":  # the env and the fired file reach an executor's Python worker
        assert frozen != first.pid and "pyspark.daemon" in _cmdline(frozen), _cmdline(frozen)
    services.crash_postgres()
    first.kill()
    assert first.fired_points() == [point]
    *_, (batch_id, _, state) = scenario.batches()
    if kind == "deletes":  # the first batch was published; the second deleted some of its rows
        assert scenario.states()[0] == "published" and _deleted_rows(settings, batch_id) > 0
    if kind == "evolving":  # the first batch was published; the second added the sink's jsonb column
        assert scenario.states()[0] == "published" and _evolved(settings, batch_id) == ["detail"]
        # and it did not publish early: not one record with the column in the log, even uncommitted
        produced = read_topic(settings, scenario.output, "read_uncommitted")
        assert produced and not any("detail" in json.loads(r.value) for r in produced), len(produced)
    assert state == left, f"after the crash batch {batch_id} is {state}, expected {left}"

    if recovery == "run":
        done = scenario.run()
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        results = dag_retry(scenario, batch_id, task)
        assert results[0]["task"] == task, results
        assert_failures_are_clear(results)
        following = scenario.run()  # the DAG's next run
        assert following.returncode == 0, f"{results}\n{following.stderr[-3000:]}"
    # The verifier's Spark recompute of the sink once, in the issue's own case (a retried commit once moved an
    # emptied staging and left an empty sink); elsewhere Scenario's check compares the sink with the input.
    end_exactly_once(scenario, recompute=(point, recovery) == ("process.after_staged", "retry"))


def _evolved(settings, batch_id: int) -> list[str]:
    """The columns a batch added to its evolving sink, as its ledger row records them."""
    with store.transaction(settings) as cur:
        return list((store.get_batch(cur, batch_id).writers or {}).get("evolved", []))


def _deleted_rows(settings, batch_id: int) -> int:
    """The sink rows a committed batch deleted: the tombstones in its outbox."""
    with store.transaction(settings) as cur:
        cur.execute("SELECT outbox_columns FROM eosbatch.batches WHERE id = %s", (batch_id,))
        assert "_eosbatch_deleted" in cur.fetchone()[0]
        cur.execute("SELECT pipeline FROM eosbatch.batches WHERE id = %s", (batch_id,))
        [pipeline] = cur.fetchone()
        cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE _eosbatch_batch = %s AND _eosbatch_deleted").format(
            sql.Identifier("eosbatch", f"outbox_{pipeline}")), (batch_id,))
        return int(cur.fetchone()[0])


# EOSBATCH_EARLY_PUBLISH: the batch's Kafka transaction is filled while PostgreSQL commits it
EARLY = [
    ("commit.before_commit", "staged", "latest"),  # records in the open Kafka transaction, the COMMIT never sent
    ("commit.after_commit", "committed", "latest"),  # COMMIT done, the Kafka transaction still open
    ("publish.mid_produce", None, "latest"),  # the producing thread, all records flushed; the commit may be done
    # the same with an Avro output, a composite key and a copied header (docs/output.md): the early records and
    # the outbox's, published after recovery, are the same bytes
    ("publish.mid_produce", None, "latest_avro"),
    # an append sink: its rows are stored as they come, or not at all
    ("commit.after_commit", "committed", "events"),
    ("publish.mid_produce", None, "events"),
]


@pytest.mark.parametrize(("point", "left", "kind"), EARLY,
                         ids=[e[0] + ("" if e[2] == "latest" else f"-{e[2]}") for e in EARLY])
def test_postgres_crash_mid_early_publish_then_recovery(settings, unique, services, runners, point, left, kind):
    """The runner is frozen inside an early publish (its Kafka transaction open, the commit beside it at
    `point`); PostgreSQL stops like a power cut and restarts; the runner is SIGKILLed. The next run's
    init_transactions() aborts the open transaction: the batch is planned again, or published from its
    outbox, once. Early publish is the default: nothing turns it on here."""
    scenario = Scenario(settings, unique, kind, records=RECORDS, batch=BATCH)
    first = runners.start(scenario, fault=f"{point}:stop")
    first.stopped_at(point)
    services.crash_postgres()
    first.kill()
    assert first.fired_points() == [point]
    [(batch_id, _, state)] = scenario.batches()
    assert state == left if left else state in ("staged", "committed"), f"batch {batch_id} is {state}"
    if point == "publish.mid_produce":  # frozen in the early producer, its records flushed into the open transaction
        assert read_topic(settings, scenario.output, "read_uncommitted")
    done = scenario.run()
    assert done.returncode == 0, done.stderr[-3000:]
    end_exactly_once(scenario)


@pytest.mark.parametrize("engine", ["connect"], indirect=True)  # three spark-submits per run would be minutes
def test_postgres_crash_with_overlapped_batches_in_flight(settings, unique, services, runners, engine):
    """An overlapped run (eosbatch.running.overlapped) is frozen inside its second commit, with the third batch
    planned or staged beside it and the first committed or published; PostgreSQL stops like a power cut (the
    staging of both unfinished batches is gone) and the runner is SIGKILLed. The next overlapped run recovers
    them all."""
    scenario = Scenario(settings, unique, "latest", records=RECORDS, batch=300)
    first = runners.start(scenario, "run", scenario.pipeline, "--overlap", fault="commit.before_commit@2:stop")
    first.stopped_at("commit.before_commit")
    services.crash_postgres()
    first.kill()
    assert first.fired_points() == ["commit.before_commit"]
    states = scenario.states()
    assert states[0] in ("committed", "published") and states[1] == "staged", states
    assert states[2] in ("planned", "staged"), f"no batch was in flight beside the commit: {states}"
    done = scenario.run(None, "--overlap")
    assert done.returncode == 0, done.stderr[-3000:]
    end_exactly_once(scenario)


# ---------------------------------------------------------------- b. the broker dies mid-publish

@pytest.mark.parametrize("early", [False, True], ids=["publish-after-commit", "early-publish"])
def test_broker_sigkilled_mid_publish_then_restarted(settings, unique, services, runners, early):
    """Records of the open Kafka transaction are in the log; the broker dies with kill -9 and comes back; the
    runner resumes: it commits, or fails with an eosbatch error (the next run publishes), never half of both.
    Early publish: the records were produced while the commit ran beside them."""
    scenario = Scenario(settings, unique, "latest" if early else "totals", records=RECORDS, batch=BATCH)
    if early:
        scenario.env_overrides[config.EARLY_PUBLISH] = "1"
    first = runners.start(scenario, fault="publish.mid_produce:stop")
    frozen = first.stopped_at("publish.mid_produce")
    services.kill_broker()
    first.resume(frozen)
    code = first.wait()
    assert first.fired_points() == ["publish.mid_produce"]
    if code != 0:
        last = first.stderr.strip().splitlines()[-1]
        assert code in (2, 3) and last.startswith("eosbatch: "), first.tail()
        done = scenario.run()
        assert done.returncode == 0, done.stderr[-3000:]
    end_exactly_once(scenario)


# ---------------------------------------------------------------- c. a frozen runner resumed late

ZOMBIES = [
    # where the first runner freezes; what the ledger holds then
    ("process.before_staged", "planned"),  # in the Spark driver: staging written, batch not yet staged
    ("commit.after_commit", "committed"),  # in the runner: committed, not published
]


@pytest.mark.parametrize(("point", "left"), ZOMBIES, ids=[z[0] for z in ZOMBIES])
def test_frozen_runner_resumed_after_a_second_runner_took_over(settings, unique, services, runners, point, left):
    """The first runner freezes at `point`; a second runner takes the pipeline over and is itself frozen inside
    its Kafka transaction (mid-produce), so that it is truly live when the first one wakes up. The first must
    stop with a clear stale/fenced error and must not take anything from the live one: no epoch bump, no
    init_transactions() on the lane (which would fence the live producer and fail its commit). Then the live
    runner finishes, and nothing is written twice."""
    scenario = Scenario(settings, unique, "totals", records=RECORDS, batch=BATCH)
    short = {"EOSBATCH_LEASE_SECONDS": str(LEASE_SECONDS)}
    zombie = runners.start(scenario, fault=f"{point}:stop", name="zombie", env=short)
    zombie.stopped_at(point)
    zombie.freeze()  # all of it, its lease heartbeat too: a runner that stopped answering
    assert scenario.states() == [left]
    wait_for_lease_expiry(settings, scenario.pipeline)
    live = runners.start(scenario, fault="publish.mid_produce:stop", name="live", env=short)
    live_frozen = live.stopped_at("publish.mid_produce")
    epoch = _epoch(settings, scenario.pipeline)

    zombie.thaw()
    zombie_code = zombie.wait()
    epoch_after_zombie = _epoch(settings, scenario.pipeline)
    live.resume(live_frozen)
    live_code = live.wait()
    assert zombie.fired_points() == [point] and live.fired_points() == ["publish.mid_produce"]

    problems = []
    if live_code != 0:
        problems.append(f"the live runner failed after the zombie woke up: {live.tail()}")
    if zombie_code == 0:
        problems.append(f"the zombie ended with exit 0 instead of a stale/fenced error: {zombie.tail()}")
    elif not any(word in zombie.stderr for word in ("StaleEpoch", "stale", "fenced", "another runner")):
        problems.append(f"the zombie's error does not say it was fenced: {zombie.tail()}")
    if epoch_after_zombie != epoch:
        problems.append(f"the zombie took the pipeline over (epoch {epoch} -> {epoch_after_zombie})")
    try:
        if live_code != 0:  # the data must still end exactly-once once a runner finishes
            done = scenario.run()
            assert done.returncode == 0, done.stderr[-3000:]
        end_exactly_once(scenario)
    except AssertionError as exc:
        problems.append(f"not exactly-once: {exc}")
    assert not problems, "\n\n".join(problems)


# ---------------------------------------------------------------- e. the Spark engine dies mid-batch

@pytest.mark.parametrize("engine", ["connect"], indirect=True)
def test_spark_connect_server_sigkilled_mid_batch_then_restarted(settings, unique, services, runners, engine):
    """The long-lived engine dies while a batch is staging (kill -9 of the Connect server's JVM, its executors
    with it): the runner fails with one transient eosbatch line, the batch is aborted with its offsets
    unmoved; the stack's supervisor brings the server back by itself, and the next run ends exactly-once."""
    scenario = Scenario(settings, unique, "totals", records=RECORDS, batch=BATCH)
    first = runners.start(scenario, fault="process.mid_staging:stop")
    worker = first.stopped_at("process.mid_staging")
    assert worker not in control_session(first.pid), "the staging task runs in the server, not in the runner"
    killed = services.kill_spark_connect()
    with contextlib.suppress(ProcessLookupError):  # the PySpark daemon may have taken it down with the JVM
        os.kill(worker, signal.SIGKILL)  # else the frozen Python worker outlives its JVM: it cannot notice
    code = first.wait()
    last = first.stderr.strip().splitlines()[-1]
    assert code == 3 and last.startswith("eosbatch: ") and "Spark engine is unavailable" in last, first.tail()
    [(batch_id, _, state)] = scenario.batches()
    assert state == "aborted", f"batch {batch_id} is {state}"
    services.spark_connect_restarted(killed)  # nobody starts it: `stack up`'s supervisor restarts it
    done = scenario.run()
    assert done.returncode == 0, done.stderr[-3000:]
    end_exactly_once(scenario)


# ---------------------------------------------------------------- e. a redrive of dead letters

# point, the redrive batch's state once PostgreSQL is back
REDRIVE_CRASH = [
    ("commit.after_commit", "committed"),  # the sink rows and the redriven marks are in; publish is left
]


@pytest.mark.parametrize(("point", "left"), REDRIVE_CRASH, ids=[r[0] for r in REDRIVE_CRASH])
def test_postgres_crash_mid_redrive_then_redrive_again(settings, unique, services, runners, point, left):
    """`eosbatch dead-letters redrive` is frozen at `point` after the schema fix; PostgreSQL stops like a power
    cut and restarts; the runner is SIGKILLed. The same redrive again settles the batch (its lane's recovery)
    and chooses only what is left: each dead letter goes through once, the broken ones stay with the new reason."""
    scenario = Redrive(settings, unique)
    scenario.ok("run", scenario.pipeline, fixed=False)
    first = runners.start(scenario, "dead-letters", "redrive", scenario.pipeline, "--all", "--yes",
                          fault=f"{point}:stop")
    first.stopped_at(point)
    services.crash_postgres()
    first.kill()
    assert first.fired_points() == [point]
    [regular, (batch_id, kind, state)] = scenario.batches()
    assert (kind, state) == ("redrive", left) and regular[2] == "published"
    done = scenario.redrive("--all", "--yes")
    assert done["redriven"] == 0 and done["dead_letters"] == 4, done  # only the broken ones were left to choose
    scenario.assert_exactly_once(fixed=True)
    assert_exactly_once_judged(settings, scenario.pipeline, scenario.output, SinkSpec(scenario.pipeline, ("id",)),
                               scenario.env())
    assert {by for _, _, by, _ in scenario.dead_letters().values() if by is not None} == {batch_id}
