"""The soak (issue 37, item 6): a steady input, the pipeline run continuously by `eosbatch run` processes, and a
random fault every few seconds, for N minutes; then a drain until caught up, the judges of exactly-once, and the
figures. Run by hand on the embedded stack (`python -m tests.soak --minutes 30`); never collected by pytest."""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from eosbatch import config, stack
from eosbatch.kafka import offsets
from eosbatch.ledger import positions, store
from examples.orders import generate
from tests.chaos.control import Services
from tests.scenario import Scenario
from tests.soak import check
from tests.soak.faults import FaultKind, NotNow, World, available, restore
from tests.soak.load import SteadyLoad
from tests.soak.memory import MemorySampler
from tests.soak.report import FaultEvent, Figures, render
from tests.soak.runners import RunnerLoop, RunnerRecord


@dataclass
class Options:
    minutes: float = 30.0
    rate: float = 40.0                # input records a second
    fault_every: float = 10.0         # mean seconds between two faults (each drawn in 0.5x-1.5x of it)
    faults: tuple[str, ...] = ()      # kinds to draw from; empty: all this stack supports
    seed: int = 0                     # 0: a random one (printed)
    batch: int = 600                  # max records per batch
    batches_per_run: int = 4          # batches an `eosbatch run` process does before the next one starts
    sample_every: float = 20.0        # seconds between two memory samples
    floor: float = 0.25               # of the records produced during the faults, at least this many committed
    drain_minutes: float = 15.0
    hang_seconds: float = 300.0       # a runner running longer is stuck: its stack is dumped and it is killed
    out: str = ""                     # folder for the logs and CSVs; "": $EOSBATCH_HOME/soak/<pipeline>


