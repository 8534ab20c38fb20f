"""Third-party errors mapped at the boundary (pure): librdkafka's and PostgreSQL's errors become eosbatch's
terminal or transient errors with one line naming the address, the batch or the setting; the CLI prints
that line and exits 2 (terminal), 3 (transient) or 4 (fenced)."""

from __future__ import annotations

import psycopg2
import pytest
from confluent_kafka import KafkaError, KafkaException

from eosbatch import cli
from eosbatch.config import DATABASE_URL, TRANSACTION_TIMEOUT
from eosbatch.engine import submit
from eosbatch.exceptions import ConfigError, Fenced, TerminalError, TransientError
from eosbatch.kafka import errors as kafka_errors
from eosbatch.kafka.exceptions import (
    KafkaAccessDenied,
    KafkaUnavailable,
    PublisherFenced,
    PublishFailed,
    RecordTooLarge,
    TopicMissing,
    TransactionTimeoutTooHigh,
)
from eosbatch.ledger import errors as ledger_errors
from eosbatch.ledger.exceptions import LedgerAccessDenied, LedgerSchemaMissing, LedgerUnavailable, StaleEpoch

pytestmark = pytest.mark.unit

BOOTSTRAP = "broker-1:9092"
WHERE = "postgresql+psycopg2://eos:***@db:5432/eosbatch"


def kafka(code: int, reason: str = "", fatal: bool = False, retriable: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, reason, fatal=fatal, retriable=retriable))


# ---------------------------------------------------------------- Kafka

@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH])
def test_fenced_codes_name_the_owner_and_say_another_runner_owns_it(code: int) -> None:
    error = kafka_errors.to_eosbatch(kafka(code, "fenced by newer instance", fatal=True), "producing to out",
                                     BOOTSTRAP, owner="batch 7 of pipeline 'p'")
    assert isinstance(error, PublisherFenced) and isinstance(error, Fenced) and isinstance(error, TerminalError)
    assert str(error).startswith("batch 7 of pipeline 'p': another runner owns it now")


def test_a_generic_fatal_error_whose_text_says_fenced_is_fenced() -> None:
    reason = ("Fatal error: Local: This instance has been fenced by a newer instance: ProduceRequest failed: "
              "Broker: Producer attempted an operation with an old epoch")
    assert isinstance(kafka_errors.to_eosbatch(kafka(KafkaError._FATAL, reason), "x", BOOTSTRAP), PublisherFenced)


@pytest.mark.parametrize("flagged", [True, False])  # produce() raises _FATAL without the fatal flag
def test_a_generic_fatal_error_without_a_reason_is_a_terminal_publish_failure(flagged: bool) -> None:
    error = kafka_errors.to_eosbatch(kafka(KafkaError._FATAL, "Unable to produce message: Local: Fatal error",
                                           fatal=flagged), "producing", BOOTSTRAP)
    assert type(error) is PublishFailed


def test_transaction_timeout_above_the_broker_maximum_names_both_values() -> None:
    exc = kafka(KafkaError.INVALID_TRANSACTION_TIMEOUT, "Transaction timeout is larger than the maximum",
                fatal=True)
    error = kafka_errors.to_eosbatch(exc, "init_transactions", BOOTSTRAP, transaction_timeout_ms=1_000_000,
                                     broker_max_ms=900_000)
    assert isinstance(error, TransactionTimeoutTooHigh) and isinstance(error, ConfigError)
    assert error.field == TRANSACTION_TIMEOUT
    assert "1000000 ms" in str(error) and "900000 ms" in str(error)
    unknown = kafka_errors.to_eosbatch(exc, "init_transactions", BOOTSTRAP, transaction_timeout_ms=1_000_000)
    assert "the broker's maximum" in str(unknown)


