"""bench.run's report: its tables (steps against the ceilings, where the CPU went) as aligned text."""

from __future__ import annotations

from bench import cpu, memory
from bench.harness import Timing
from bench.memory import Footprint


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def _row(t: Timing, ceiling: Timing | None = None) -> list[str]:
    against = [f"{ceiling.rate:,.0f}", f"{t.rate / ceiling.rate:.2f}"] if ceiling else ["", ""]
    return [t.step, f"{t.records:,}", f"{t.seconds:.2f}", f"{t.rate:,.0f}", *against]


def report(generated: Timing, timings: list[Timing], copies: list[Timing], produce: Timing,
           footprints: dict[int, tuple[Footprint, float]]) -> str:
    plan, process, commit, publish = timings
    total = Timing("total (plan..publish)", plan.records, sum(t.seconds for t in timings))
    blank = [""] * 5
    rows = [_row(generated), _row(plan), _row(process, copies[0]), _row(commit, copies[1]),
            _row(publish, produce), _row(total), ["ceilings, same stack:", *blank], *map(_row, copies),
            _row(produce)]
    text = [_table(["step", "records", "seconds", "records/s", "ceiling/s", "ratio"], rows),
            "ratio = step records/s / ceiling records/s; process is held against COPY into UNLOGGED,",
            "commit against COPY into the logged table with PK, publish against the plain produce."]
    text += ["", cpu_table(timings)]
    if footprints:
        text += ["", _table(*memory.rows("records", footprints)), memory.verdict(footprints)]
    return "\n".join(text)


def _cpu_row(label: str, seconds: float, used: cpu.Usage) -> list[str]:
    return [label, f"{seconds:.2f}", f"{used.machine:.1f}", f"{used.machine / seconds:.2f}" if seconds else "",
            *(f"{v:.1f}" for v in used.parts.values()), f"{used.other:.1f}"]


def _sum(usages: list[cpu.Usage]) -> cpu.Usage:
    return cpu.Usage(sum(u.machine for u in usages),
                     {name: sum(u.parts[name] for u in usages) for name in usages[0].parts})


def cpu_table(timings: list[Timing]) -> str:
    """Where the CPU went, step by step, and what that work costs at the least on this machine's cores."""
    measured = [t for t in timings if t.cpu is not None]
    if not measured:
        return ""
    total = _sum([t.cpu for t in measured if t.cpu is not None])
    wall = sum(t.seconds for t in measured)
    rows = [_cpu_row(t.step, t.seconds, t.cpu) for t in measured if t.cpu is not None]
    rows.append(_cpu_row("total", wall, total))
    header = ["CPU seconds", "wall s", "machine", "cores busy", *measured[0].cpu.parts, "other"]  # type: ignore[union-attr]
    return "\n".join([_table(header, rows), _floor(total, wall)])


def _floor(used: cpu.Usage, wall: float) -> str:
    cores = cpu.cores()
    return (f"{used.machine:.1f} CPU-s on {cores} cores: however the work is overlapped it takes at least "
            f"{used.machine / cores:.1f} s here (it took {wall:.1f} s)")
