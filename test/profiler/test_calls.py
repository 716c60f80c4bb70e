"""Figures per call: the first call apart (first_call / later_calls),
lines that grow every call (growth_per_call and the table's mark),
print_stats(by_call=True), and their round trip through JSON and CSV."""
import io

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler, load, profile_every  # noqa: E402

from helpers import MiB, line_figures  # noqa: E402

FLOATS_PER_MIB = MiB // 4
state = []
kept = []


def warm_step():
    if not state:
        state.append(torch.empty(8 * FLOATS_PER_MIB))   # 8 MiB, first call only
    y = torch.empty(FLOATS_PER_MIB)
    return y


def leaky_step():
    kept.append(torch.empty(FLOATS_PER_MIB))            # 1 MiB kept per call
    return len(kept)


@pytest.fixture(autouse=True)
def fresh():
    state.clear()
    kept.clear()
    yield
    state.clear()
    kept.clear()


def run(func, calls):
    prof = LineProfiler(func, device="cpu")
    with prof:
        for _ in range(calls):
            func()
    return prof


def text(prof, **kwargs):
    out = io.StringIO()
    prof.print_stats(stream=out, **kwargs)
    return out.getvalue()


def test_first_call_apart_and_not_growing():
    prof = run(warm_step, 4)
    line = line_figures(prof, warm_step, "state.append")
    assert line["count"] == 1 and line["net_growth"] == 8 * MiB
    assert line["first_call"]["count"] == 1
    assert line["first_call"]["net_growth"] == 8 * MiB
    assert line["later_calls"]["count"] == 0 and line["later_calls"]["net_growth"] is None
    assert line["growth_per_call"] == 0
    local = line_figures(prof, warm_step, "y = torch.empty")
    assert local["first_call"]["count"] == 1 and local["later_calls"]["count"] == 3
    # y is freed after each return: the call keeps nothing, so no growth per call
    assert local["growth_per_call"] == 0
    assert prof.stats()[0]["calls"] == 4
    assert "grows every call" not in text(prof)


def test_line_that_grows_every_call_is_marked():
    prof = run(leaky_step, 4)
    line = line_figures(prof, leaky_step, "kept.append")
    assert line["growth_per_call"] == MiB
    assert line["first_call"]["net_growth"] == MiB
    assert line["later_calls"]["net_growth"] == 3 * MiB
    assert line["later_calls"]["count"] == 3
    shown = [row for row in text(prof).splitlines() if "kept.append" in row]
    assert shown and shown[0].endswith("<-- grows every call (+1.00M)")


def test_growth_per_call_needs_three_calls():
    prof = run(leaky_step, 2)
    line = line_figures(prof, leaky_step, "kept.append")
    assert "growth_per_call" not in line
    assert line["first_call"]["net_growth"] == MiB


def test_by_call_groups_and_note():
    def step():
        if not state:
            scratch = torch.empty(8 * FLOATS_PER_MIB)   # 8 MiB, freed at once
            del scratch
            state.append(1)
        y = torch.empty(FLOATS_PER_MIB)
        return y
    prof = run(step, 3)
    plain = text(prof)
    assert "note: on cpu the later 2 calls' peak" in plain
    assert "print_stats(by_call=True) shows both" in plain
    by_call = text(prof, by_call=True)
    assert "cpu, first call" in by_call and "cpu, later calls" in by_call
    assert "note:" not in by_call


def test_round_trip_json_and_csv(tmp_path):
    prof = run(leaky_step, 4)
    for name in ("p.json", "p.csv"):
        prof.save(tmp_path / name)
        saved = load(tmp_path / name)
        (record,) = saved.stats()
        assert record["calls"] == 4
        live = {line["lineno"]: line.to_dict() for line in prof.stats()[0]["lines"]}
        for line in record["lines"]:
            assert line.to_dict() == live[line["lineno"]], name
        assert text(saved) == text(prof)
        assert text(saved, by_call=True) == text(prof, by_call=True)


def test_profile_every_keeps_counting_calls(capsys):
    @profile_every(1, device="cpu")
    def every():
        kept.append(torch.empty(FLOATS_PER_MIB))
        return len(kept)
    for _ in range(4):
        every()
    tables = capsys.readouterr().out.split("## test_profile_every_keeps_counting_calls")
    assert len(tables) == 5
    assert "grows every call" not in tables[2]      # two calls: not known yet
    assert "<-- grows every call (+1.00M)" in tables[4]


def test_bad_clear_argument():
    prof = run(leaky_step, 1)
    with pytest.raises(TypeError):
        prof._tracers.tracers[0].clear(keep_calls=[1], other=2)
