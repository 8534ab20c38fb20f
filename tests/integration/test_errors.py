"""No lane blocked for ever in silence: against the real stack, each failure an operator meets first ends in
one line that names the address, the batch or the setting, within the connect timeout, with the exit code
of its kind (2 terminal, 3 transient, 4 fenced), and librdkafka's own log goes to the log file.

Unreachable services are real: a port nothing listens on (refused at once) and a socket that accepts and
never answers (a hung server: only the connect timeout ends the wait)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosbatch import config
from eosbatch.kafka.exceptions import TransactionTimeoutTooHigh
from eosbatch.kafka.publisher import TransactionalPublisher
from eosbatch.ledger import migrate, revisions
from tests.scenario import ROOT, Scenario

pytestmark = pytest.mark.integration

STARTUP = 6.0  # python, imports and the pipeline module, on a busy 2-core machine


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A server that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


@pytest.fixture
def scenario(settings, unique) -> Scenario:
    return Scenario(settings, unique, "totals", records=0)


def _cli(scenario: Scenario, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "eosbatch.cli", *args], env={**scenario.env(), **env},
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    return done, time.monotonic() - started


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return lines[0]


def test_unreachable_broker_fails_within_the_default_connect_timeout_with_one_line(scenario, tmp_path):
    address = f"127.0.0.1:{_closed_port()}"
    done, took = _cli(scenario, "run", scenario.pipeline, EOSBATCH_KAFKA_BOOTSTRAP=address,
                      EOSBATCH_LOG_DIR=str(tmp_path))
    line = _one_line(done)
    assert done.returncode == 3, line
    assert address in line and "cannot reach Kafka" in line and "Connection refused" in line
    assert took <= config.DEFAULT_CONNECT_TIMEOUT_S + STARTUP, took
    assert not done.stdout.strip()
    log = (tmp_path / "kafka.log").read_text()
    assert "Connection refused" in log  # librdkafka's lines are in the file, not on the terminal


def test_a_broker_that_never_answers_fails_within_the_configured_timeout(scenario, silent_port, tmp_path):
    address = f"127.0.0.1:{silent_port}"
    done, took = _cli(scenario, "status", scenario.pipeline, EOSBATCH_KAFKA_BOOTSTRAP=address,
                      EOSBATCH_CONNECT_TIMEOUT_S="3", EOSBATCH_LOG_DIR=str(tmp_path))
    line = _one_line(done)
    assert done.returncode == 3, line
    assert address in line and "within 3 s" in line
    assert 3 <= took <= 3 + STARTUP, took


def test_unreachable_database_fails_with_one_line_naming_the_address(scenario, silent_port):
    refused = f"postgresql+psycopg2://eosbatch:hunter2@127.0.0.1:{_closed_port()}/eosbatch"
    done, took = _cli(scenario, "run", scenario.pipeline, EOSBATCH_DATABASE_URL=refused)
    line = _one_line(done)
    assert done.returncode == 3, line
    assert config.redact(refused) in line and "Connection refused" in line
    assert "hunter2" not in done.stderr + done.stdout
    assert took <= STARTUP + 5, took

    hung = f"postgresql+psycopg2://eosbatch@127.0.0.1:{silent_port}/eosbatch"
    done, took = _cli(scenario, "status", scenario.pipeline, EOSBATCH_DATABASE_URL=hung,
                      EOSBATCH_CONNECT_TIMEOUT_S="2")
    line = _one_line(done)
    assert done.returncode == 3, line
    assert hung in line and "no answer within 2 s" in line
    assert 2 <= took <= 2 + STARTUP, took


def test_a_database_without_the_ledger_or_with_an_older_one_says_run_db_upgrade(scenario, fresh_database):
    for command in ("run", "status"):
        done, _ = _cli(scenario, command, scenario.pipeline, EOSBATCH_DATABASE_URL=fresh_database)
        line = _one_line(done)
        assert done.returncode == 2, line
        assert "no eosbatch ledger" in line and "run `eosbatch db upgrade`" in line, line
    known = revisions.known()
    migrate.upgrade(fresh_database, known[-2])
    done, _ = _cli(scenario, "run", scenario.pipeline, EOSBATCH_DATABASE_URL=fresh_database)
    line = _one_line(done)
    assert done.returncode == 2, line
    assert f"revision {known[-2]}" in line and known[-1] in line and "eosbatch db upgrade" in line
    upgraded = subprocess.run([sys.executable, "-m", "eosbatch.cli", "db", "upgrade"],
                              env={**scenario.env(), "EOSBATCH_DATABASE_URL": fresh_database},
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert upgraded.returncode == 0, upgraded.stderr
    done, _ = _cli(scenario, "status", scenario.pipeline, EOSBATCH_DATABASE_URL=fresh_database)
    assert done.returncode == 0, done.stderr  # the way out works


def test_a_transaction_timeout_above_the_broker_maximum_names_both_values(settings, unique):
    too_high = config.load({**os.environ, config.TRANSACTION_TIMEOUT: "1000000"})
    assert too_high.transaction_timeout_ms == 1_000_000
    publisher = TransactionalPublisher(too_high, f"eosbatch.timeout-{unique}", owner="batch 1 of pipeline 't'")
    with pytest.raises(TransactionTimeoutTooHigh) as info:
        publisher.init()
    publisher.close()
    message = str(info.value)
    assert info.value.field == config.TRANSACTION_TIMEOUT
    assert "1000000 ms" in message and "900000 ms" in message  # the embedded broker keeps Kafka's default max
    assert "\n" not in message


# A publisher frozen mid-publish (SIGSTOP), fenced by a newer one, then resumed (SIGCONT): it reports the
# fencing through the CLI's own error path, as `eosbatch run` would.
FROZEN_PUBLISHER = """
import os, signal, sys, time
from eosbatch import cli, config
from eosbatch.exceptions import EosbatchError
from eosbatch.kafka.publisher import TransactionalPublisher
settings, topic, tid = config.load(), sys.argv[1], sys.argv[2]
publisher = TransactionalPublisher(settings, tid, owner="batch 7 of pipeline 'frozen'")
try:
    publisher.init()
    publisher.begin()
    publisher.produce(topic, [(b"k", b"before the freeze")], headers=[])
    print("frozen", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)

    def records():
        yield b"k", b"after the freeze 0"
        time.sleep(3)  # the broker refuses that record meanwhile: the producer turns fatal, and produce()
        yield b"k", b"after the freeze 1"  # of the next one says only "_FATAL: Local: Fatal error"

    publisher.produce(topic, records(), headers=[])
    print("not fenced", flush=True)
