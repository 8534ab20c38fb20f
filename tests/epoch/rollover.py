"""A pipeline's regular lane driven to its producer-epoch rollover and past it, checked from outside.

Kafka's transaction coordinator (TransactionMetadata.isProducerEpochExhausted) takes an epoch of 32766
(Short.MAX_VALUE - 1) as exhausted: the next InitProducerId gets a new producer id at epoch 0. A fenced open
transaction is aborted at 32767 first. librdkafka has no KIP-890 (transaction version 2), so each
`init_transactions`, not each transaction, bumps the epoch: one per `eosbatch run` (a run keeps its producer
across its batches).

`cross` bumps the lane's real transactional id with confluent_kafka until `runs_before` eosbatch runs remain
before the rollover (or, with a `stop_at` below the edge, until that epoch: the suite's quick check of the same
path), then runs batches one `eosbatch run` at a time, reading the producer id and epoch after each with Kafka's
Admin API, and ends with the independent count and `eosbatch verify`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from eosbatch import faults
from eosbatch.ledger import store
from eosbatch.steps.shared import transactional_id
from tests.epoch import bumping
from tests.epoch.kafka_view import KafkaView, ProducerState
from tests.pipelines.factory import make
from tests.scenario import Scenario

EXHAUSTED = 2**15 - 2  # 32766: the coordinator's last epoch for a producer id


def next_epoch(producer_id: int, epoch: int) -> tuple[int | None, int]:
    """The (producer id, epoch) an InitProducerId hands out after `epoch`; None: a new producer id."""
    return (None, 0) if epoch >= EXHAUSTED else (producer_id, epoch + 1)


class Step(NamedTuple):
    what: str
    seen: ProducerState
    seconds: float


class Crossing(NamedTuple):
    transactional_id: str
    steps: list[Step]
    bumped: bumping.Bumped

    def lines(self) -> list[str]:
        return [f"{s.what:<48} {s.seen}  ({s.seconds:.1f} s)" for s in self.steps]


def _expect(before: ProducerState, after: ProducerState, what: str) -> None:
    producer_id, epoch = next_epoch(before.producer_id, before.epoch)
    if producer_id is None:
        assert after.producer_id != before.producer_id and after.epoch == epoch, (what, before, after)
    else:
        assert (after.producer_id, after.epoch) == (producer_id, epoch), (what, before, after)


def cross(settings, suffix: str, stop_at: int | None = None, runs_before: int = 2, open_at_edge: bool = False,
          records: int = 2400, batch: int = 300, verify: bool = True,
          log: Callable[[str], None] = print) -> Crossing:  # type: ignore[no-untyped-def]
    """`runs_before` single-batch runs between the bump and the one that crosses, then one more and a run until
    caught up; with `open_at_edge` the last run before the crossing dies inside its Kafka transaction
    (EOSBATCH_FAULT=publish.mid_produce), so the crossing's init_transactions must fence and abort it first.
    `stop_at`: bump to this epoch instead, then one run until caught up (no crossing). `verify`: `eosbatch
    verify` after the independent count."""
    scenario = Scenario(settings, suffix, "totals", records=records, batch=batch)
    pipeline = make(suffix, batch)[0]
    assert pipeline.name == scenario.pipeline
    steps: list[Step] = []
    with KafkaView(settings.kafka_bootstrap) as kafka:
        started = time.monotonic()
        done = scenario.run(None, "--max-batches", "1")
        assert done.returncode == 0, done.stderr[-3000:]
        with store.transaction(settings) as cur:
            first = store.get_batch(cur, scenario.batches()[0][0])
        tid = transactional_id(pipeline, first)  # the regular lane's id, as the publish step derives it
        before = kafka.describe(tid)
        steps.append(Step("first run (1 batch)", before, time.monotonic() - started))
        log(f"lane {tid}: {before}")

        target = EXHAUSTED - runs_before if stop_at is None else stop_at
        calls = target - before.epoch
        assert calls > 0, (target, before)
        started = time.monotonic()
        bumped = bumping.bump(settings, tid, calls,
                              progress=lambda n, s: log(f"  {n} init_transactions, {n / s:.0f}/s"))
        seen = kafka.describe(tid)
        steps.append(Step(f"{calls} init_transactions ({bumped.per_second:.0f}/s)", seen, time.monotonic() - started))
        log(f"bumped: {seen}")
        assert (seen.producer_id, seen.epoch) == (before.producer_id, target), (before, seen)

        runs = [] if stop_at is not None else [
            (f"run {n + 1}", "publish.mid_produce" if open_at_edge and n == runs_before - 1 else None)
            for n in range(runs_before + 2)]
        for what, fault in [*runs, ("run until caught up", None)]:
            started = time.monotonic()
            done = scenario.run(fault, *([] if what.endswith("caught up") else ["--max-batches", "1"]))
            assert done.returncode == (faults.EXIT_CODE if fault else 0), (what, done.returncode, done.stderr[-3000:])
            now = kafka.describe(tid)
            what += " (died mid-produce)" if fault else ""
            steps.append(Step(what, now, time.monotonic() - started))
            log(f"{what}: {now}")
            _expect(seen, now, what)
            assert now.state == ("Ongoing" if fault else "CompleteCommit"), (what, now)
            seen = now
    if stop_at is None:
        assert seen.producer_id != before.producer_id, "no rollover"
    scenario.assert_exactly_once()
    if verify:
        verified = scenario.cli("verify", scenario.pipeline)
        assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    log(f"exactly-once: {len(scenario.batches())} batches, {scenario.states().count('published')} published"
        + ("; eosbatch verify: ok" if verify else ""))
    return Crossing(tid, steps, bumped)
