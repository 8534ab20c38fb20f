"""The one place Kafka clients are made: every Producer, Consumer and AdminClient of eosbatch comes from here.

Why one factory:
- librdkafka logs every failed connection attempt to stderr (hundreds of lines for an unreachable broker).
  Each client gets a python logger instead, which writes to a file under the log folder
  (EOSBATCH_LOG_DIR), never to the terminal; the operator sees one line and the file has the detail.
- Before the first client of a process talks to a broker, `reach` asks the cluster for its description
  within the connect timeout (EOSBATCH_CONNECT_TIMEOUT_S). An unreachable broker then fails in seconds with
  one line naming the address, instead of after each operation's own, longer timeout.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from eosbatch.config import KAFKA_CONFIG, LOG_DIR, Settings, default_log_dir
from eosbatch.exceptions import ConfigError
from eosbatch.kafka.errors import AUTHENTICATION, describe, error_of
from eosbatch.kafka.exceptions import KafkaAccessDenied, KafkaUnavailable

LOG_FILE = "kafka.log"
LOGGER = "eosbatch.librdkafka"

_lock = threading.Lock()
_reached: set[str] = set()  # bootstrap lists that answered in this process
_admins: dict[tuple[Any, ...], Admin] = {}  # see admin()
_inherited: list[Any] = []  # a forked child's copies of its parent's clients: never used, never freed


def _after_fork() -> None:
    # Freeing a parent's librdkafka client in a child would wait for threads the child lacks.
    _inherited.append(dict(_admins))
    _admins.clear()


os.register_at_fork(after_in_child=_after_fork)


class Admin(AdminClient):
    """An AdminClient that knows its bootstrap list, so errors can name the address."""

    bootstrap = ""


class _LastProblem(logging.Handler):
    """Remembers librdkafka's last warning or error, to say *why* a broker was not reached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.message = ""

    def emit(self, record: logging.LogRecord) -> None:
        # librdkafka's lines look like "FAIL [rdkafka#producer-1] [thrd:...]: host:port/bootstrap: Connect to ...
        # failed: Connection refused (after 0ms in state CONNECT)"; the part after the last "]: " says it.
        self.message = record.getMessage().rsplit("]: ", 1)[-1]


_last_problem = _LastProblem()


def log_file(settings: Settings) -> Path:
    return Path(settings.log_dir or default_log_dir()) / LOG_FILE


def logger(settings: Settings) -> logging.Logger:
    """The logger librdkafka writes to: a file under the log folder, never the terminal (no propagation)."""
    with _lock:
        log = logging.getLogger(LOGGER)
        path = log_file(settings)
        current = [h for h in log.handlers if isinstance(h, logging.FileHandler)]
        if current and current[0].baseFilename == str(path.resolve()):
            return log
        for handler in current:
            log.removeHandler(handler)
            handler.close()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path, encoding="utf-8", delay=True)
        except OSError as exc:
            if os.environ.get(LOG_DIR, "").strip():
                raise ConfigError(LOG_DIR, f"cannot write {path}: {exc.strerror}") from None
            # The default folder may be read-only (a container without a home): the temp folder will do.
            fallback = Path(tempfile.gettempdir()) / f"eosbatch-logs-{os.getuid()}" / LOG_FILE
            fallback.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(fallback, encoding="utf-8", delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        if _last_problem not in log.handlers:
            log.addHandler(_last_problem)
        log.setLevel(logging.INFO)
        log.propagate = False  # the root logger may print to the terminal (Airflow, pytest): not this one
        return log


def config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """librdkafka settings for a client: ours, then the user's EOSBATCH_KAFKA_CONFIG, then the caller's."""
    connect_ms = int(settings.connect_timeout_s * 1000)
    return {"socket.connection.setup.timeout.ms": connect_ms, **settings.kafka(**overrides),
            "logger": logger(settings)}


def reach(settings: Settings) -> None:
    """Check once per process, within the connect timeout, that a broker of the bootstrap list answers.

    Later calls return at once: this is about a wrong or unreachable address at the start of a command;
    a broker lost later fails that operation (its own timeout), mapped to a transient error as well."""
    if settings.kafka_bootstrap in _reached:
        return
    timeout = settings.connect_timeout_s
    refused: list[KafkaError] = []  # wrong credentials: librdkafka says so at once, then retries until the timeout

    def on_error(error: KafkaError) -> None:
        if error.code() in AUTHENTICATION:
            refused.append(error)

    client = _make(AdminClient, config(settings, error_cb=on_error))
    _last_problem.message = ""
    try:
        answer = client.describe_cluster(request_timeout=timeout)
        deadline = time.monotonic() + timeout + 1
        while not answer.done() and not refused and time.monotonic() < deadline:
            client.poll(0.1)
        if refused:
            raise KafkaAccessDenied(f"kafka at {settings.kafka_bootstrap}: authentication failed "
                                    f"({describe(refused[0])}); check sasl.username and sasl.password in "
                                    f"{KAFKA_CONFIG}")
        answer.result(timeout=max(0.0, deadline - time.monotonic()))
    except (KafkaException, TimeoutError) as exc:
        client.poll(0)  # hands librdkafka's queued log lines (the reason) to the logger
        error = error_of(exc)
        silent = isinstance(exc, TimeoutError) or (error is not None and error.code() == KafkaError._TIMED_OUT)
        why = _last_problem.message or ("no broker answered" if silent else describe(error, exc))
        raise KafkaUnavailable(f"cannot reach Kafka at {settings.kafka_bootstrap} within {timeout:g} s: {why} "
                               f"(EOSBATCH_KAFKA_BOOTSTRAP; librdkafka's log: {log_file(settings)})") from None
    finally:
        client.poll(0)
    _reached.add(settings.kafka_bootstrap)


def _make(kind: Any, conf: dict[str, Any]) -> Any:
    try:
        return kind(conf)
    except KafkaException as exc:  # librdkafka refused a setting: the user's, since ours are fixed
        raise ConfigError(KAFKA_CONFIG, describe(error_of(exc), exc)) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(KAFKA_CONFIG, str(exc)) from None


def producer(settings: Settings, **overrides: Any) -> Producer:
    reach(settings)
    made: Producer = _make(Producer, config(settings, **overrides))
    return made


def consumer(settings: Settings, **overrides: Any) -> Consumer:
    reach(settings)
    made: Consumer = _make(Consumer, config(settings, **overrides))
    return made


def kept_key(settings: Settings, *what: object) -> tuple[object, ...]:
    """The key of a client kept for this process: its pid (a forked child never uses its parent's), the
    broker and the user's settings, and what else tells two kept clients apart."""
    return (os.getpid(), settings.kafka_bootstrap, repr(sorted(settings.kafka_config.items())), *what)


def admin(settings: Settings, **overrides: Any) -> Admin:
    """An admin client; the one without overrides is kept for the rest of the process (per pid: a forked
    child makes its own). A runner asks for metadata a few times per batch, and a new librdkafka client
    costs its threads and a connection each time; a client reconnects by itself after a broker restart."""
    key = kept_key(settings, settings.connect_timeout_s)
    if not overrides:
        with _lock:
            kept = _admins.get(key)
        if kept is not None:
            return kept
    reach(settings)
    made: Admin = _make(Admin, config(settings, **overrides))
    made.bootstrap = settings.kafka_bootstrap
    if not overrides:
        with _lock:
            made = _admins.setdefault(key, made)
    return made