@pytest.mark.parametrize(("code", "kind"), [
    (KafkaError._TRANSPORT, KafkaUnavailable),
    (KafkaError._ALL_BROKERS_DOWN, KafkaUnavailable),
    (KafkaError._TIMED_OUT, KafkaUnavailable),
    (KafkaError._RESOLVE, KafkaUnavailable),
    (KafkaError.NOT_COORDINATOR, KafkaUnavailable),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaAccessDenied),
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaAccessDenied),
    (KafkaError.SASL_AUTHENTICATION_FAILED, KafkaAccessDenied),
    (KafkaError.MSG_SIZE_TOO_LARGE, RecordTooLarge),
    (KafkaError.UNKNOWN_TOPIC_OR_PART, TopicMissing),
    (KafkaError.UNKNOWN_MEMBER_ID, KafkaUnavailable),  # unknown and not fatal: retry, as before
])
def test_codes_map_to_their_kind_and_name_the_address(code: int, kind: type) -> None:
    error = kafka_errors.to_eosbatch(kafka(code, "why"), "listing topics", BOOTSTRAP)
    assert type(error) is kind
    assert BOOTSTRAP in str(error) and "listing topics" in str(error)


def test_terminal_and_transient_split() -> None:
    assert isinstance(kafka_errors.to_eosbatch(kafka(KafkaError._TRANSPORT), "x", BOOTSTRAP), TransientError)
    assert isinstance(kafka_errors.to_eosbatch(kafka(KafkaError.TOPIC_AUTHORIZATION_FAILED), "x", BOOTSTRAP),
                      TerminalError)
    fatal = kafka_errors.to_eosbatch(kafka(KafkaError.UNKNOWN_MEMBER_ID, fatal=True), "x", BOOTSTRAP)
    assert isinstance(fatal, TerminalError)


def test_an_exception_without_a_kafka_error_is_still_mapped() -> None:
    error = kafka_errors.to_eosbatch(KafkaException("no KafkaError inside"), "x", BOOTSTRAP)
    assert isinstance(error, KafkaUnavailable) and "no KafkaError inside" in str(error)


# ---------------------------------------------------------------- PostgreSQL

@pytest.mark.parametrize(("code", "message", "query"), [
    ("42P01", 'relation "eosbatch.pipelines" does not exist', None),
    ("3F000", 'schema "eosbatch" does not exist', None),
    ("42703", "column \"commit_seq\" does not exist", b"SELECT commit_seq FROM eosbatch.batches"),
])
def test_a_missing_ledger_says_run_db_upgrade(code: str, message: str, query: bytes | None) -> None:
    error = ledger_errors.classify(code, message, query, WHERE, lost=False)
    assert isinstance(error, LedgerSchemaMissing) and isinstance(error, TerminalError)
    assert "run `eosbatch db upgrade`" in str(error) and WHERE in str(error)


def test_a_missing_sink_table_or_column_is_left_to_the_sink() -> None:
    assert ledger_errors.classify("42P01", 'relation "public.totals" does not exist', None, WHERE, False) is None
    assert ledger_errors.classify("42703", 'column "x" does not exist', b"SELECT x FROM public.t", WHERE,
                                  False) is None


@pytest.mark.parametrize(("code", "kind"), [
    ("40001", LedgerUnavailable), ("40P01", LedgerUnavailable), ("57P01", LedgerUnavailable),
    ("57P03", LedgerUnavailable), ("08006", LedgerUnavailable), ("53300", LedgerUnavailable),
    ("28P01", LedgerAccessDenied), ("42501", LedgerAccessDenied),
])
def test_database_level_errors_map_to_their_kind(code: str, kind: type) -> None:
    assert type(ledger_errors.classify(code, "why", None, WHERE, lost=False)) is kind


def test_constraint_and_data_errors_are_the_callers_decision() -> None:
    for code in ("23P01", "23505", "22P02", "42601"):
        assert ledger_errors.classify(code, "why", None, WHERE, lost=False) is None


def test_a_lost_connection_without_sqlstate_is_transient() -> None:
    error = ledger_errors.to_eosbatch(psycopg2.OperationalError("server closed the connection unexpectedly"),
                                      WHERE)
    assert isinstance(error, LedgerUnavailable) and "server closed the connection" in str(error)
    assert ledger_errors.to_eosbatch(ValueError("not a database error"), WHERE) is None


