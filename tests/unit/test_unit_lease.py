"""Lane leases, the pure decisions (eosbatch.protocol.lease): who may bump a lane's epoch now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from eosbatch.protocol.lease import (
    Lease,
    airflow_owner,
    cli_owner,
    decide,
    heartbeat_interval,
    holder_gone,
    parse_cli_owner,
    remaining,
    still_mine,
    superseded,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
ME = cli_owner("host-a", 100, "aaaa")
OTHER = cli_owner("host-a", 200, "bbbb")
SOON, PAST = NOW + timedelta(seconds=30), NOW - timedelta(seconds=1)


@pytest.mark.parametrize(("lease", "expected"), [
    (None, "take"),                          # the lane never had a lease
    (Lease(None, None), "take"),             # released
    (Lease(None, SOON), "take"),             # released (an expiry left behind means nothing)
    (Lease(ME, SOON), "renew"),
    (Lease(ME, PAST), "renew"),              # mine, expired, nobody took it: nothing written by another
    (Lease(OTHER, SOON), "busy"),
    (Lease(OTHER, NOW), "take"),             # expires exactly now: expired
    (Lease(OTHER, PAST), "take"),            # the holder froze or died
    (Lease(OTHER, None), "take"),            # a row without an expiry cannot block for ever
])
def test_decide(lease, expected) -> None:
    assert decide(lease, ME, NOW) == expected


def test_a_holder_known_to_be_gone_is_taken_over_before_its_expiry() -> None:
    assert decide(Lease(OTHER, SOON), ME, NOW, holder_gone=True) == "take"
    assert decide(Lease(ME, SOON), ME, NOW, holder_gone=True) == "renew"


def test_two_runners_never_both_hold_an_unexpired_lane() -> None:
    # whoever decides second, while the first's lease runs, is busy: no epoch ping-pong
    first = decide(None, ME, NOW)
    assert first == "take"
    assert decide(Lease(ME, SOON), OTHER, NOW) == "busy"
    assert decide(Lease(OTHER, SOON), ME, NOW) == "busy"


@pytest.mark.parametrize(("lease", "mine"), [
    (Lease(ME, SOON), True), (Lease(ME, PAST), True),  # renewing an expired lease nobody took is fine
    (Lease(OTHER, SOON), False), (Lease(OTHER, PAST), False), (Lease(None, None), False), (None, False),
])
def test_a_renewal_never_takes_the_lane(lease, mine) -> None:
    assert still_mine(lease, ME) is mine


def test_owner_names() -> None:
    assert parse_cli_owner(cli_owner("h1", 42, "x")) == ("h1", 42)
    assert parse_cli_owner(airflow_owner("eosbatch__p", "manual__2026-01-01T00:00:00+00:00")) is None
    assert parse_cli_owner(None) is None
    for bad in ("cli:", "cli:h1", "cli:h1:x:y", "cli::1:x", "h1:1:x"):
        assert parse_cli_owner(bad) is None, bad
    # one DAG run, one owner; two runs of one DAG, two owners
    assert airflow_owner("d", "r1") == airflow_owner("d", "r1") != airflow_owner("d", "r2")


@pytest.mark.parametrize(("owner", "alive", "gone"), [
    (cli_owner("host-a", 200, "b"), False, True),   # same host, its pid does not exist: gone
    (cli_owner("host-a", 200, "b"), True, False),   # its pid exists (maybe reused): wait for the expiry
    (cli_owner("host-a", 200, "b"), None, False),   # not asked
    (cli_owner("host-b", 200, "b"), False, False),  # another host's pid says nothing here
    (cli_owner("host-a", 100, "b"), False, False),  # my own pid: a runner of this process, not gone
    (airflow_owner("d", "r"), False, False),        # a DAG run has no pid
    (None, False, False),
])
def test_holder_gone(owner, alive, gone) -> None:
    assert holder_gone(owner, "host-a", 100, alive) is gone


def test_timing_helpers() -> None:
    assert heartbeat_interval(60) == 20
    assert remaining(Lease(OTHER, SOON), NOW) == timedelta(seconds=30)
    assert remaining(Lease(OTHER, PAST), NOW) == timedelta(0)


def test_an_earlier_run_of_my_own_dag_is_superseded() -> None:
    run_1, run_2 = airflow_owner("eosbatch__p", "scheduled__2026-01-01T00:00:00+00:00"), airflow_owner(
        "eosbatch__p", "manual__2026-01-01T00:05:00+00:00")
    assert superseded(run_1, run_2)  # one run at a time: run 1 has ended
    assert not superseded(run_2, run_2)
    assert not superseded(airflow_owner("eosbatch__q", "r"), run_2)  # another DAG: wait for its expiry
    assert not superseded(ME, run_2) and not superseded(run_1, ME) and not superseded(None, run_2)
    assert decide(Lease(run_1, SOON), run_2, NOW, holder_gone=superseded(run_1, run_2)) == "take"
