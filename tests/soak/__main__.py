"""`python -m tests.soak --minutes 30`: the soak on the embedded stack (the EOSBATCH_* settings of `eval "$(eosbatch
stack up)"`, or that stack started here). Exit 0 when the floor held, the pipeline caught up and no judge found an
anomaly."""

from __future__ import annotations

import argparse
import sys

from tests.soak.report import render
from tests.soak.soak import Options, run


def main(argv: list[str] | None = None) -> int:
    defaults = Options()
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="how long faults are injected")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="input records a second")
    parser.add_argument("--fault-every", type=float, default=defaults.fault_every,
                        help="mean seconds between two faults")
    parser.add_argument("--faults", default="", help="comma-separated kinds to draw from (default: all available)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="0: a random seed, printed")
    parser.add_argument("--batch", type=int, default=defaults.batch, help="max records per batch")
    parser.add_argument("--batches-per-run", type=int, default=defaults.batches_per_run,
                        help="batches each `eosbatch run` process does")
    parser.add_argument("--sample-every", type=float, default=defaults.sample_every,
                        help="seconds between memory samples")
    parser.add_argument("--floor", type=float, default=defaults.floor,
                        help="fraction of the records produced under faults that must be committed by their end")
    parser.add_argument("--drain-minutes", type=float, default=defaults.drain_minutes)
    parser.add_argument("--out", default="", help="folder of the logs, CSVs and report")
    parser.add_argument("--hang-seconds", type=float, default=defaults.hang_seconds,
                        help="a runner running longer is stuck: its Python stack is dumped (gdb) and it is killed")
    args = parser.parse_args(argv)
    options = Options(minutes=args.minutes, rate=args.rate, fault_every=args.fault_every,
                      faults=tuple(k for k in args.faults.split(",") if k), seed=args.seed, batch=args.batch,
                      batches_per_run=args.batches_per_run, sample_every=args.sample_every, floor=args.floor,
                      drain_minutes=args.drain_minutes, hang_seconds=args.hang_seconds, out=args.out)
    figures = run(options)
    print(render(figures))
    return 0 if figures.passed else 1


if __name__ == "__main__":
    sys.exit(main())
