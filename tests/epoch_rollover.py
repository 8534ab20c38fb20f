"""A lane past its producer-epoch rollover, exactly-once (issue 37, item 7). Run by hand, not in CI:

    python -m tests.epoch_rollover [--open-at-edge]

On the embedded stack (`eval "$(eosbatch stack up)"` first, or it starts one), it makes a pipeline of
tests/pipelines/crash.py, runs its first batch, bumps its regular lane's producer epoch with ~32,760
`init_transactions` (confluent_kafka, as an `eosbatch run` does once), then crosses the rollover in real
`eosbatch run`s, reading the producer id and epoch after each with Kafka's Admin API, and ends with the
independent count and `eosbatch verify`. With --open-at-edge the run before the crossing dies inside its Kafka
transaction, so the crossing's init_transactions must also fence and abort it. tests/epoch/rollover.py says how;
docs/how-to/epoch-rollover.md has the figures. The suite's tests/integration/test_epoch.py runs the same code
with a bump of a few hundred (Kafka has no way to start an id near its last epoch)."""

from __future__ import annotations

import argparse
import os
import time
import uuid

from eosbatch import config
from eosbatch.ledger import migrate
from tests.epoch.rollover import cross


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.epoch_rollover", description=__doc__.splitlines()[0])
    parser.add_argument("--open-at-edge", action="store_true",
                        help="the run before the crossing dies mid-produce, leaving its transaction open")
    parser.add_argument("--runs-before", type=int, default=2, help="eosbatch runs between the bump and the rollover")
    args = parser.parse_args()
    if not (os.environ.get(config.DATABASE_URL) and os.environ.get(config.KAFKA_BOOTSTRAP)):
        from eosbatch import stack

        os.environ.update(stack.up(log=lambda _: None).env())
    settings = config.load()
    migrate.upgrade(settings.database_url)
    started = time.monotonic()
    crossing = cross(settings, f"epoch{uuid.uuid4().hex[:8]}", runs_before=args.runs_before,
                     open_at_edge=args.open_at_edge)
    took = time.monotonic() - started
    print(f"\ntransactional id {crossing.transactional_id}:")
    print("\n".join(crossing.lines()))
    print(f"init_transactions: {crossing.bumped.calls} in {crossing.bumped.seconds:.1f} s "
          f"({crossing.bumped.per_second:.0f}/s); all: {took:.1f} s")


if __name__ == "__main__":
    main()
