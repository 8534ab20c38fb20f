"""The first batch after the Spark Connect server starts, against the peer: with and without the warm-up that
`eosbatch stack up` runs (eosbatch.engine.warm_up).

    .venv/bin/python -m bench.first_batch [--records 300000] [--partitions 4] [--rounds 1]
                                          [--warm-up-records 300000] [--warm-up-rounds 3]

The peer (bench/peer.py, a spark-submit application: it pays its JVM at every run, which the long-lived engine
exists to avoid) runs once per round over the same topic. Then, per round, the bench's own stack's Connect
server is killed and its supervisor starts it again, as a deploy or a crash would; once "cold" (the batch is the
first thing the new server runs) and once "warmed" (the warm-up runs first, as `stack up` runs it). Each
eosbatch batch is one `running.run` of the whole topic (plan..publish, exactly-once), from a client session of
its own. Same stack selection as bench.run (EOSBATCH_HOME and the ports).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import time

from bench import PIPELINES_ENV
from bench.harness import TRANSACTION_SIZE, Run, _define, _padding, _settings, _timed
from bench.peer_submit import run_peer
from bench.report import _table
from bench.rounds import _eosbatch_round
from eosbatch import config, stack
from eosbatch.config import Settings
from eosbatch.engine import connect, warm_up
from examples.orders.generate import ensure_topics, generate

MODES = ("cold", "warmed")


def restart_engine(settings: Settings, timeout: float = 120.0) -> float:
    """SIGKILL the stack's Connect server and wait until its supervisor has it listening again; the seconds."""
    started = time.monotonic()
    killed = stack.status().spark_connect_pid
    if killed is None:
        raise RuntimeError("the stack's Spark Connect server is not running (eosbatch stack up)")
    if stack.status().spark_connect_supervisor_pid is None:
        raise RuntimeError("the stack's Spark Connect server runs without its supervisor: stack down, stack up")
    os.kill(killed, signal.SIGKILL)
    connect.forget(settings)  # its session died with it
    deadline = time.monotonic() + timeout
    while stack.status().spark_connect_pid in (None, killed):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the supervisor did not restart the Spark Connect server within {timeout:.0f}s")
        time.sleep(0.2)
    stack.wait_for_engine(timeout)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.first_batch", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warm-up-records", type=int, default=warm_up.DEFAULT_RECORDS)
    parser.add_argument("--warm-up-rounds", type=int, default=warm_up.DEFAULT_ROUNDS)
    args = parser.parse_args(argv)
    if args.records < 1 or args.rounds < 1 or args.warm_up_records < 1 or args.warm_up_rounds < 1:
        parser.error("--records, --rounds, --warm-up-records and --warm-up-rounds must be at least 1")
    settings = _settings()
    prefix = f"bench_first_{int(time.time())}"
    runs = {(mode, i): Run(f"{prefix}_{mode}{i}", args.records) for mode in MODES for i in range(args.rounds)}
    peer = Run(f"{prefix}_peer", args.records)
    _define([*runs.values(), peer], args.partitions)
    specs = json.loads(os.environ[PIPELINES_ENV])
    for spec in specs:  # every run reads the peer's topic
        spec["topic"] = peer.topic
    os.environ[PIPELINES_ENV] = json.dumps(specs)
    generate(settings, topic=peer.topic, records=args.records, partitions=args.partitions,
             transaction_size=TRANSACTION_SIZE, abort_every=0, malformed_every=0, value_padding=_padding())
    rows, ratios = [], {mode: [] for mode in MODES}
    for i in range(args.rounds):
        out = f"{peer.name}{i}_out"
        ensure_topics(settings, {out: args.partitions})
        (result, wall), _ = _timed(run_peer, settings, ["once", peer.topic, out, f"{peer.name}{i}",
                                                        str(stack.home() / "bench-checkpoints" / f"{peer.name}{i}")])
        for mode in MODES:
            restarted = restart_engine(settings)
            warmed = sum(r.seconds for r in warm_up.warm(settings, args.warm_up_records, args.warm_up_rounds,
                                      log=lambda line: print(line, flush=True))) if mode == "warmed" else 0.0
            connect.forget(settings)  # the batch opens its own session, as a new runner process does
            ours, _ = _eosbatch_round(settings, runs[(mode, i)], args.partitions, overlap=False,
                                      early=config.load().early_publish)
            ratios[mode].append(wall / ours)
            rows.append([f"round {i + 1}", mode, f"{restarted:.1f}", f"{warmed:.1f}" if warmed else "-",
                         f"{ours:.1f}", f"{wall:.1f}", f"{result['triggers_s'][0]:.1f}", f"{wall / ours:.2f}"])
            print(f"round {i + 1} {mode}: eosbatch {ours:.1f} s, peer {wall:.1f} s", flush=True)
    print(f"\nthe first batch of {args.records:,} records over {args.partitions} partitions after the Connect "
          "server (re)starts, against the peer (spark-submit, same topic):")
    print(_table(["", "server", "restart s", "warm-up s", "eosbatch s", "peer s", "peer trigger s",
                  "ratio (peer s / eosbatch s)"], rows))
    print("median ratio: " + ", ".join(f"{mode} {statistics.median(r):.2f}" for mode, r in ratios.items()))


if __name__ == "__main__":
    main()
