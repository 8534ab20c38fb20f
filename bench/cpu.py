"""CPU time spent during a run, from /proc: the whole machine's, and each server's process tree.

Wall time says how long a run took; CPU time says how much work it was. On a machine of `cores` cores no
schedule of that work, however well overlapped, finishes in less than cpu_seconds / cores. The bench uses
it to say whether a goal is out of reach on this machine or only out of reach of today's schedule.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


class ProcessTimes(NamedTuple):
    ppid: int
    ticks: int  # utime + stime of the process, plus cutime + cstime of its children it has waited for


class Usage(NamedTuple):
    """CPU seconds used between two samples."""
    machine: float
    parts: dict[str, float]  # a process tree's, by the name the caller gave its root

    @property
    def other(self) -> float:
        """What no named tree used: the kernel's own work, other processes."""
        return max(0.0, self.machine - sum(self.parts.values()))


def machine_busy_ticks(proc_stat: str) -> int:
    """Busy ticks of all cores from /proc/stat's `cpu` line: everything but idle and iowait (guest time is
    already inside user time)."""
    for line in proc_stat.splitlines():
        if line.startswith("cpu "):
            fields = [int(f) for f in line.split()[1:]]
            user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
            return user + nice + system + irq + softirq + steal
    raise ValueError("no 'cpu' line in /proc/stat")


def process_times(pid_stat: str) -> ProcessTimes:
    """Fields of /proc/<pid>/stat. The command name sits in parentheses and may itself hold spaces and
    parentheses, so the fields are counted from the last ')'."""
    fields = pid_stat[pid_stat.rindex(")") + 2:].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14-17
    return ProcessTimes(int(fields[1]), sum(int(f) for f in fields[11:15]))


def tree_ticks(root: int, table: Mapping[int, ProcessTimes], apart: frozenset[int] = frozenset()) -> int:
    """Ticks of `root` and of every live descendant but the trees rooted at `apart` (counted on their own:
    the servers of a stack the bench started itself are its children). A descendant that ended and was
    waited for is in its parent's children's ticks, so a tree's total only moves its ticks from one
    process to another."""
    children: dict[int, list[int]] = {}
    for pid, times in table.items():
        children.setdefault(times.ppid, []).append(pid)
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in table or (pid in apart and pid != root):
            continue
        seen.add(pid)
        total += table[pid].ticks
        stack.extend(children.get(pid, ()))
    return total


def _process_table() -> dict[int, ProcessTimes]:
    table = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                table[int(entry.name)] = process_times((entry / "stat").read_text())
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue  # it ended while we looked
    return table


class Sample(NamedTuple):
    machine: int
    parts: dict[str, int]


def sample(roots: Mapping[str, int | None]) -> Sample:
    """Busy ticks now: the machine's, and each named root's tree without the other roots' trees inside it
    (None: not running, counted as 0)."""
    table = _process_table()
    machine = machine_busy_ticks((PROC / "stat").read_text())
    named = frozenset(pid for pid in roots.values() if pid)
    return Sample(machine, {name: tree_ticks(pid, table, named) if pid else 0 for name, pid in roots.items()})


def usage(before: Sample, after: Sample) -> Usage:
    return Usage((after.machine - before.machine) / TICKS_PER_SECOND,
                 {name: max(0, after.parts.get(name, 0) - ticks) / TICKS_PER_SECOND
                  for name, ticks in before.parts.items()})


def cores() -> int:
    return len(os.sched_getaffinity(0))