def log(line: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


class FaultSchedule:
    """Draws a kind by weight at random intervals and injects it; records every injection."""

    def __init__(self, kinds: list[FaultKind], world: World, mean: float, origin: float) -> None:
        self.kinds, self.world, self.mean, self.origin = kinds, world, mean, origin
        self.events: list[FaultEvent] = []
        self.not_now: Counter[str] = Counter()
        self._first_round: list[FaultKind] | None = None

    def run_until(self, deadline: float, status=lambda: "") -> None:  # type: ignore[no-untyped-def]
        rng = self.world.rng
        while True:
            pause = rng.uniform(0.5, 1.5) * self.mean
            if time.monotonic() + pause >= deadline:
                time.sleep(max(0.0, deadline - time.monotonic()))  # the schedule's own rhythm, not a wait for a state
                return
            time.sleep(pause)
            kind = self.draw()
            if not self.inject(kind) and self._first_round is not None:
                self._first_round.insert(0, kind)  # not possible now: drawn again after the rest of the round
            if len(self.events) % 10 == 0 and self.events:
                log(status())

    def draw(self) -> FaultKind:
        """Every kind once first, in a random order (so a short soak still injects each), then by weight."""
        if self._first_round is None:
            self._first_round = self.world.rng.sample(self.kinds, len(self.kinds))
        if self._first_round:
            return self._first_round.pop()
        return self.world.rng.choices(self.kinds, [k.weight for k in self.kinds])[0]

    def inject(self, kind: FaultKind) -> bool:
        """False when the kind could not act now."""
        started = time.monotonic()
        try:
            evidence, confirmed = kind.inject(self.world), True
        except NotNow:
            self.not_now[kind.name] += 1
            return False
        except Exception as exc:  # noqa: BLE001 - a fault that could not be confirmed is counted, the soak goes on
            evidence, confirmed = f"{type(exc).__name__}: {exc}", False
            restore(self.world)
        event = FaultEvent(round(started - self.origin, 1), kind.name, confirmed, evidence,
                           round(time.monotonic() - started, 1))
        self.events.append(event)
        log(f"{'ok ' if confirmed else 'UNCONFIRMED '}{kind.name} ({event.seconds:.1f}s): {evidence[:300]}")
        return True


def stack_settings() -> config.Settings:
    if not (os.environ.get(config.DATABASE_URL) and os.environ.get(config.KAFKA_BOOTSTRAP)):
        os.environ.update(stack.up(log=log).env())
    settings = config.load()
    from eosbatch.ledger import migrate

    migrate.upgrade(settings.database_url)
    return settings


def three_nodes():  # type: ignore[no-untyped-def]
    """tests/chaos/cluster.BrokerCluster over the stack's Kafka when it has three nodes; None otherwise."""
    if stack.kafka_brokers() < 3:
        return None
    from tests.soak.broker_faults import stack_cluster

    return stack_cluster()


def synchronous_replica() -> bool:
    """The stack runs a synchronous streaming replica of PostgreSQL (`stack up --postgres-replica`)."""
    from eosbatch.stack import replica

    primary, standby = stack.postgres_servers()
    return replica.role(primary) == "primary" and replica.role(standby) == "replica" and replica.synchronous(primary)


def caught_up(scenario: Scenario) -> bool:
    """The ledger's next offsets reached the input's last stable offsets on every partition."""
    ends = offsets.bounds(scenario.settings, [scenario.input])
    with store.transaction(scenario.settings) as cur:
        mine = positions.next_offsets(cur, scenario.pipeline)
    return all(mine.get(tp, 0) >= bound.stable for tp, bound in ends.items())


def drain(scenario: Scenario, minutes: float) -> bool:
    """`eosbatch run` (until caught up) again and again, without faults, until the ledger has all the input."""
    generate.await_markers(scenario.settings, [scenario.input], timeout=120)
    deadline = time.monotonic() + minutes * 60
    while time.monotonic() < deadline:
        done = scenario.run()
        if done.returncode == 0 and caught_up(scenario):
            return True
        if done.returncode != 0:
            log(f"drain: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ''}")
    return False


def run(options: Options) -> Figures:
    settings = stack_settings()
    services = Services()
    if not services.embedded(settings.database_url, settings.kafka_bootstrap):
        raise SystemExit("the soak crashes the embedded stack's services; the settings name other servers")
    seed = options.seed or random.SystemRandom().randrange(1, 1_000_000)
    scenario = Scenario(settings, f"soak{uuid.uuid4().hex[:6]}", "totals", records=0, batch=options.batch)
    folder = Path(options.out) if options.out else stack.home() / "soak" / scenario.pipeline
    folder.mkdir(parents=True, exist_ok=True)
    origin = time.monotonic()
    cluster = three_nodes()
    if cluster is not None:  # a paused leader must outlast the runners' request timeout
        from tests.soak.broker_faults import REQUEST_TIMEOUT_MS

        scenario.env_overrides[config.KAFKA_CONFIG] = json.dumps({"socket.timeout.ms": REQUEST_TIMEOUT_MS})
    loop = RunnerLoop(["run", scenario.pipeline, "--max-batches", str(options.batches_per_run)], scenario.env(),
                      folder / "runners", origin, hang_seconds=options.hang_seconds)
    world = World(services, loop, random.Random(seed), scenario, cluster, synchronous_replica())
    kinds = [k for k in available(world) if not options.faults or k.name in options.faults]
    unknown = set(options.faults) - {k.name for k in kinds}
    if unknown or not kinds:
        raise SystemExit(f"unknown or unavailable fault kinds {sorted(unknown)}; this stack has "
                         f"{[k.name for k in available(world)]}")
    log(f"pipeline {scenario.pipeline}, seed {seed}, Kafka nodes {len(cluster.node_ids) if cluster else 1}, "
        f"synchronous replica {'yes' if world.replica else 'no'}, faults {[k.name for k in kinds]}, logs in {folder}")
    load = SteadyLoad(settings, scenario.input, options.rate, seed)
    sampler = MemorySampler(options.sample_every, origin, services.spark.pid,
                            lambda: (r.pid if (r := loop.current()) else None))
    schedule = FaultSchedule(kinds, world, options.fault_every, origin)

    def status() -> str:
        now = check.committed(scenario)
        return (f"{(time.monotonic() - origin) / 60:.1f} min: produced {load.figures.produced}, committed "
                f"{now.committed}, faults {len(schedule.events)}, runners {len(loop.records)} {dict(loop.exits())}")

    load.start()
    loop.start()
    sampler.start()
    try:
        schedule.run_until(origin + options.minutes * 60, status)
        restore(world)
    except BaseException:
        loop.stop(timeout=0)  # a soak that could not go on: no runner of it is left running
        load.stop()
        sampler.stop()
        raise
    fault_minutes = (time.monotonic() - origin) / 60
    window, produced = check.committed(scenario), load.figures.produced
    log(f"faults over: {status()}; stopping the input and the runner loop, then the drain")
    load.stop()
    loop.stop()
    drained = drain(scenario, options.drain_minutes)
    sampler.stop()
    final = check.independent_count(scenario)
    log("judging")
    verdict = check.judge(scenario, final)
    figures = Figures(scenario.pipeline, seed, fault_minutes, (time.monotonic() - origin) / 60, options.rate,
                      options.fault_every, {k.name: k.confirmation for k in kinds}, load.figures, window, produced,
                      options.floor, final, verdict, schedule.events, schedule.not_now, loop.records, loop.exits(),
                      sampler.samples, drained)
    write(folder, figures)
    return figures


def write(folder: Path, figures: Figures) -> None:
    import csv
    import json

    from tests.soak.memory import Sample

    (folder / "report.txt").write_text(render(figures) + "\n")
    with (folder / "faults.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(FaultEvent.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(e) for e in figures.events)
    with (folder / "memory.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(Sample.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(s) for s in figures.samples)
    with (folder / "runners.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(RunnerRecord.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(r) for r in figures.runners)
    (folder / "verdict.json").write_text(json.dumps(figures.verdict.judges, indent=2))