@pytest.mark.parametrize(("message", "kind", "says"), [
    ('connection to server at "db" (10.0.0.5), port 5432 failed: Connection refused\n\tIs the server running?',
     LedgerUnavailable, "Connection refused"),
    ('connection to server at "db" (10.0.0.5), port 5432 failed: timeout expired', LedgerUnavailable,
     "no answer within 10 s"),
    ('connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  password authentication failed for '
     'user "eos"', LedgerAccessDenied, "password authentication failed"),
    ('connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  role "nobody" does not exist',
     LedgerAccessDenied, 'role "nobody"'),
    ('connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  database "nope" does not exist',
     ConfigError, 'database "nope" does not exist'),
])
def test_connect_failures_name_the_address(message: str, kind: type, says: str) -> None:
    error = ledger_errors.connect_error(psycopg2.OperationalError(message), WHERE, 10)
    assert type(error) is kind
    assert WHERE in str(error) and says in str(error)
    if isinstance(error, ConfigError):
        assert error.field == DATABASE_URL


def test_schema_problem_by_revision() -> None:
    known = ["0001", "0002", "0003"]
    assert ledger_errors.schema_problem("0003", known) is None
    assert "no eosbatch ledger" in (ledger_errors.schema_problem(None, known) or "")
    older = ledger_errors.schema_problem("0002", known) or ""
    assert "0002" in older and "0003" in older and "eosbatch db upgrade" in older
    newer = ledger_errors.schema_problem("0009", known) or ""
    assert "upgrade eosbatch" in newer and "db upgrade" not in newer


# ---------------------------------------------------------------- the CLI

