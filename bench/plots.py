"""The bench's figures as data and as PNG: a Figure (its series and what was measured) is written as JSON and
plotted beside it, so that a plot can be drawn again from its JSON alone.

    python -m bench.plots bench/results/seconds_per_batch.json [...]   # (re)draw each JSON's PNG beside it

Pure functions but for the file writes; matplotlib is imported only when a PNG is drawn (the Agg backend,
no display, no pyplot state), from the `bench` extra (pyproject.toml).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

RESULTS = Path(__file__).resolve().parent / "results"


class PlotError(ValueError):
    """A figure that cannot be drawn, named by what is wrong with it."""


class Series(NamedTuple):
    label: str
    x: list[float]
    y: list[float]


class Figure(NamedTuple):
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    log_x: bool = False
    log_y: bool = False
    measured: dict[str, Any] | None = None  # the rows and the sitting, kept in the JSON, not drawn


def check(figure: Figure) -> Figure:
    """The figure itself, or PlotError naming the first thing that would make a wrong or empty plot."""
    if not figure.series:
        raise PlotError(f"{figure.title!r}: no series to plot")
    for s in figure.series:
        if not s.x:
            raise PlotError(f"{figure.title!r}: series {s.label!r} is empty")
        if len(s.x) != len(s.y):
            raise PlotError(f"{figure.title!r}: series {s.label!r} has {len(s.x)} x values and {len(s.y)} y values")
        for axis, values, log in (("x", s.x, figure.log_x), ("y", s.y, figure.log_y)):
            bad = [v for v in values if not isinstance(v, int | float) or not math.isfinite(v) or (log and v <= 0)]
            if bad:
                raise PlotError(f"{figure.title!r}: series {s.label!r} has {axis} values that cannot be plotted"
                                f"{' on a log scale' if log else ''}: {bad[:3]}")
    return figure


def to_dict(figure: Figure) -> dict[str, Any]:
    return {**figure._asdict(), "series": [s._asdict() for s in figure.series]}


def from_dict(data: dict[str, Any]) -> Figure:
    try:
        series = [Series(str(s["label"]), [float(v) for v in s["x"]], [float(v) for v in s["y"]])
                  for s in data["series"]]
        return Figure(str(data["title"]), str(data["x_label"]), str(data["y_label"]), series,
                      bool(data.get("log_x", False)), bool(data.get("log_y", False)), data.get("measured"))
    except (KeyError, TypeError, ValueError) as exc:
        raise PlotError(f"not a bench figure: {type(exc).__name__}: {exc}") from exc


def number(value: float) -> str:
    """A value as a person reads it on a plot: 1,000,000 and 33,333; 4.5 and 0.38."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def write_png(figure: Figure, path: Path) -> Path:
    """Draw the figure's series as lines with markers, one per label, into a PNG at `path`."""
    check(figure)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as Canvas

    canvas = Canvas(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(canvas)
    axes = canvas.add_subplot()
    highest: dict[float, float] = {}  # at each x: the highest point's label above it, the others' below
    for s in figure.series:
        for x, y in zip(s.x, s.y, strict=True):
            highest[x] = max(highest.get(x, y), y)
    for s in figure.series:
        axes.plot(s.x, s.y, marker="o", label=s.label)
        for x, y in zip(s.x, s.y, strict=True):
            axes.annotate(number(y), (x, y), textcoords="offset points", xytext=(4, 5 if y == highest[x] else -11),
                          fontsize=7)
    axes.margins(0.08, 0.15)  # room for the labels of the points at the edges
    if figure.log_x:
        axes.set_xscale("log")
    if figure.log_y:
        axes.set_yscale("log")
    else:
        axes.set_ylim(bottom=0)
    xs = sorted({x for s in figure.series for x in s.x})
    axes.set_xticks(xs, [number(x) for x in xs])  # the measured points, in plain numbers, not powers of ten
    axes.yaxis.set_major_formatter(lambda y, _: number(y))
    axes.tick_params(which="minor", labelbottom=False, labelleft=False)
    axes.set(title=figure.title, xlabel=figure.x_label, ylabel=figure.y_label)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    canvas.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.savefig(path, format="png")
    return path


def save(figure: Figure, stem: Path) -> tuple[Path, Path]:
    """`stem`.json (the figure, to draw it again) and `stem`.png beside it."""
    check(figure)
    stem.parent.mkdir(parents=True, exist_ok=True)
    data = stem.with_suffix(".json")
    data.write_text(json.dumps(to_dict(figure), indent=1) + "\n")
    return data, write_png(figure, stem.with_suffix(".png"))


def redraw(data: Path) -> Path:
    """The PNG beside a figure's JSON, drawn again."""
    return write_png(from_dict(json.loads(data.read_text())), data.with_suffix(".png"))


def sitting(command: Sequence[str]) -> dict[str, Any]:
    """How a figure was made: the command, when, and on what machine, with its load (other processes share
    its cores: a load average above the core count means the figures were measured on a busy machine)."""
    cores = len(os.sched_getaffinity(0))
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    return {"command": " ".join(command), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {cores} cores, {memory:.0f} GiB, load average {load} at the end"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.splitlines()[0])
    parser.add_argument("figures", nargs="+", type=Path, help="JSON files written by bench.run / bench.scale")
    for data in parser.parse_args(argv).figures:
        print(redraw(data))


if __name__ == "__main__":
    main()
