"""The Connect server's warm-up (`eosbatch stack up --warm-up`, eosbatch.engine.warm_up): it runs a batch's read,
parse and staging paths over a topic of its own on the real server, and writes nothing anywhere else."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from eosbatch.engine import warm_up
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import store

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _well_formed(value: bytes | None) -> bool:
    """What the warm-up's JSON schema takes: an object with the two NOT NULL fields (counted here, apart from
    the code under test)."""
    try:
        parsed = json.loads(value or b"")
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("order_id") is not None and parsed.get("customer_id") is not None


def _database(settings) -> tuple[int, int]:
    """The tables of every schema, and the ledger's batches."""
    with store.transaction(settings) as cur:
        cur.execute("SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'p')")
        tables = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM eosbatch.batches")
        return tables, cur.fetchone()[0]


def test_warm_up_reads_parses_and_encodes_the_records_of_its_ranges_and_writes_nothing(settings):
    ranges = warm_up.ensure_input(settings, 4000)
    held = read_topic(settings, warm_up.TOPIC)
    wanted = {r.partition: range(r.start, r.end) for r in ranges}
    covered = [rec for rec in held if rec.offset in wanted.get(rec.partition, ())]
    expected = sum(1 for rec in covered if _well_formed(rec.value))
    malformed = len(covered) - expected
    assert expected >= 3000 and malformed >= 1  # about 4,000 records over 4 partitions, one in 1,000 malformed
    before = _database(settings)
    lines: list[str] = []
    rounds = warm_up.warm(settings, 4000, 2, log=lines.append)
    assert [r.records for r in rounds] == [expected, expected]  # the malformed ones stopped at the parse
    assert len(lines) == 2 and "warm-up round 2 of 2" in lines[1]
    assert _database(settings) == before


def test_the_warm_up_command_warms_the_server_the_settings_name_and_writes_nothing(settings):
    """`eosbatch warm-up`, for a Connect server of the user's own (the suite's stack stands in for it): the
    same rounds as `stack up --warm-up`, on the server and Kafka of the environment's settings."""
    warm_up.ensure_input(settings, 4000)  # filled by the test above, or here: the database check below is the point
    before = _database(settings)
    done = subprocess.run([sys.executable, "-m", "eosbatch.cli", "warm-up", "--records", "4000", "--rounds", "2"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "warm-up round 2 of 2" in done.stdout and "warmed up: 2 round(s)" in done.stdout, done.stdout
    assert _database(settings) == before
    refused = subprocess.run([sys.executable, "-m", "eosbatch.cli", "warm-up", "--records", "0"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--records" in refused.stderr, refused.stderr


def test_records_are_order_like_json_with_one_malformed_in_a_thousand():
    made = warm_up.records(2000)
    assert len(made) == 2000
    assert sum(not _well_formed(v) for _, v in made) == 2
