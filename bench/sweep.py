"""Records/s against the record count, eosbatch and the Structured Streaming peer side by side
(`python -m bench.run --sizes 10000,100000,300000,1000000`).

For each size N, a fresh topic of N records over `--partitions`; on it, `--peer-rounds` rounds (at least one)
of eosbatch's whole run as one batch (plan..publish, exactly-once, the default path: as bench.run's
side-by-side table runs it) then the peer (bench/peer.py, spark-submitted, its JVM and session start
included, as a scheduled spark-submit pays them). After the engine's warm-up runs (--warm-up-runs,
--warm-up), as bench.run. Prints every round with absolute seconds beside the ratio, and writes the figure
as JSON and PNG (bench/plots.py) into --results.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

from bench import PIPELINES_ENV, plots
from bench.harness import TRANSACTION_SIZE, Run, _cleanup, _define, _padding
from bench.one_batch import warm_up
from bench.peer_submit import run_peer
from bench.report import _table
from bench.rounds import _eosbatch_round
from eosbatch import engine, stack
from eosbatch.config import Settings
from examples.orders.generate import ensure_topics, generate

STEM = "records_per_second"
EOSBATCH, PEER, PEER_TRIGGER = "eosbatch (one batch)", "peer (spark-submit, wall)", "peer (trigger alone)"


class Round(NamedTuple):
    records: int
    eosbatch_s: float
    peer_s: float | None  # None: --peer-rounds 0
    peer_trigger_s: float | None


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(n.replace("_", "")) for n in text.split(",") if n.strip()]
    except ValueError:
        raise SystemExit(f"--sizes: not a comma-separated list of record counts: {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise SystemExit(f"--sizes: record counts must be more than 0: {text!r}")
    return sizes


def one_size(settings: Settings, runs: list[Run], partitions: int, padding: int, peer: bool) -> list[Round]:
    """Rounds of eosbatch then the peer over one topic of `runs[0].records` records (every run reads it)."""
    topic, records = runs[0].topic, runs[0].records
    generate(settings, topic=topic, records=records, partitions=partitions, transaction_size=TRANSACTION_SIZE,
             abort_every=0, malformed_every=0, value_padding=padding)
    rounds = []
    for run in runs:
        ours, _ = _eosbatch_round(settings, run, partitions, overlap=False)
        peer_s = trigger_s = None
        if peer:
            ensure_topics(settings, {f"{run.name}_peer_out": partitions})
            result, peer_s = run_peer(settings, ["once", topic, f"{run.name}_peer_out", f"{run.name}_peer",
                                                 str(stack.home() / "bench-checkpoints" / run.name)])
            trigger_s = result["triggers_s"][0]
        rounds.append(Round(records, ours, peer_s, trigger_s))
        print(f"{records:,} records: eosbatch {ours:.1f} s"
              + (f", peer {peer_s:.1f} s (trigger {trigger_s:.1f} s)" if peer_s is not None else ""), flush=True)
    return rounds


def table(rounds: list[Round]) -> str:
    rows = [[f"{r.records:,}", f"{r.eosbatch_s:.2f}", f"{r.records / r.eosbatch_s:,.0f}",
             *([f"{r.peer_s:.2f}", f"{r.peer_trigger_s:.2f}", f"{r.records / r.peer_s:,.0f}",
                f"{r.peer_s / r.eosbatch_s:.2f}", f"{r.peer_trigger_s / r.eosbatch_s:.2f}"]
               if r.peer_s is not None and r.peer_trigger_s is not None else [""] * 5)]
            for r in rounds]
    return _table(["records", "eosbatch s", "eosbatch rec/s", "peer s", "peer trigger s", "peer rec/s",
                   "ratio (rec/s)", "ratio vs trigger"], rows)


def figure(rounds: list[Round], partitions: int, measured: dict[str, object]) -> plots.Figure:
    """The median records/s of each side at each size."""
    sizes = sorted({r.records for r in rounds})

    def median_rate(seconds: str) -> list[float]:
        return [statistics.median(r.records / getattr(r, seconds) for r in rounds if r.records == n) for n in sizes]

    series = [plots.Series(EOSBATCH, [float(n) for n in sizes], median_rate("eosbatch_s"))]
    if all(r.peer_s is not None for r in rounds):
        series += [plots.Series(PEER, [float(n) for n in sizes], median_rate("peer_s")),
                   plots.Series(PEER_TRIGGER, [float(n) for n in sizes], median_rate("peer_trigger_s"))]
    rows = [r._asdict() for r in rounds]
    return plots.Figure(f"records/s against record count, one batch, {partitions} partitions",
                        "records in the batch", "records/s (median of the rounds)", series, log_x=True,
                        measured={**measured, "rounds": rows})


def main(settings: Settings, args: argparse.Namespace, prefix: str) -> None:
    sizes = parse_sizes(args.sizes)
    rounds = max(1, args.peer_rounds)
    by_size = {n: [Run(f"{prefix}_s{i}r{k}", n) for k in range(rounds)] for i, n in enumerate(sizes)}
    warm = [Run(f"{prefix}_warm{i}", args.warm_up) for i in range(args.warm_up_runs)]
    _define([*(r for runs in by_size.values() for r in runs), *warm], args.partitions)
    # every round of a size reads that size's topic, every warm-up run the first one's (as bench.run)
    topics = {**{r.name: warm[0].topic for r in warm},
              **{r.name: runs[0].topic for runs in by_size.values() for r in runs}}
    specs = json.loads(os.environ[PIPELINES_ENV])
    for spec in specs:
        spec["topic"] = topics.get(spec["name"], spec["topic"])
    os.environ[PIPELINES_ENV] = json.dumps(specs)
    padding = _padding()
    print(f"records sweep {', '.join(f'{n:,}' for n in sizes)} over {args.partitions} partitions, "
          f"{rounds} round(s) each, {'with' if args.peer_rounds else 'without'} the peer "
          f"({engine.kind(settings)} engine)", flush=True)
    warm_up(settings, warm, args.partitions, padding)
    measured: list[Round] = []
    try:
        for runs in by_size.values():
            measured += one_size(settings, runs, args.partitions, padding, peer=args.peer_rounds > 0)
    finally:
        if not args.keep:
            _cleanup(settings, prefix)
    print("\n" + table(measured))
    print("ratio = eosbatch records/s / the peer's (the peer's seconds include its spark-submit JVM and session "
          "start; 'ratio vs trigger' holds eosbatch against the trigger alone)")
    data, png = plots.save(figure(measured, args.partitions, plots.sitting(["python -m bench.run", *sys.argv[1:]])),
                           Path(args.results) / STEM)
    print(f"figure: {png} (data {data})")
