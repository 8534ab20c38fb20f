"""The soak's figures as text: what ran, the records committed against the floor, the faults by kind (confirmed
from outside), the anomalies, and memory over time (per slice of the run). Pure formatting of what the soak
measured; tests/soak/soak.py prints it and writes it beside the CSVs."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from tests.soak.check import Count, Verdict
from tests.soak.load import LoadFigures
from tests.soak.memory import Sample
from tests.soak.runners import RunnerRecord


@dataclass
class FaultEvent:
    at_s: float          # seconds since the soak started
    kind: str
    confirmed: bool
    evidence: str        # the outside evidence, or why it could not be confirmed
    seconds: float       # how long the fault and the wait for the service took


@dataclass
class Figures:
    pipeline: str
    seed: int
    fault_minutes: float
    total_minutes: float
    rate: float
    fault_every: float
    kinds: dict[str, str]             # kind -> how it is confirmed
    load: LoadFigures
    window: Count                     # committed at the end of the faults
    produced_in_window: int
    floor: float
    final: Count
    verdict: Verdict
    events: list[FaultEvent]
    not_now: Counter[str]
    runners: list[RunnerRecord]
    runner_exits: Counter[str]
    samples: list[Sample]
    drained: bool

    @property
    def floor_held(self) -> bool:
        return self.produced_in_window > 0 and self.window.committed >= self.floor * self.produced_in_window

    @property
    def passed(self) -> bool:
        return self.floor_held and self.drained and self.verdict.anomalies == 0


def render(f: Figures, slice_minutes: float = 5.0) -> str:
    ratio = f.window.committed / f.produced_in_window if f.produced_in_window else 0.0
    lines = [
        f"soak of {f.pipeline}: {f.fault_minutes:.1f} min under faults, {f.total_minutes:.1f} min in all "
        f"(with the drain), seed {f.seed}, input {f.rate:g} records/s, a fault every ~{f.fault_every:g} s",
        "",
        "records",
        f"  produced in committed input transactions:  {f.load.produced} ({f.load.aborted} more aborted on purpose, "
        f"{f.load.abandoned} in commits left ambiguous, {f.load.producers} producers)",
        f"  committed under faults:  {f.window.committed} of {f.produced_in_window} produced by then ({ratio:.1%}); "
        f"floor {f.floor:.0%}: {'held' if f.floor_held else 'MISSED'}",
        f"  batches under faults: {_states(f.window.batches)}; in all: {_states(f.final.batches)}; the longest "
        f"time between two commits under faults: {f.window.longest_stall_s:.0f} s",
        f"  committed in all:        {f.final.committed} "
        f"(after the drain: {'caught up' if f.drained else 'NOT caught up'})",
        f"  independent count: input {f.final.input_records} read_committed records = {f.final.input_orders} orders + "
        f"{f.final.input_malformed} malformed; sink {f.final.sink_orders} orders; dead letters {f.final.dead_letters}; "
        f"output {f.final.output_records} records adding up to {f.final.output_orders} orders; "
        f"ledger covers {f.final.covered_offsets} offsets",
        "",
        "faults (each confirmed from outside the pipeline)",
        f"  {'kind':<26}{'confirmed':>10}{'unconfirmed':>13}{'not now':>9}  confirmed by",
    ]
    confirmed = Counter(e.kind for e in f.events if e.confirmed)
    unconfirmed = Counter(e.kind for e in f.events if not e.confirmed)
    for kind, how in f.kinds.items():
        lines.append(f"  {kind:<26}{confirmed[kind]:>10}{unconfirmed[kind]:>13}{f.not_now[kind]:>9}  {how}")
    lines.append(f"  {'total':<26}{sum(confirmed.values()):>10}{sum(unconfirmed.values()):>13}"
                 f"{sum(f.not_now.values()):>9}")
    for event in [e for e in f.events if not e.confirmed][:10]:
        lines.append(f"  unconfirmed {event.kind} at {event.at_s:.0f}s: {event.evidence[:300]}")
    exits = ", ".join(f"{code}: {n}" for code, n in sorted(f.runner_exits.items()))
    lines += ["", f"runners: {len(f.runners)} `eosbatch run` processes; exits {exits} "
                  "(0 done, 2 terminal, 3 transient, 4 fenced, killed: a fault, hung: the watchdog)",
              *error_kinds(f.runners), *hangs(f.runners), "",
              f"anomalies: {f.verdict.anomalies}" + ("" if f.verdict.aborted_attempts is None else
                                                      f" (aborted attempts in the output's log, read_uncommitted: "
                                                      f"{f.verdict.aborted_attempts})")]
    for judge, found in f.verdict.judges.items():
        lines.append(f"  {judge}: {len(found)}" + "".join(f"\n    {a[:500]}" for a in found[:10]))
    lines += ["", *memory_table(f.samples, f.runners, slice_minutes), "",
              f"result: {'PASS' if f.passed else 'FAIL'}"]
    return "\n".join(lines)


def _states(batches: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(batches.items(), key=lambda item: -item[1])) or "none"


def error_kinds(runners: list[RunnerRecord]) -> list[str]:
    """The errors the runners that failed ended with, by exit code and eosbatch error class, most frequent first."""
    kinds = Counter((r.exit_code, r.last_error.split(":")[1].strip() if r.last_error.startswith("eosbatch:")
                     else r.last_error[:80]) for r in runners if r.exit_code not in (0, -9, None))
    return [f"  exit {code} x{n}: {kind}" for (code, kind), n in kinds.most_common(12)]


def hangs(runners: list[RunnerRecord]) -> list[str]:
    """The runners the watchdog killed, by where they were stuck: a liveness finding, not an anomaly."""
    stuck = Counter(r.hung_in for r in runners if r.hung_in)
    return [f"  HUNG x{n} (killed by the watchdog; stack in runners/<name>.stack): {where}"
            for where, n in stuck.most_common()]


def memory_table(samples: list[Sample], runners: list[RunnerRecord], slice_minutes: float) -> list[str]:
    """Per slice of the run: the Connect server's JVM resident memory and heap (max of the samples; its pid
    changes when a fault killed it), its Python workers, and the runners' peak resident memory."""
    lines = [f"memory over time (MB; per {slice_minutes:g} min; Connect: max of the samples, runners: their peaks)",
             f"  {'minutes':<10}{'connect rss':>12}{'heap used':>11}{'heap comm.':>11}{'metaspace':>10}"
             f"{'py workers':>11}{'pids':>5}{'runners':>9}{'runner med':>11}{'runner max':>11}"]
    width = slice_minutes * 60
    end = max([s.elapsed_s for s in samples] + [r.started for r in runners] + [0.0])
    start = 0.0
    while start <= end:
        inside = [s for s in samples if start <= s.elapsed_s < start + width and s.connect_pid]
        peaks = [r.peak_rss_kb / 1024 for r in runners if start <= r.started < start + width and r.peak_rss_kb]

        def most(values: list[float]) -> str:
            return f"{max(values):.0f}" if values else "-"

        lines.append(f"  {f'{start / 60:.0f}-{(start + width) / 60:.0f}':<10}"
                     f"{most([s.connect_rss_mb for s in inside]):>12}{most([s.heap_used_mb for s in inside]):>11}"
                     f"{most([s.heap_committed_mb for s in inside]):>11}{most([s.metaspace_mb for s in inside]):>10}"
                     f"{most([s.connect_workers_rss_mb for s in inside]):>11}"
                     f"{len({s.connect_pid for s in inside}):>5}{len(peaks):>9}"
                     f"{(f'{statistics.median(peaks):.0f}' if peaks else '-'):>11}{most(peaks):>11}")
        start += width
    return lines
