"""Per-step throughput of one eosbatch batch, side by side with this machine's own ceilings.

    python -m bench.run [--records N] [--partitions 4] [--rss-check]

Generates N JSON orders of ~200 B into a fresh topic (committed Kafka transactions, none aborted, none
malformed, so every step sees all N records; 1 in 10 orders repeats an earlier order id), runs them as ONE
batch through plan -> process -> commit -> publish, timing each step, then measures on the same stack a
PostgreSQL COPY of N similar rows and a plain (non-transactional) produce of N records of the same size.
With --rss-check, whole runs of 100k and 1M records (--rss-sizes) run each in a spawned process of its own:
its peak RSS (VmHWM), and the Spark Connect server's heap in use after a full GC, show that memory stays
flat as the batch grows (Spark streams the records, the outbox is streamed to Kafka).
With --peer-rounds R (default 2), eosbatch and a Structured Streaming peer (bench/peer.py) run alternately
on the same topic, and each round also runs eosbatch as K batches with overlapped steps (--overlap K[,K...],
default 2: `eosbatch run --overlap`); --tiny measures the fixed cost per micro-batch instead (CLI, one run,
Airflow, peer); --sizes N[,N...] runs only the records sweep (bench/sweep.py): eosbatch and the peer at each
record count, plotted (records/s against record count) into --results as JSON and PNG.

Uses EOSBATCH_DATABASE_URL / EOSBATCH_KAFKA_BOOTSTRAP when both are set, else brings up the embedded stack
(EOSBATCH_HOME, EOSBATCH_KAFKA_PORT, EOSBATCH_POSTGRES_PORT and EOSBATCH_SPARK_CONNECT_PORT choose which one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

from bench import PIPELINES_ENV, plots
from bench.ceilings import copy_ceilings, produce_ceiling
from bench.harness import (
    RECORD_BYTES,
    TRANSACTION_SIZE,
    WARM_UP_RECORDS,
    WARM_UP_RUNS,
    Run,
    _cleanup,
    _define,
    _padding,
    _settings,
)
from bench.one_batch import footprint, run_pipeline, warm_up
from bench.report import report
from bench.rounds import Variant, compare_with_peer
from bench.tiny import tiny_batches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rss-check", action="store_true",
                        help="run each of --rss-sizes in a process of its own: its peak RSS, the engine's heap")
    parser.add_argument("--rss-sizes", default="100000,1000000", help="comma-separated (default %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' topics and sink tables")
    parser.add_argument("--peer-rounds", type=int, default=2,
                        help="rounds of eosbatch vs the Structured Streaming peer on one topic (0: none)")
    parser.add_argument("--warm-up", type=int, default=WARM_UP_RECORDS, metavar="N",
                        help="records of each of the engine's warm-up runs, not reported (default %(default)s)")
    parser.add_argument("--warm-up-runs", type=int, default=WARM_UP_RUNS, metavar="R",
                        help="warm-up runs over one topic (default %(default)s: a server's JIT needs a few million "
                             "records to reach its steady state; 0: none, to measure a server as it is)")
    parser.add_argument("--overlap", default="2", metavar="K[,K...]",
                        help="each peer round also runs eosbatch as K batches with overlapped steps, for each K "
                             "(default %(default)s; 0: none)")
    parser.add_argument("--split", action=argparse.BooleanOptionalAction, default=True,
                        help="each peer round also runs eosbatch as one batch committed, then published "
                             "(EOSBATCH_EARLY_PUBLISH=0; the default is early publish)")
    parser.add_argument("--tiny", action="store_true",
                        help="only the fixed cost per micro-batch: 10 batches of 100 records, eosbatch vs peer")
    parser.add_argument("--sizes", default="", metavar="N[,N...]",
                        help="only the records sweep (bench/sweep.py): eosbatch and the peer at each record count, "
                             "--peer-rounds rounds each (0: eosbatch alone); plotted into --results")
    parser.add_argument("--results", default=str(plots.RESULTS), help="where figures go (default %(default)s)")
    args = parser.parse_args(argv)
    if args.warm_up_runs < 0 or (args.warm_up_runs and args.warm_up <= 0):
        parser.error("--warm-up-runs must be 0 or more, and --warm-up more than 0 records")

    settings = _settings()
    prefix = time.strftime("bench_%Y%m%d_%H%M%S")
    if args.sizes:
        from bench import sweep
        sweep.main(settings, args, prefix)
        return
    if args.tiny:
        tiny, through = Run(f"{prefix}_tiny", 100), Run(f"{prefix}_tinyaf", 100)
        _define([tiny, through], 1)
        os.environ[PIPELINES_ENV] = json.dumps([{"name": r.name, "topic": r.topic, "output": r.output,
                                                 "max_records": 101}  # 100 records + 1 commit marker
                                                for r in (tiny, through)])
        print(tiny_batches(settings, tiny.name, f"{prefix}_tinypeer", through.name, 10, 100))
        if not args.keep:
            _cleanup(settings, prefix)
        return
    sizes = [args.records]
    if args.rss_check:
        sizes += [int(n) for n in args.rss_sizes.split(",")]
    runs = [Run(f"{prefix}_{i}", n) for i, n in enumerate(sizes)]
    peers = [Run(f"{prefix}_p{i}", args.records) for i in range(args.peer_rounds)]
    splits = [int(k) for k in args.overlap.split(",") if int(k) > 0]
    lapped = {k: [Run(f"{prefix}_o{k}x{i}", args.records) for i in range(args.peer_rounds)] for k in splits}
    variants = [Variant(f"{k} batches with their steps overlapped (EOSBATCH_OVERLAP)", f"overlapped x{k}", rs,
                        True, True) for k, rs in lapped.items()]
    if args.split:
        variants.append(Variant("one batch committed, then published (EOSBATCH_EARLY_PUBLISH=0)", "split",
                                [Run(f"{prefix}_e{i}", args.records) for i in range(args.peer_rounds)], False, False))
    warm = [Run(f"{prefix}_warm{i}", args.warm_up) for i in range(args.warm_up_runs)]
    _define(runs + peers + [r for v in variants for r in v.runs] + warm, args.partitions)
    # The warm-up runs read one topic; every peer round, and its variants' runs, the first round's topic, an
    # overlapped run's batches being 1/K of it.
    split = {r.name: k for k, rs in lapped.items() for r in rs}
    topics = {**{r.name: warm[0].topic for r in warm},
              **{r.name: peers[0].topic for r in [*peers, *(r for v in variants for r in v.runs)]}}
    specs = json.loads(os.environ[PIPELINES_ENV])
    for spec in specs:
        spec["topic"] = topics.get(spec["name"], spec["topic"])
        if spec["name"] in split:
            spec["max_records"] = math.ceil(spec["max_records"] / split[spec["name"]])
    os.environ[PIPELINES_ENV] = json.dumps(specs)
    padding = _padding()
    print(f"{args.records:,} records of ~{RECORD_BYTES} B over {args.partitions} partitions in one batch "
          f"(input in transactions of {TRANSACTION_SIZE:,}, none aborted, none malformed)", flush=True)

    warm_up(settings, warm, args.partitions, padding)
    generated, timings = run_pipeline(settings, runs[0], args.partitions, padding)
    copies = copy_ceilings(settings, args.records, args.partitions, padding, prefix)
    produce = produce_ceiling(settings, args.records, args.partitions, padding, f"{prefix}_ceiling")
    footprints = {}
    for run in runs[1:]:
        print(f"rss check: a run of {run.records:,} records in a process of its own", flush=True)
        footprints[run.records] = footprint(settings, run, args.partitions, padding)
    print("\n" + report(generated, timings, copies, produce, footprints))
    if peers:
        print("\n" + compare_with_peer(settings, peers, args.partitions, padding, variants), flush=True)
    if not args.keep:
        _cleanup(settings, prefix)


if __name__ == "__main__":
    main()
