"""Clients a runner keeps between batches (Kafka admin, marker consumers, producers, ledger connections)
belong to the process that made them: a forked child starts with none and never closes its parent's."""

from __future__ import annotations

import os

import pytest

from eosbatch.kafka import clients, marker, publisher
from eosbatch.ledger import connection

pytestmark = pytest.mark.unit


class _Client:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_a_forked_child_keeps_none_of_its_parents_clients_and_closes_none() -> None:
    kept = {"admin": _Client(), "marker": _Client(), "publisher": _Client(), "connection": _Client()}
    clients._admins[("parent",)] = kept["admin"]  # type: ignore[assignment]
    marker._kept[("parent",)] = kept["marker"]  # type: ignore[assignment]
    publisher._kept[("parent",)] = kept["publisher"]  # type: ignore[assignment]
    connection._idle[(os.getpid(), "dsn")] = [kept["connection"]]  # type: ignore[list-item]
    try:
        child = os.fork()
        if child == 0:  # the child: nothing kept, nothing closed
            ok = not (clients._admins or marker._kept or publisher._kept or connection._idle) and \
                not any(c.closed for c in kept.values())
            os._exit(0 if ok else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert clients._admins[("parent",)] is kept["admin"]  # the parent's are untouched
        assert marker._kept[("parent",)] is kept["marker"] and publisher._kept[("parent",)] is kept["publisher"]
    finally:
        clients._admins.pop(("parent",), None)
        marker._kept.pop(("parent",), None)
        publisher._kept.pop(("parent",), None)
        connection._idle.pop((os.getpid(), "dsn"), None)
