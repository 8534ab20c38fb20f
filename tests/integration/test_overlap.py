"""The overlapped run (eosbatch.running.overlapped): batch N+1 is planned and processed while N commits and N-1
publishes. These tests show that the steps really overlapped (from the runner's own log order, checked
against the ledger), that commits and publishes keep plan order, and that a runner killed in the middle of
an overlapped run, with several batches in flight, is recovered exactly-once by the next run. The input
holds aborted transactions, repeated ids and malformed records (tests/scenario.py)."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest

from eosbatch import faults
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

BATCH = 400  # ~2,440 offsets over 3 partitions: 7 batches, so several are in flight at once


def _events(stdout: str) -> list[tuple[str, int]]:
    """(step, batch id) in the order the runner logged them."""
    found = re.findall(r"^batch (\d+): (planned|committed|published|finalized)", stdout, re.MULTILINE)
    return [(step, int(batch)) for batch, step in found]


def _order(events: list[tuple[str, int]], step: str) -> list[int]:
    return [batch for s, batch in events if s == step]


@pytest.mark.parametrize("kind", ["totals", "latest"])
def test_an_overlapped_run_overlaps_its_steps_and_is_exactly_once(settings, unique, kind):
    scenario = Scenario(settings, unique, kind, batch=BATCH)
    done = scenario.run(None, "--overlap")
    assert done.returncode == 0, done.stderr[-3000:]
    scenario.assert_exactly_once()
    # early publish is on by default and does not apply here: the run says so, once
    assert done.stdout.count("not published early (an overlapped run") == 1, done.stdout[-3000:]
    events = _events(done.stdout)
    planned = _order(events, "planned")
    assert len(planned) >= 5, done.stdout[-3000:]
    # commits and publishes in plan order, each batch once
    assert _order(events, "committed") == planned and _order(events, "published") == planned
    assert [b for b, _, state in scenario.batches()] == planned
    assert set(scenario.states()) == {"published"}
    # Overlap, from the log's order: every batch N+1 was planned before N committed, so its process ran
    # beside that commit. (Whether a commit also runs beside the publish before it depends on their
    # lengths: the killed-runner tests below show batches left in several steps at once.)
    position = {event: i for i, event in enumerate(events)}
    assert all(position[("planned", later)] < position[("committed", n)]
               for n, later in pairwise(planned)), done.stdout[-3000:]


# A runner killed with batches in flight: the Nth commit/publish of the run, while the next batch processes
# (or commits); the state each batch is left in is whatever the overlap had reached, so the test checks the
# recovery's outcome, and that the kill really left more than one batch unfinished where it must.
@pytest.mark.parametrize(("fault", "kind", "in_flight"), [
    ("commit.before_commit@2", "totals", 2),     # batch 2's commit dies; batch 3 planned or staged beside it
    ("commit.after_commit@2", "latest", 2),      # batch 2 committed, unheard; batch 3 in flight
    ("publish.mid_produce@2", "totals", 2),      # batch 2's Kafka transaction open; batch 3 committing
    ("plan.after_commit@3", "latest", 2),        # batch 3 planned while batch 2, staged, waits for its commit
])
def test_a_runner_killed_mid_overlap_is_recovered_exactly_once(settings, unique, fault, kind, in_flight):
    scenario = Scenario(settings, unique, kind, batch=BATCH)
    crashed = scenario.run(fault, "--overlap")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-2000:]
    assert "fault injected at" in crashed.stderr
    unfinished = [state for state in scenario.states() if state in ("planned", "staged", "committed")]
    assert len(unfinished) >= in_flight, scenario.batches()
    recovered = scenario.run(None, "--overlap")
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    scenario.assert_exactly_once()
