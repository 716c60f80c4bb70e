"""The HTML report's icicle of which modules hold what at a function's peak,
read back from a real CPU profile's page with xml.etree: each cell as wide as
the bytes of its module and those it leads, its kind segments filling it,
every title's exact bytes those of ``peak["modules_by_kind"]``; no icicle
without modules, nor for a version 6 file (which has no modules' kinds)."""
import json
import re
import xml.etree.ElementTree as ET

import pytest

from helpers import checked_peak

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, load  # noqa: E402
from pytorch_memlab.html_report import render_report  # noqa: E402
from pytorch_memlab.kinds.names import KINDS, LABELS, NO_MODULE  # noqa: E402
from pytorch_memlab.reports.icicle_svg import WIDTH  # noqa: E402
from models import Net  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
B, D = 512, 128                     # the peak in backward: saved, temporary and gradients


def train_step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss.detach()


def outside():
    return torch.empty(B, D)


def profile(batch):
    torch.manual_seed(0)
    model, x = Net(3, head=True), torch.randn(batch, D)
    opt = torch.optim.Adam(model.parameters())
    prof = LineProfiler(train_step, outside, device="cpu")
    with prof:
        for _ in range(2):
            train_step(model, opt, x)
        outside()
    return prof


@pytest.fixture(scope="module")
def profiled():
    return profile(B)


def icicles(page):
    return [ET.fromstring(svg) for svg in re.findall(r'<svg class="icicle".*?</svg>', page, re.S)]


def subtree(modules, name):
    """{kind: bytes} of ``name`` and the modules it leads ("": all of them)."""
    total = {}
    for module, kinds in modules.items():
        if module != NO_MODULE and (not name or module == name
                                    or module.startswith(name + ".")):
            for kind, size in kinds.items():
                total[kind] = total.get(kind, 0) + size
    return total


def title_bytes(element):
    return int(re.search(r"([\d,]+) bytes", element.find(f"{SVG}title").text)[1].replace(",", ""))


def test_cells_and_segments_are_the_modules_bytes_by_kind(profiled):
    peak, _ = checked_peak(profiled.stats(train_step)[0])
    modules = peak["modules_by_kind"]
    assert any(len(kinds) > 1 for kinds in modules.values())   # cells of several kinds
    [svg] = icicles(render_report(profiled))
    cells = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "cell"]
    whole = sum(subtree(modules, "").values())
    assert cells[0].get("data-name") == "" and int(cells[0].get("data-bytes")) == whole
    names = {c.get("data-name") for c in cells}
    assert set(modules) - {NO_MODULE} <= names                 # every module has its cell
    assert {"layers", "layers.0", "layers.0.mlp"} <= names     # and each name it leads
    for cell in cells:
        name, width = cell.get("data-name"), float(cell.get("data-width"))
        expected = subtree(modules, name)
        assert int(cell.get("data-bytes")) == title_bytes(cell) == sum(expected.values())
        assert width == pytest.approx(WIDTH * sum(expected.values()) / whole, abs=2e-3)
        segments = [r for r in cell.findall(f"{SVG}rect") if r.get("class") == "seg"]
        assert sum(float(r.get("width")) for r in segments) == pytest.approx(width, abs=1e-2)
        assert [r.get("data-kind") for r in segments] == [k for k in KINDS if k in expected]
        for r in segments:
            kind = r.get("data-kind")
            assert int(r.get("data-bytes")) == title_bytes(r) == expected[kind]
            assert LABELS[kind] in r.find(f"{SVG}title").text
            assert (name or "all modules") in r.find(f"{SVG}title").text
    assert len(icicles(profiled.display()._repr_html_())) == 1     # the notebook's too


def test_modules_narrower_than_a_pixel_are_one_more_cell():
    # a batch of 4: the peak is Adam's first step; the head's gradients (516 bytes)
    # are under a pixel of what the modules hold
    prof = profile(4)
    modules = prof.stats(train_step)[0]["peak"]["modules_by_kind"]
    [svg] = icicles(render_report(prof))
    cells = [g for g in svg.iter(f"{SVG}g") if g.get("class", "").startswith("cell")]
    drawn = {c.get("data-name") for c in cells if c.get("class") == "cell"}
    left = [m for m in set(modules) - {NO_MODULE} if m not in drawn]
    [more] = [c for c in cells if c.get("class") == "cell more"]
    assert left == ["head"] and more.get("data-count") == "1"
    assert int(more.get("data-bytes")) == title_bytes(more) == sum(modules["head"].values())


def test_no_icicle_without_modules_nor_from_a_version_6_file(profiled, tmp_path):
    record = profiled.stats(outside)[0]
    assert set(record["peak"]["by_module"]) == {NO_MODULE}
    doc = profiled.to_dict()
    doc["functions"] = [f for f in doc["functions"] if f["qualname"] == "outside"]
    assert icicles(render_report(doc)) == []
    doc = profiled.to_dict()
    doc["schema_version"] = 6
    for function in doc["functions"]:
        function["peak"].pop("modules_by_kind")
    (tmp_path / "old.json").write_text(json.dumps(doc))
    page = render_report(tmp_path / "old.json")
    assert icicles(page) == [] and 'class="peakbar"' in page
    assert icicles(load(tmp_path / "old.json")._repr_html_()) == []
