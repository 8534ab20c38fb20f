"""psycopg2's errors mapped to eosbatch's terminal and transient errors, where they enter (pure functions).

Only what says something about the database itself is mapped here: it cannot be reached, refuses this
login, is busy, or lacks the ledger schema. A constraint violation or a data error is the caller's decision
(the commit turns the exclusion constraint's refusal into RangeConflict), so it is left alone (None).
"""

from __future__ import annotations

import psycopg2

from eosbatch.config import DATABASE_URL
from eosbatch.exceptions import ConfigError, EosbatchError
from eosbatch.ledger.exceptions import LedgerAccessDenied, LedgerSchemaMissing, LedgerUnavailable

UPGRADE = "run `eosbatch db upgrade`"

# SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html) by what an operator does next.
_TRANSIENT_CLASSES = ("08", "53", "58")  # connection exception, insufficient resources, system error
_TRANSIENT = frozenset({
    "40001", "40P01",          # serialization failure, deadlock: the same transaction succeeds when run again
    "55P03", "57014",          # lock not available, statement timeout / cancelled
    "57P01", "57P02", "57P03",  # admin/crash shutdown, cannot connect now (starting up, recovering)
})
_DENIED_CLASSES = ("28",)  # invalid authorization specification (bad password, no pg_hba entry)
_DENIED = frozenset({"42501"})  # insufficient privilege
_MISSING_SCHEMA = frozenset({"3F000", "42P01"})  # schema, table does not exist
_MISSING_COLUMN = "42703"
# libpq reports failures to connect without a SQLSTATE: recognise the ones retrying cannot fix.
_LOGIN_REFUSED = ("password authentication failed", "no pg_hba.conf entry", "authentication failed",
                  "password is required")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def _mentions_ledger(message: str, query: bytes | str | None) -> bool:
    """Whether the missing object is the ledger's (schema `eosbatch`), not a user's sink table."""
    if '"eosbatch' in message:  # relation "eosbatch.pipelines", schema "eosbatch"
        return True
    text = query.decode(errors="replace") if isinstance(query, bytes) else (query or "")
    return "eosbatch." in text


def classify(code: str, message: str, query: bytes | str | None, where: str, lost: bool) -> EosbatchError | None:
    """The eosbatch error for SQLSTATE `code` (may be "") with `message` (its first line), raised by `query`,
    from the database at `where` (a redacted URL). `lost`: a connection-level error (OperationalError,
    InterfaceError) that carries no SQLSTATE when libpq lost the connection. None: the caller decides."""
    if code in _MISSING_SCHEMA or code == _MISSING_COLUMN:
        if _mentions_ledger(message, query):
            return LedgerSchemaMissing(f"PostgreSQL at {where} has no eosbatch ledger, or an older one "
                                       f"({message}): {UPGRADE}")
        return None  # a user's sink table: the sink code reports it
    if code.startswith(_DENIED_CLASSES) or code in _DENIED:
        return LedgerAccessDenied(f"PostgreSQL at {where}: access denied ({message}); check the user in "
                                  f"{DATABASE_URL} and its privileges")
    if code.startswith(_TRANSIENT_CLASSES) or code in _TRANSIENT or (lost and not code):
        return LedgerUnavailable(f"PostgreSQL at {where}: {message}")
    return None


def to_eosbatch(exc: BaseException, where: str) -> EosbatchError | None:
    """`classify` for a psycopg2 error; None for anything else or when the caller decides."""
    if not isinstance(exc, psycopg2.Error):
        return None
    query = exc.cursor.query if exc.cursor is not None else None
    lost = isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError))
    return classify(exc.pgcode or "", first_line(exc), query, where, lost)


def connect_error(exc: BaseException, where: str, timeout_s: int) -> EosbatchError:
    """A failure to open a connection: the login, the database name, or the address (then transient)."""
    reason = first_line(exc)
    # libpq's first line is "connection to server at "host" (addr), port N failed: FATAL:  <why>"; the
    # address is named by `where` already, so keep the why.
    why = reason.split(" failed: ", 1)[-1].replace("FATAL:  ", "").strip()
    if any(marker in why for marker in _LOGIN_REFUSED) or (why.startswith('role "') and "does not exist" in why):
        return LedgerAccessDenied(f"PostgreSQL at {where} refused the login: {why}; check the user and password "
                                  f"in {DATABASE_URL}")
    if why.startswith("database \"") and why.endswith("does not exist"):
        return ConfigError(DATABASE_URL, f"{why} at {where}; create it, or point {DATABASE_URL} at another")
    if "timeout expired" in why:
        why = f"no answer within {timeout_s} s"
    return LedgerUnavailable(f"cannot connect to PostgreSQL at {where}: {why}")


def schema_problem(current: str | None, known: list[str]) -> str | None:
    """What is wrong with the ledger at revision `current` for an eosbatch whose migrations are `known`
    (oldest first); None when it is at the newest."""
    if not known or current == known[-1]:
        return None
    if current is None:
        return f"no eosbatch ledger in this database: {UPGRADE}"
    if current in known:
        return f"the ledger is at revision {current}, this eosbatch needs {known[-1]}: {UPGRADE}"
    return (f"the ledger is at revision {current}, which this eosbatch does not know (a newer eosbatch upgraded "
            f"it; this one knows up to {known[-1]}): upgrade eosbatch")
