"""``python -m pytorch_memlab diff`` and ``pytorch_memlab.diff``: two versions
of a script, the second inserting a line and enlarging a tensor."""
from html.parser import HTMLParser

import pytest

pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

import pytorch_memlab  # noqa: E402
from helpers import MiB, saved_profile  # noqa: E402
from helpers import diff_cli as cli  # noqa: E402
from pytorch_memlab.common.sizes import readable_size  # noqa: E402
from test_html_report import CHROMIUM, page_widths  # noqa: E402

OLD = """\
import torch

def train_step():
    a = torch.empty(1 << 20)
    b = torch.empty(1 << 20)
    return a.sum() + b.sum()

train_step()
"""
NEW = """\
import torch

def train_step():
    a = torch.empty(1 << 20)
    extra = torch.empty(1 << 18)
    b = torch.empty(1 << 21)
    return a.sum() + b.sum()

train_step()
"""


@pytest.fixture
def pair(tmp_path):
    return saved_profile(tmp_path, "old", OLD), saved_profile(tmp_path, "new", NEW)


def test_lines_matched_by_text_and_exact_delta(pair):
    result = pytorch_memlab.diff(*pair)
    (fd,) = result.functions
    by_code = {line.code.strip(): line for line in fd.lines}
    # the enlarged line's text changed: a deleted old line and an inserted one
    b = by_code["b = torch.empty(1 << 21)"]
    assert by_code["b = torch.empty(1 << 20)"].new is None
    assert by_code["a = torch.empty(1 << 20)"].old.lineno == 4
    assert by_code["a = torch.empty(1 << 20)"].new.lineno == 4
    assert by_code["a = torch.empty(1 << 20)"].change("net_growth") == 0
    ret = by_code["return a.sum() + b.sum()"]
    assert (ret.old.lineno, ret.new.lineno) == (6, 7)       # moved by the inserted line
    inserted = by_code["extra = torch.empty(1 << 18)"]
    assert inserted.old is None and inserted.change("net_growth") == MiB
    assert b.old is None and b.change("net_growth") == 8 * MiB
    # peak: old 4 MiB + 4 MiB, new 4 + 1 + 8 MiB (and the same scalars in both)
    assert 8 * MiB <= fd.old_peak < 8 * MiB + 1024
    assert fd.peak_change == 5 * MiB
    assert fd.summary().startswith("train_step: peak 8.00M -> 13.00M (+5.00M, +62.5%), line")


def test_cli_text_html_and_exit_codes(pair, tmp_path):
    old, new = pair
    proc = cli(old, new)
    assert proc.returncode == 0, proc.stderr
    assert "train_step: peak 8.00M -> 13.00M (+5.00M, +62.5%)" in proc.stdout
    assert "+8.00M" in proc.stdout and "<-- largest increase" in proc.stdout
    assert cli(old, new, "--fail-over", "4MiB").returncode == 1
    assert cli(old, new, "--fail-over", "6MiB").returncode == 0
    assert cli(old, new, "--fail-over", "50%").returncode == 1
    assert cli(old, new, "--fail-over", "70%").returncode == 0
    assert cli(old, new, "--fail-over", "0").returncode == 1      # a bare 0, as 0B
    assert cli(old, old, "--fail-over", "0").returncode == 0
    html = tmp_path / "diff.html"
    assert cli(old, new, "-o", html).returncode == 0
    assert "train_step: peak 8.00M" in html.read_text()
    only = cli(old, new, "-c", "active_bytes.all.peak")
    assert only.returncode == 0 and "reserved_bytes" not in only.stdout


