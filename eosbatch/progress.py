"""A one-line progress bar for long commands: offsets done / total, records/s, ETA. Silent when the stream
is not a terminal (logs, Airflow), where the per-batch log lines already say the same."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def render(done: int, total: int, records: int, elapsed: float, width: int = 24) -> str:
    """The bar's text; pure, so that its arithmetic is tested without a terminal."""
    share = 1.0 if total <= 0 else min(1.0, done / total)
    filled = int(share * width)
    rate = records / elapsed if elapsed > 0 else 0.0
    offset_rate = done / elapsed if elapsed > 0 else 0.0
    eta = "?" if offset_rate <= 0 else format_duration((total - done) / offset_rate)
    return (f"[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} offsets {share:4.0%}  "
            f"{records:,} records  {rate:,.0f} rec/s  ETA {eta}")


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total, self.done, self.records = total, 0, 0
        self.started = time.monotonic()

    def advance(self, offsets: int, records: int) -> None:
        self.done += offsets
        self.records += records
        self.show()

    def show(self) -> None:
        if self.enabled:
            line = render(self.done, self.total, self.records, time.monotonic() - self.started)
            self.stream.write("\r\033[K" + line)
            self.stream.flush()

    def log(self, line: str) -> None:
        """Print a log line above the bar (the bar is redrawn below it)."""
        if self.enabled:
            self.stream.write("\r\033[K")
        print(line, flush=True)
        self.show()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
