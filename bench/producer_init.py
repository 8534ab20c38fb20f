"""The cost of a new transactional producer and its init_transactions, as a batch pays it when the runner's
producer is not kept (eosbatch.kafka.publisher.publishing): N rounds on one transactional id, each a new
producer, init_transactions, then close.

    python -m bench.producer_init [--rounds 50]

Uses EOSBATCH_KAFKA_BOOTSTRAP (eval "$(eosbatch stack env)").
"""

from __future__ import annotations

import argparse
import statistics
import time

from eosbatch import config
from eosbatch.kafka.publisher import TransactionalPublisher


def measure(rounds: int, transactional_id: str = "eosbatch.bench.producer_init") -> list[float]:
    settings = config.load()
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        publisher = TransactionalPublisher(settings, transactional_id)
        publisher.init()
        seconds.append(time.perf_counter() - started)
        publisher.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    seconds = sorted(measure(parser.parse_args().rounds))
    p95 = seconds[max(0, round(0.95 * len(seconds)) - 1)]
    print(f"new producer + init_transactions, {len(seconds)} rounds: median {statistics.median(seconds) * 1000:.0f} "
          f"ms, p95 {p95 * 1000:.0f} ms, max {seconds[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
