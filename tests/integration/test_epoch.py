"""A lane's producer epoch, bumped by init_transactions on its real transactional id and read from outside with
Kafka's Admin API, then batches exactly-once: the code of `python -m tests.epoch_rollover` (the rollover itself,
~32,760 calls and minutes, runs by hand: docs/how-to/epoch-rollover.md), with a bump of a few hundred. Kafka
cannot start an id near its last epoch, so the crossing's rule is checked here only as the pure next_epoch."""

from __future__ import annotations

import pytest

from tests.epoch.rollover import EXHAUSTED, cross, next_epoch

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BUMPS = 300


def test_the_coordinators_rule_a_new_producer_id_after_the_last_epoch():
    assert next_epoch(7, 0) == (7, 1)
    assert next_epoch(7, EXHAUSTED - 1) == (7, EXHAUSTED)
    assert next_epoch(7, EXHAUSTED) == (None, 0)
    assert next_epoch(7, EXHAUSTED + 1) == (None, 0)  # 32767: reached only by fencing an open transaction


def test_a_lane_whose_epoch_was_bumped_by_init_transactions_runs_on_exactly_once(settings, unique):
    crossing = cross(settings, unique, stop_at=BUMPS, records=1200, batch=400, verify=False, log=lambda _: None)
    print("\n".join(crossing.lines()))
    first, bumped, run = (step.seen for step in crossing.steps)
    assert crossing.transactional_id == f"eosbatch.crash_totals_{unique}"
    assert (bumped.producer_id, bumped.epoch) == (first.producer_id, BUMPS)
    assert (run.producer_id, run.epoch) == (first.producer_id, BUMPS + 1)
    assert crossing.bumped.calls == BUMPS - first.epoch