except EosbatchError as exc:
    cause = exc.__cause__
    print("cause", cause.args[0].name() if cause is not None and cause.args else None, flush=True)
    sys.exit(cli._fail(exc))
finally:
    publisher.close()
"""


def _wait_stopped(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not stop")


def test_a_frozen_publisher_fenced_meanwhile_exits_with_one_line_naming_its_batch(settings, unique, tmp_path):
    from examples.orders import generate

    topic, tid = f"frozen_out_{unique}", f"eosbatch.frozen-{unique}"
    generate.ensure_topics(settings, {topic: 1})
    child = subprocess.Popen([sys.executable, "-c", FROZEN_PUBLISHER, topic, tid],
                             env={**os.environ, "PYTHONPATH": str(ROOT), "EOSBATCH_LOG_DIR": str(tmp_path)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "frozen"
        _wait_stopped(child.pid)
        newer = TransactionalPublisher(settings, tid)
        newer.init()  # fences the frozen one and aborts its open transaction
        newer.close()
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
    lines = err.strip().splitlines()
    assert child.returncode == 4, err[-3000:]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith("eosbatch: fenced: batch 7 of pipeline 'frozen': another runner owns it now")
    assert "not fenced" not in out
    assert "cause _FATAL" in out, out  # the generic fatal error, recognised as fencing from its stored cause


def test_a_record_the_topic_refuses_is_a_terminal_error_naming_the_batch(settings, unique):
    """Refused by the broker (over the topic's max.message.bytes) or by the producer (over message.max.bytes):
    a terminal error naming the batch, never "abort and retry the publish" for ever, never a raw KafkaException."""
    from confluent_kafka.admin import NewTopic

    from eosbatch.kafka import clients
    from eosbatch.kafka.exceptions import RecordTooLarge

    topic = f"small_out_{unique}"
    admin = clients.admin(settings)
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "10000"})])[topic].result(timeout=30)
    for size in (50_000, 2_000_000):  # the broker's refusal (a failed delivery), then librdkafka's own
        publisher = TransactionalPublisher(settings, f"eosbatch.small-{unique}-{size}",
                                           owner="batch 9 of pipeline 'small'")
        publisher.init()
        publisher.begin()
        with pytest.raises(RecordTooLarge) as info:
            publisher.produce(topic, [(b"k", os.urandom(size))], headers=[])  # random: no compression shrinks it
        publisher.close()  # aborts the transaction
        assert str(info.value).startswith("batch 9 of pipeline 'small': kafka at ")
        assert "MSG_SIZE_TOO_LARGE" in str(info.value)
