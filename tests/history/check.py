"""`python -m tests.history.check --pipeline P --output TOPIC [--sink TABLE --key K ...]`: collect the history of a
pipeline on the stack the environment names (EOSBATCH_KAFKA_BOOTSTRAP, EOSBATCH_DATABASE_URL), print its
anomalies, exit 1 if there is any (0: none). `run` is the same as a function."""

from __future__ import annotations

import argparse
import sys

from tests.history.checker import check
from tests.history.collect import SinkSpec, Where, collect
from tests.history.history import Anomaly


def run(pipeline: str, output: str | None, sink: SinkSpec | None = None, where: Where | None = None,
        caught_up: bool = False) -> list[Anomaly]:
    """The anomalies of `pipeline`'s history on a real stack (JSON output values)."""
    history = collect(pipeline, output, sink, where, inputs=caught_up)
    return check(history, caught_up=caught_up)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.history.check", description=__doc__)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--output", help="the output topic (JSON values); none: the output is not checked")
    parser.add_argument("--sink", help="the sink table ([schema.]table), to compare with the output")
    parser.add_argument("--key", default="", help="the sink's key columns, comma-separated")
    parser.add_argument("--mode", default="replace", choices=["replace", "accumulate", "append"])
    parser.add_argument("--accumulate", default="", help="accumulate: the columns the deltas add up to")
    parser.add_argument("--caught-up", action="store_true", help="every input record must be below its next offset")
    args = parser.parse_args(argv)
    sink = None
    if args.sink:
        sink = SinkSpec(args.sink, tuple(k for k in args.key.split(",") if k), args.mode,
                        tuple(c for c in args.accumulate.split(",") if c))
    anomalies = run(args.pipeline, args.output, sink, caught_up=args.caught_up)
    for anomaly in anomalies:
        print(anomaly.line())
    print(f"{args.pipeline}: {len(anomalies)} anomalies", file=sys.stderr)
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
