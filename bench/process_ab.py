"""The process step alone, A against B on one server: rounds of one batch over the same topic, the variants
taking turns round by round, so that a server's drift (its JIT, its heap) falls on all of them alike.

    .venv/bin/python -m bench.process_ab [--records 1000000] [--partitions 4] [--rounds 4] [--warm 2]
        [VARIANT ...]

A VARIANT is `name[:key=value;key=value][+from_json]`: Spark settings set on the session before its rounds (the
others put back to what the session had), and `+from_json` for the bench pipeline's Json value without the
pyarrow parse (Json(arrow=False)). Without variants: `eosbatch` (the session as eosbatch tunes it) against
`from_json`. Each round plans a new pipeline over the topic and runs the process step (stage "main" of the
protocol's sequence: read, parse, transform, stage), timed with the CPU of each server from /proc; the rounds
stay staged (nothing is committed) and everything is dropped at the end. The first --warm rounds (the first
variant) are not reported: a server's JIT needs a few million records. Same stack selection as bench.run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import uuid
from typing import Any, NamedTuple

from bench import PIPELINES_ENV
from bench.harness import TRANSACTION_SIZE, Run, _cleanup, _define, _measured, _padding, _settings
from bench.report import _table
from eosbatch import steps
from eosbatch.commands import context
from eosbatch.context import quiet
from eosbatch.engine import connect
from eosbatch.protocol import sequence
from eosbatch.steps import sequence as bound
from examples.orders.generate import ensure_topics, generate

FROM_JSON = "+from_json"


class Variant(NamedTuple):
    name: str
    conf: dict[str, str]
    arrow: bool = True


def variant(spec: str) -> Variant:
    """`name[:k=v;k=v][+from_json]` as a Variant."""
    arrow = not spec.endswith(FROM_JSON)
    spec = spec.removesuffix(FROM_JSON)
    name, _, confs = spec.partition(":")
    pairs = [kv.split("=", 1) for kv in confs.split(";") if kv]
    if not name or any(len(p) != 2 for p in pairs):
        raise argparse.ArgumentTypeError(f"{spec!r}: expected name[:key=value;key=value][+from_json]")
    return Variant(name, dict(pairs), arrow)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each variant")
    parser.add_argument("--warm", type=int, default=2, help="untimed rounds first")
    parser.add_argument("variants", nargs="*", type=variant)
    args = parser.parse_args()
    variants = args.variants or [Variant("eosbatch", {}), Variant("from_json", {}, arrow=False)]
    order = [variants[0]] * args.warm + variants * args.rounds
    prefix = "ab" + uuid.uuid4().hex[:6]
    runs = [Run(f"{prefix}_{n}", args.records) for n in range(len(order))]
    settings = _settings()
    _define(runs, args.partitions)
    specs = json.loads(os.environ[PIPELINES_ENV])
    for spec, chosen in zip(specs, order, strict=True):  # every round reads the first run's topic
        spec.update(topic=runs[0].topic, arrow=chosen.arrow)
    os.environ[PIPELINES_ENV] = json.dumps(specs)
    generate(settings, topic=runs[0].topic, records=args.records, partitions=args.partitions,
             transaction_size=TRANSACTION_SIZE, abort_every=0, malformed_every=0, value_padding=_padding())
    keys = sorted({k for v in variants for k in v.conf})
    found: dict[str, Any] = {}
    seconds: dict[str, list[float]] = {v.name: [] for v in variants}
    rows = []
    try:
        for n, (run, chosen) in enumerate(zip(runs, order, strict=True)):
            connect.run(settings, "bench settings", _set, keys, chosen.conf, found)
            ensure_topics(settings, {run.output: args.partitions})
            ctx = context(run.name, quiet)
            batch = steps.plan(ctx)
            if batch is None:
                raise RuntimeError(f"{run.name}: nothing to plan in {runs[0].topic}")
            _, took, used = _measured(bound.run_in_order, ctx, batch.id, sequence.in_stage("main"))
            label = "warm" if n < args.warm else chosen.name
            if n >= args.warm:
                seconds[chosen.name].append(took)
            rows.append([str(n + 1), label, f"{took:.2f}", f"{used.machine:.1f}",
                         *(f"{used.parts[p]:.1f}" for p in ("spark connect", "postgres", "kafka"))])
            print(f"round {n + 1} of {len(order)} ({label}): {took:.2f} s", flush=True)
    finally:
        _cleanup(settings, prefix)
    print("\n" + _table(["round", "variant", "process s", "CPU-s", "spark connect", "postgres", "kafka"], rows))
    print("\n" + _table(["variant", "median s", "min s", "rounds"],
                        [[name, f"{statistics.median(s):.2f}", f"{min(s):.2f}", " ".join(f"{x:.2f}" for x in s)]
                         for name, s in seconds.items()]))


def _set(spark: Any, keys: list[str], conf: dict[str, str], found: dict[str, Any]) -> None:
    """The variant's settings on the session; the other variants' keys back to what the session first had."""
    for key in keys:
        if key not in found:
            found[key] = spark.conf.get(key, None)
        value = conf.get(key, found[key])
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


if __name__ == "__main__":
    main()
