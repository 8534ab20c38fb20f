"""The bench's figures (bench/plots.py): a PNG drawn from a small figure, its JSON drawn again, and bad input
refused by name before matplotlib sees it; and bench/memory.py's flat-memory verdict."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import memory, plots

pytestmark = pytest.mark.unit

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _figure(**changes: object) -> plots.Figure:
    figure = plots.Figure("seconds per batch", "partitions", "seconds",
                          [plots.Series("eosbatch", [10, 100, 1000], [2.5, 4.0, 20.0]),
                           plots.Series("peer", [10, 100, 1000], [30.0, 49.0, 318.0])],
                          log_x=True, measured={"command": "python -m bench.scale"})
    return figure._replace(**changes)


def _matplotlib() -> None:
    """The bench extra (scripts/setup.sh installs it): missing, the test fails (the wheel's own venv in
    tests/deploy leaves this file out: the bench is not part of the wheel)."""
    import matplotlib  # noqa: F401


def _is_png(path: Path) -> bool:
    return path.stat().st_size > 0 and path.read_bytes()[:8] == PNG_SIGNATURE


def test_a_figure_is_written_as_a_png(tmp_path: Path) -> None:
    _matplotlib()
    written = plots.write_png(_figure(), tmp_path / "deep" / "figure.png")
    assert written == tmp_path / "deep" / "figure.png" and _is_png(written)


def test_save_writes_the_json_beside_the_png_and_the_json_draws_it_again(tmp_path: Path) -> None:
    _matplotlib()
    data, png = plots.save(_figure(), tmp_path / "seconds_per_batch")
    assert (data.name, png.name) == ("seconds_per_batch.json", "seconds_per_batch.png") and _is_png(png)
    assert plots.from_dict(json.loads(data.read_text())) == _figure()
    png.unlink()
    plots.main([str(data)])
    assert _is_png(png)


@pytest.mark.parametrize(("changes", "message"), [
    ({"series": []}, "no series to plot"),
    ({"series": [plots.Series("eosbatch", [], [])]}, "series 'eosbatch' is empty"),
    ({"series": [plots.Series("eosbatch", [1, 2], [1.0])]}, "2 x values and 1 y values"),
    ({"series": [plots.Series("peer", [0, 10], [1.0, 2.0])]}, "x values that cannot be plotted on a log scale"),
    ({"series": [plots.Series("peer", [1, 10], [1.0, math.nan])]}, "y values that cannot be plotted"),
])
def test_bad_input_is_refused_by_name(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    with pytest.raises(plots.PlotError, match=message):
        plots.write_png(_figure(**changes), tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


def test_a_file_that_is_not_a_figure_is_refused(tmp_path: Path) -> None:
    with pytest.raises(plots.PlotError, match="not a bench figure"):
        plots.from_dict({"title": "x", "series": [{"label": "a"}]})


def _footprint(peak: float) -> memory.Footprint:
    return memory.Footprint(records=200, seconds=1.0, baseline_mib=100.0, peak_mib=peak)


def test_memory_is_flat_within_ten_percent_of_the_smallest_case() -> None:
    flat = memory.verdict({10: (_footprint(500), 300.0), 1000: (_footprint(540), 320.0)})
    assert flat.startswith("memory flat: yes (within 10%)") and "500 -> 540 MiB (+8.0%)" in flat
    grew = memory.verdict({10: (_footprint(500), 300.0), 1000: (_footprint(500), 400.0)})
    assert grew.startswith("memory flat: no") and "300 -> 400 MiB (+33.3%)" in grew


def test_an_unknown_engine_heap_is_said_and_left_out_of_the_verdict() -> None:
    verdict = memory.verdict({10: (_footprint(500), math.nan), 1000: (_footprint(510), math.nan)})
    assert verdict.startswith("memory flat: yes") and "engine heap not measured" in verdict
    assert memory.verdict({10: (_footprint(500), 1.0)}).startswith("memory flat: not measured")


def test_the_memory_check_goes_into_a_figures_json_with_its_verdict() -> None:
    kept = memory.as_json({1000: (_footprint(217), math.nan), 10: (_footprint(184), math.nan)})
    assert list(kept["memory"]) == ["10", "1000"] and kept["memory"]["1000"]["peak_mib"] == 217
    assert kept["memory"]["10"]["engine_heap_mib"] is None and kept["memory_verdict"].startswith("memory flat: no")
    assert json.loads(json.dumps(kept)) == kept and memory.as_json({}) == {}
