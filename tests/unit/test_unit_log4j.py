"""Spark's logs rolled over by size: the spark-submit engine's pipeline logs (eosbatch.engine.log4j)."""

from __future__ import annotations

from pathlib import Path

from eosbatch.engine.log4j import roll_over


def test_a_log_rolls_over_by_size_and_keeps_so_many(tmp_path: Path) -> None:
    log = tmp_path / "pipeline.log"
    assert not roll_over(log, max_bytes=10, keep=2)  # nothing yet
    for run in range(4):
        log.write_text(f"run {run} " * 3)
        assert roll_over(log, max_bytes=10, keep=2)
        assert not log.exists()
    log.write_text("short")
    assert not roll_over(log, max_bytes=10, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline.log", "pipeline.log.1", "pipeline.log.2"]
    assert (tmp_path / "pipeline.log.1").read_text().startswith("run 3")
    assert (tmp_path / "pipeline.log.2").read_text().startswith("run 2")