@pytest.mark.parametrize(("error", "code", "prefix"), [
    (KafkaUnavailable("kafka at b:1: no answer"), cli.EXIT_TRANSIENT, "eosbatch: KafkaUnavailable: "),
    (LedgerSchemaMissing("no ledger: run `eosbatch db upgrade`"), cli.EXIT_TERMINAL, "eosbatch: LedgerSchemaMissing: "),
    (PublisherFenced("batch 7 of pipeline 'p': another runner owns it now"), cli.EXIT_FENCED, "eosbatch: fenced: "),
    (StaleEpoch("batch 7: another runner owns pipeline 'p' now"), cli.EXIT_FENCED, "eosbatch: fenced: "),
])
def test_the_cli_prints_one_line_and_exits_by_kind(error: Exception, code: int, prefix: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli._fail(error) == code  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(prefix)


def test_the_cli_maps_what_escaped_the_boundary(capsys: pytest.CaptureFixture[str]) -> None:
    mapped = cli._third_party(kafka(KafkaError._FENCED, "fenced", fatal=True))
    assert isinstance(mapped, PublisherFenced)
    assert isinstance(cli._third_party(psycopg2.errors.UniqueViolation("duplicate key")), TerminalError)
    assert cli._third_party(ValueError("a bug")) is None  # bugs keep their traceback
    assert cli.EXIT_FENCED not in (cli.EXIT_TERMINAL, cli.EXIT_TRANSIENT, cli.EXIT_VIOLATION, 0)


def test_a_spark_apps_exit_code_keeps_its_kind() -> None:

    assert submit.failure_kind(2) is TerminalError
    assert submit.failure_kind(4) is Fenced  # the Spark driver found its epoch stale: exit 4 at the CLI too
    assert submit.failure_kind(3) is TransientError and submit.failure_kind(1) is TransientError


def _named(name: str, message: str) -> Exception:
    return type(name, (Exception,), {})(message)


def test_spark_errors_map_to_terminal_and_transient_by_kind() -> None:
    from eosbatch.engine.errors import map_spark_error
    from eosbatch.engine.exceptions import EngineUnavailable, SparkJobFailed, TransformError

    assert isinstance(map_spark_error(_named("AnalysisException", "[UNRESOLVED_COLUMN] x"), "process"), TransformError)
    gone = map_spark_error(_named("SparkConnectGrpcException", "<_MultiThreadedRendezvous of RPC that terminated "
                                  "with: status = StatusCode.UNAVAILABLE\nConnection refused>"), "process batch 3")
    assert isinstance(gone, EngineUnavailable) and str(gone).startswith("process batch 3: the Spark engine")
    restarted = _named("PySparkRuntimeError", "[RESPONSE_ALREADY_RECEIVED] OPERATION_NOT_FOUND on the server but "
                       "responses were already received from it.")  # seen when the supervisor restarted the server
    assert isinstance(map_spark_error(restarted, "process batch 3"), EngineUnavailable)
    task = map_spark_error(_named("PythonException", "psycopg2.OperationalError: server closed the connection"), "p")
    assert isinstance(task, SparkJobFailed) and isinstance(task, TransientError)
    ours = Fenced("batch 1: another runner")
    assert map_spark_error(ours, "p") is ours


def test_an_eosbatch_error_raised_in_a_python_worker_keeps_its_class_on_the_driver() -> None:
    """The Python Kafka reader raises eosbatch.kafka's errors in the engine's workers; they come back inside a
    PythonException's traceback."""
    from eosbatch.engine.errors import map_spark_error
    from eosbatch.engine.exceptions import SparkJobFailed
    from eosbatch.kafka.exceptions import KafkaUnavailable, RangeUnreadable, TopicMissing

    def worker(last: str) -> Exception:
        return _named("PythonException", "An exception was thrown from the Python worker.\n[PYTHON_EXCEPTION] "
                      "Traceback (most recent call last):\n  File \"x.py\", line 1, in read\n"
                      + last + "\n SQLSTATE: 38000")

    missing = map_spark_error(worker("eosbatch.kafka.exceptions.TopicMissing: kafka at h:9: topic t: gone"), "batch 3")
    assert isinstance(missing, TopicMissing) and str(missing) == "batch 3: kafka at h:9: topic t: gone"
    gone = map_spark_error(worker("eosbatch.kafka.exceptions.RangeUnreadable: t:0:5-9 is gone"), "p")
    assert isinstance(gone, RangeUnreadable) and isinstance(gone, TerminalError)
    assert isinstance(map_spark_error(worker("eosbatch.kafka.exceptions.KafkaUnavailable: no answer"), "p"),
                      KafkaUnavailable)
    config = map_spark_error(worker("eosbatch.exceptions.ConfigError: EOSBATCH_KAFKA_CONFIG: bad value"), "p")
    assert isinstance(config, ConfigError) and config.field == "EOSBATCH_KAFKA_CONFIG"
    other = map_spark_error(worker("eosbatch.kafka.exceptions.NoSuchError: x"), "p")
    assert isinstance(other, SparkJobFailed)
    assert isinstance(map_spark_error(worker("ValueError: x"), "p"), SparkJobFailed)


def test_a_connect_server_without_spark_avro_is_a_terminal_error_saying_how_to_restart_it() -> None:
    """What a Connect server started before eosbatch read Avro (no spark-avro in its --jars) answers."""
    from eosbatch.engine.errors import map_spark_error
    from eosbatch.engine.exceptions import TransformError

    error = map_spark_error(_named("AnalysisException", "[AVRO_NOT_LOADED_SQL_FUNCTIONS_UNUSABLE] Cannot call the "
                                   "FROM_AVRO SQL function because the Avro data source is not loaded."), "process")
    assert isinstance(error, TransformError)
    assert "spark-avro" in str(error) and "eosbatch stack up" in str(error), error


def test_a_driver_s_psycopg2_error_is_mapped_as_the_ledger_maps_it_else_terminal() -> None:
    """The driver's own statements (the sink and staging tables) meet PostgreSQL directly: a refused
    statement fails the same way again, so it is terminal, not the transient SparkJobFailed."""
    import psycopg2
    import psycopg2.errors

    from eosbatch.engine.errors import map_spark_error
    from eosbatch.ledger.exceptions import LedgerUnavailable

    url = "postgresql+psycopg2://eos:secret@db:5432/x"
    refused = map_spark_error(psycopg2.errors.DuplicateColumn('column "n" of relation "t" already exists'), "p", url)
    assert type(refused) is TerminalError and 'column "n"' in str(refused) and "secret" not in str(refused)
    assert isinstance(map_spark_error(psycopg2.OperationalError("server closed the connection"), "p"),
                      LedgerUnavailable)
