"""Spark's errors (py4j, PySpark, Spark Connect's gRPC) mapped to eosbatch's terminal and transient errors
where they enter, by class name, so that the mapping needs no Spark import (pure functions)."""

from __future__ import annotations

import importlib
import re

from eosbatch.engine.exceptions import EngineUnavailable, SparkJobFailed, TransformError
from eosbatch.exceptions import ConfigError, EosbatchError

# An analysis error is the pipeline's own (a column that does not exist, a type that does not fit): the same
# code fails again on the same data. PySpark raises the same class names from a classic and a Connect session.
_TERMINAL = frozenset({"AnalysisException", "ParseException", "IllegalArgumentException",
                       "PySparkTypeError", "PySparkValueError", "UnsupportedOperationException"})
# The engine itself is gone: the Connect server does not answer, the JVM behind py4j died.
# (SparkConnectGrpcException is not one: every error of a Connect session derives from it, a task's too.)
_UNAVAILABLE = frozenset({"RetriesExceeded", "Py4JNetworkError", "ConnectionRefusedError", "_InactiveRpcError"})
# OPERATION_NOT_FOUND: the client's retry reached a server restarted (by the stack's supervisor, by
# docker-compose) that never heard of the running operation.
_SESSION_GONE = ("UNAVAILABLE", "Connection refused", "failed to connect", "Socket closed",
                 "INVALID_HANDLE", "SESSION_CLOSED", "NO_ACTIVE_SESSION", "Server is shutting down",
                 "OPERATION_NOT_FOUND")


# An eosbatch error that the engine's Python workers raised (the Python Kafka reader's: eosbatch.kafka's errors,
# a librdkafka setting refused) comes back as the last line of the task's traceback, `module.Class: message`.
_WORKER_ERROR = re.compile(r"^(eosbatch\.kafka\.\w+|eosbatch\.exceptions)\.(\w+): (.+)$", re.MULTILINE)


def raised_in_worker(text: str, where: str) -> EosbatchError | None:
    """The same eosbatch error on the driver (a terminal one stays terminal, a transient one transient), with
    `where` first; None when the text holds none."""
    found = _WORKER_ERROR.findall(text)
    if not found:
        return None
    module, name, message = found[-1]
    kind = getattr(importlib.import_module(module), name, None)
    if not (isinstance(kind, type) and issubclass(kind, EosbatchError)):
        return None
    if issubclass(kind, ConfigError):
        field, _, problem = message.partition(": ")
        return ConfigError(field, problem) if problem else None
    try:
        return kind(f"{where}: {message}")
    except TypeError:  # an error class that takes more than a message
        return None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip()[:500] if text else type(exc).__name__


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def map_spark_error(exc: BaseException, where: str, database_url: str = "") -> EosbatchError:
    """The eosbatch error for an exception that came out of Spark while running `where`; `database_url`
    names the ledger's database in a PostgreSQL error (redacted)."""
    if isinstance(exc, EosbatchError):
        return exc
    if type(exc).__module__.partition(".")[0] == "psycopg2":  # the driver's own ledger or sink statement
        return _postgres_error(exc, database_url)
    names, line = _names(exc), first_line(exc)
    if "PythonException" in names and (raised := raised_in_worker(str(exc), where)) is not None:
        return raised
    if "AVRO_NOT_LOADED" in line:  # a Connect server started without spark-avro (before eosbatch read Avro)
        return TransformError(f"{where}: the Spark engine has no spark-avro jar ({line.split(']')[0]}]): restart "
                              "the Connect server with it (`eosbatch stack down && eosbatch stack up` on the "
                              "embedded stack; elsewhere add org.apache.spark:spark-avro_2.13 at the server's "
                              "Spark version to its --jars)")
    if names & _TERMINAL:
        return TransformError(f"{where}: {type(exc).__name__}: {line}")
    if names & _UNAVAILABLE or any(mark in str(exc) for mark in _SESSION_GONE):
        return EngineUnavailable(f"{where}: the Spark engine is unavailable ({type(exc).__name__}: {line})")
    return SparkJobFailed(f"{where}: {type(exc).__name__}: {line}")


def _postgres_error(exc: BaseException, database_url: str) -> EosbatchError:
    """A psycopg2 error the driver's code left to its caller: the database unreachable or refusing (as the
    ledger maps it), else a statement PostgreSQL refuses (a sink table that cannot take the columns), which
    refuses it again on a retry."""
    from eosbatch import config
    from eosbatch.exceptions import TerminalError
    from eosbatch.ledger.errors import to_eosbatch

    where = config.redact(database_url) if database_url else "the ledger's database"
    return to_eosbatch(exc, where) or TerminalError(f"PostgreSQL at {where}: {first_line(exc)}")
