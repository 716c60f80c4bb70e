"""A report builds the curve only where it draws one: a text table (print,
print_stats, repr of display()) never turns the kept call's points into a
curve; the HTML of display() and the saved profile still carry it."""
import pytest
from helpers import MiB

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.line_profiler import tracer_tables  # noqa: E402
from pytorch_memlab.reports import sections  # noqa: E402


def grow():
    a = torch.ones(MiB // 4)
    b = torch.ones(MiB // 2)
    return a, b


def refuse(*args, **kwargs):
    raise AssertionError("a text report built a curve")


@pytest.fixture
def profiled():
    prof = LineProfiler(grow, device="cpu")
    with prof:
        grow()
    return prof


def test_text_reports_build_no_curve(profiled, monkeypatch):
    monkeypatch.setattr(tracer_tables, "_points", refuse)
    monkeypatch.setattr(sections, "_curves", refuse)
    shown = profiled.display()
    text = repr(shown)
    assert "## grow" in text and "torch.ones(MiB // 2)" in text
    profiled.print_stats()
    monkeypatch.undo()
    # the same display draws the curve once HTML is asked for
    assert "<svg" in shown._repr_html_()


def test_html_and_stats_keep_the_curve(profiled):
    (record,) = profiled.stats()
    assert record.curve and record.curve_of["choice"] == "peak"
    assert "<svg" in profiled.display()._repr_html_()
