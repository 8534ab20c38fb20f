"""The bench's CPU accounting: /proc parsing as plain functions, and a real process tree's CPU time."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import cpu

STAT = "cpu  100 5 40 900 30 2 3 4 0 0\ncpu0 50 2 20 450 15 1 1 2 0 0\nintr 1\n"


def test_machine_busy_is_everything_but_idle_and_iowait() -> None:
    assert cpu.machine_busy_ticks(STAT) == 100 + 5 + 40 + 2 + 3 + 4


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    fields = ["S", "77"] + ["0"] * 9 + ["10", "20", "30", "40"] + ["0"] * 30
    times = cpu.process_times(f"123 (a (weird) name) {' '.join(fields)}")
    assert times == cpu.ProcessTimes(ppid=77, ticks=100)


def test_a_tree_counts_its_descendants_and_nothing_else() -> None:
    table = {1: cpu.ProcessTimes(0, 5), 10: cpu.ProcessTimes(1, 7), 11: cpu.ProcessTimes(10, 11),
             20: cpu.ProcessTimes(0, 1000), 12: cpu.ProcessTimes(11, 13)}
    assert cpu.tree_ticks(10, table) == 7 + 11 + 13
    assert cpu.tree_ticks(99, table) == 0  # not running
    # A server the bench started is its descendant and is reported on its own, not twice.
    assert cpu.tree_ticks(1, table, frozenset({1, 11})) == 5 + 7
    assert cpu.tree_ticks(11, table, frozenset({1, 11})) == 11 + 13


def test_the_cpu_a_child_burns_is_counted_in_its_parents_tree_after_it_ended() -> None:
    roots = {"me": os.getpid(), "gone": None}
    before = cpu.sample(roots)
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
                    "while time.process_time() < end: pass"], check=True)
    used = cpu.usage(before, cpu.sample(roots))
    assert used.parts["me"] >= 0.4  # the child's 0.5 s, now in this process's children's time
    assert used.parts["gone"] == 0
    # The machine's busy ticks saw the child's burn too. Not compared with `me` itself: /proc/stat counts ticks,
    # the process times are accounted otherwise, and on a loaded machine they differ by more than a tick
    # (a CI run saw machine 0.52 s against me 0.58 s).
    assert used.machine >= 0.4


def test_a_named_root_inside_another_tree_is_counted_once() -> None:
    """A stack the bench brings up itself runs its servers as the bench's children."""
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nend = time.process_time() + 0.5\n"
                              "while time.process_time() < end: pass\nprint(flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        roots = {"me": os.getpid(), "server": child.pid}
        before = cpu.sample(roots)
        assert child.stdout is not None and child.stdout.readline() == b"\n"  # its 0.5 s of work are done
        used = cpu.usage(before, cpu.sample(roots))
        assert used.parts["server"] >= 0.3
        assert used.parts["me"] < 0.3
    finally:
        child.kill()
        child.communicate()
