"""PostgreSQL failover, the pure parts: the multi-host URL as SQLAlchemy, libpq and Airflow take it, and the rule
"the ledger never falls behind the output" (eosbatch.protocol.lost)."""

from __future__ import annotations

import json
import types

import pytest

from eosbatch.config import database_hosts, redact, to_libpq_url
from eosbatch.orchestration import assets, connections
from eosbatch.protocol.exceptions import LedgerBehindOutput, ProtocolError
from eosbatch.protocol.lost import describe_lost, lost_ranges
from eosbatch.protocol.ranges import OffsetRange, TopicPartition
from eosbatch.protocol.recovery import MarkerEntry
from eosbatch.stack.replica import multi_host_url

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-Pa55"
BOTH = f"postgresql+psycopg2://eos:{SECRET}@/ledger?host=10.0.0.1:5432&host=10.0.0.2:5433&target_session_attrs=read-write"


def test_the_stack_exports_both_servers_in_sqlalchemy_2_form() -> None:
    assert multi_host_url([15432, 15433]) == ("postgresql+psycopg2://eosbatch@/eosbatch?host=127.0.0.1:15432&"
                                              "host=127.0.0.1:15433&target_session_attrs=read-write")


def test_sqlalchemy_reads_every_host_of_the_multi_host_url() -> None:
    from sqlalchemy.engine import make_url

    url = make_url(BOTH)
    assert url.query["host"] == ("10.0.0.1:5432", "10.0.0.2:5433") and url.database == "ledger"


def test_libpq_gets_the_hosts_in_its_own_form_and_keeps_the_other_parameters() -> None:
    assert to_libpq_url(BOTH) == f"postgresql://eos:{SECRET}@10.0.0.1:5432,10.0.0.2:5433/ledger?" \
                                 "target_session_attrs=read-write"
    assert to_libpq_url("postgresql+psycopg2://eos@h:5/db?sslmode=require") == \
        "postgresql://eos@h:5/db?sslmode=require"  # one host: as before


def test_libpq_parses_the_converted_url_into_host_and_port_lists() -> None:
    import psycopg2.extensions

    params = psycopg2.extensions.parse_dsn(to_libpq_url(BOTH))
    assert (params["host"], params["port"], params["target_session_attrs"]) == \
        ("10.0.0.1,10.0.0.2", "5432,5433", "read-write")


def test_hosts_are_listed_in_order_and_the_password_is_redacted() -> None:
    assert database_hosts(BOTH) == [("10.0.0.1", 5432), ("10.0.0.2", 5433)]
    assert database_hosts("postgresql+psycopg2://eos@db:5433/x") == [("db", 5433)]
    assert SECRET not in redact(BOTH) and "host=10.0.0.2:5433" in redact(BOTH)


def test_the_airflow_connection_round_trips_both_servers() -> None:
    shape = connections.postgres_connection(BOTH)
    assert (shape["host"], shape["port"], json.loads(shape["extra"])["port"]) == ("10.0.0.1,10.0.0.2", 5432,
                                                                                 "5432,5433")
    back = connections.postgres_env(types.SimpleNamespace(**shape))
    assert back.env["EOSBATCH_DATABASE_URL"] == BOTH and back.notes == []


def test_an_airflow_connection_with_more_hosts_than_ports_is_refused() -> None:
    conn = types.SimpleNamespace(conn_type="postgres", host="a,b,c", port=5432, login="eos", password=None,
                                 schema="db", extra=json.dumps({"port": "5432,5433"}))
    with pytest.raises(Exception, match="one port per host"):
        connections.postgres_env(conn)


def test_the_sink_dataset_is_named_by_the_first_server() -> None:
    settings = types.SimpleNamespace(database_url=BOTH)
    pipeline = types.SimpleNamespace(sink=types.SimpleNamespace(schema="public", table="t"))
    assert assets.sink_uri(settings, pipeline) == "postgres://10.0.0.1:5432/ledger/public/t"


A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)


def test_a_marker_within_the_ledger_loses_nothing() -> None:
    marker = {A: MarkerEntry(100, "eosbatch:7"), B: MarkerEntry(None, "")}
    assert lost_ranges(marker, {A: 100, B: 40}) == []
    assert lost_ranges({A: MarkerEntry(90, "")}, {A: 100}) == []  # the ledger ahead: a batch not published yet


def test_a_marker_past_the_ledger_names_the_lost_range_per_partition() -> None:
    marker = {B: MarkerEntry(70, "eosbatch:7"), A: MarkerEntry(130, "eosbatch:7")}
    assert lost_ranges(marker, {A: 100, B: 70}) == [OffsetRange("orders", 0, 100, 130)]


def test_a_partition_the_ledger_does_not_track_is_not_compared() -> None:
    assert lost_ranges({A: MarkerEntry(130, "")}, {}) == []


def test_the_message_names_the_range_the_cause_and_the_way_out() -> None:
    text = describe_lost("spend", "eosbatch.spend", [OffsetRange("orders", 0, 100, 130)])
    assert "orders:0 [100, 130)" in text and "30 offsets" in text
    assert "`eosbatch adopt-published spend`" in text and "eosbatch.spend" in text
    error = LedgerBehindOutput(text, [OffsetRange("orders", 0, 100, 130)])
    assert isinstance(error, ProtocolError) and error.ranges == [OffsetRange("orders", 0, 100, 130)]


@pytest.mark.parametrize(("raw", "mode"), [("", ""), ("0", ""), ("1", "sync"), ("sync", "sync"), ("async", "async")])
def test_the_replica_setting_reads_sync_async_or_none(monkeypatch, raw, mode) -> None:
    from eosbatch import stack

    monkeypatch.setenv(stack.POSTGRES_REPLICA, raw)
    assert stack.replica_wanted() == mode


def test_a_bad_replica_setting_names_the_variable(monkeypatch) -> None:
    from eosbatch import stack
    from eosbatch.exceptions import ConfigError

    monkeypatch.setenv(stack.POSTGRES_REPLICA, "semi")
    with pytest.raises(ConfigError, match="EOSBATCH_POSTGRES_REPLICA"):
        stack.replica_wanted()


def test_stack_up_takes_postgres_replica_with_an_optional_mode() -> None:
    from eosbatch.cli_parser import parser

    assert parser().parse_args(["stack", "up", "--postgres-replica"]).postgres_replica == "sync"
    assert parser().parse_args(["stack", "up", "--postgres-replica", "async"]).postgres_replica == "async"
    assert parser().parse_args(["stack", "up"]).postgres_replica is None
    assert parser().parse_args(["adopt-published", "p", "--yes"]).yes