@pytest.mark.parametrize("args, message", [
    (("missing.json", "NEW"), "no such file"),
    (("NOTPROFILE", "NEW"), "not a saved profile"),
    (("OLD", "NEW", "--fail-over", "lots"), "--fail-over 'lots'"),
    (("OLD", "OTHER"), "no function in common"),
    (("OLD", "GPU"), "share no device"),
    (("OLD", "FUTURE"), "newer than this pytorch_memlab reads"),
], ids=["missing", "not-profile", "bad-threshold", "nothing-common", "no-device", "newer"])
def test_usage_errors(pair, tmp_path, args, message):
    old, new = pair
    other = tmp_path / "other.json"
    import json
    data = json.loads(new.read_text())
    for record in data["functions"]:
        record["qualname"] = "elsewhere"
    other.write_text(json.dumps(data))
    (tmp_path / "bad.json").write_text("{}")
    data = json.loads(new.read_text())
    data["devices"] = ["cuda:0"]
    for record in data["functions"]:
        record["device"] = "cuda:0"
    (tmp_path / "gpu.json").write_text(json.dumps(data))
    data["schema_version"] = 99
    (tmp_path / "future.json").write_text(json.dumps(data))
    names = {"OLD": old, "NEW": new, "OTHER": other, "NOTPROFILE": tmp_path / "bad.json",
             "GPU": tmp_path / "gpu.json", "FUTURE": tmp_path / "future.json"}
    proc = cli(*[names.get(a, a) for a in args])
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


class Cells(HTMLParser):
    """The rows of every table of a page: [(tr attrs, [(td attrs, text)])],
    and the text of each p.summary."""

    def __init__(self):
        super().__init__()
        self.rows, self.summaries, self._cell, self._summary = [], [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr":
            self.rows.append((attrs, []))
        elif tag == "td":
            self._cell = (attrs, [])
        elif tag == "p" and attrs.get("class") == "summary":
            self._summary = []

    def handle_endtag(self, tag):
        if tag == "td":
            self.rows[-1][1].append((self._cell[0], "".join(self._cell[1])))
            self._cell = None
        elif tag == "p" and self._summary is not None:
            self.summaries.append("".join(self._summary))
            self._summary = None

    def handle_data(self, data):
        for part in (self._cell and self._cell[1], self._summary):
            if part is not None:
                part.append(data)


def test_html_view_is_a_table_with_exact_figures(pair, tmp_path):
    old, new = pair
    page = tmp_path / "diff.html"
    assert cli(old, new, "-o", page).returncode == 0
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<style>" in text
    assert "<pre>" not in text and "http" not in text       # a table, nothing fetched
    parsed = Cells()
    parsed.feed(text)
    (fd,) = pytorch_memlab.diff(old, new).functions
    columns = fd.columns + ["net_growth"]
    rows = {cells[-1][1].replace("\u2190 largest increase", "").strip(): (attrs, cells)
            for attrs, cells in parsed.rows if cells}
    assert len(rows) == len(fd.lines)
    growth = 3 * columns.index("net_growth")
    for code, moved in [("extra = torch.empty(1 << 18)", MiB),
                        ("b = torch.empty(1 << 21)", 8 * MiB)]:
        attrs, cells = rows[code]
        old_cell, new_cell, change = cells[growth:growth + 3]
        assert old_cell == ({"data-v": ""}, "")
        assert new_cell[0]["data-v"] == str(moved) and change[0]["data-v"] == str(moved)
        assert change[0]["class"] == "up" and change[1] == "+" + readable_size(moved)
        assert change[0]["title"] == f"{moved:,} bytes"
    attrs, cells = rows["b = torch.empty(1 << 20)"]
    assert attrs["class"] == "gone" and cells[-2][1] == "-5"
    assert cells[growth + 2][0]["class"] == "down" and cells[growth + 2][1] == "-4.00M"
    (largest,) = [code for code, (attrs, _) in rows.items() if attrs.get("class") == "largest"]
    assert rows[largest][1][-2][1] == str(fd.peak_line)
    assert parsed.summaries == [fd.summary(), fd.summary()]   # under the table, and at the end
    assert fd.summary().startswith("train_step: peak 8.00M -> 13.00M (+5.00M, +62.5%)")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_chromium_700_px_wide_diff_page_does_not_scroll_sideways(pair, tmp_path):
    """At 700 px the diff page is no wider than the window; its table, wider
    than that, scrolls inside its box, as the report's tables do."""
    old, new = pair
    page = tmp_path / "diff.html"
    assert cli(old, new, "-o", page).returncode == 0
    widths = page_widths(tmp_path, page.read_text())
    width, client = widths["page"]
    assert client == 700 and width <= client, widths
    ((table, box),) = widths["boxes"]
    assert box <= client < table
