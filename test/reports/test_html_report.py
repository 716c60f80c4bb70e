"""The HTML report: self-contained, one bar per figure, sortable, a timeline
for profile_every; then opened in headless Chromium (Debian's ``chromium``;
skipped without it): a screenshot shows the table's bars and the timeline,
the DOM has the table and sorts, and the console stays silent."""
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler, load, profile_every  # noqa: E402
from pytorch_memlab.html_report import render_report, write_report  # noqa: E402
from pytorch_memlab.reports.notebook import SHRINK  # noqa: E402

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser")
                 if shutil.which(name)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                    "(apt-get install -y chromium)")
BLUE, ORANGE = (0x48, 0x78, 0xd0), (0xee, 0x85, 0x4a)     # first two column colours


def work(n):
    x = torch.empty(n)
    y = torch.empty(2 * n)
    del x
    return y


def shrink():
    keep = torch.empty(262144)
    del keep
    return 0


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    """A saved profile with two functions and a timeline (profile_every)."""
    @profile_every(100, device="cpu")
    def step(n):
        held.append(torch.empty(n))
        return work(n)

    held = []
    for i in range(8):
        step(262144 * (1 + i % 3))
    profiler = step.line_profiler
    extra = LineProfiler(work, shrink, device="cpu")
    with extra:
        work(262144)
        shrink()
    data = profiler.to_dict()
    data["functions"] += extra.to_dict()["functions"]
    path = tmp_path_factory.mktemp("report") / "profile.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_self_contained_with_a_bar_per_figure(profile_path):
    saved = load(profile_path)
    text = render_report(saved)
    assert text.startswith("<!DOCTYPE html>")
    # nothing fetched: no external scripts, styles, images or fonts
    assert not re.search(r"<link|<img|<iframe|\bsrc=|@import|url\(", text)
    assert set(re.findall(r"https?://[^\"' ]+", text)) == {"http://www.w3.org/2000/svg"}
    assert text.count('class="bar"') == text_bars(saved)
    assert text.count('<table class="prof"') == 3
    curves = sum(1 for r in saved.stats() if r.get("curve"))   # one SVG each
    assert text.count('<svg class="timeline"') == 1 and "<polyline" in text
    assert text.count("<svg") == 1 + curves
    assert "#d65f5f" in text                       # shrink()'s negative net growth


def test_legend_names_each_column_in_the_tables_order(profile_path):
    saved = load(profile_path)
    text = render_report(saved)
    heads = re.findall(r'data-key="cpu/([^"]+)"', text.split("</thead>")[0])
    assert heads == saved.profile.columns + ["held_at_peak", "net_growth"]
    names = re.findall(r"<dt>(.*?)</dt>", text)
    assert names == saved.profile.columns + ["held at peak", "active_bytes net growth",
                                             "count", "line"]
    # a profile from before held at peak (schema version 3): neither column nor legend
    doc = saved.to_dict()
    for record in doc["functions"]:
        record.pop("peak", None)
        for line in record["lines"]:
            del line["held_at_peak"]
    text = render_report(doc)
    assert "held_at_peak" not in text and "held at peak" not in text
    assert re.findall(r"<dt>(.*?)</dt>", text)[-3:] == ["active_bytes net growth", "count",
                                                        "line"]


def test_bars_are_red_only_for_negative_figures(profile_path):
    """The report's and the notebook's tables: a bar is red (``SHRINK``) exactly
    where its figure is negative, whatever place its column has."""
    saved = load(profile_path)
    bars = [(int(v), color) for v, color in re.findall(
        r'data-v="(-?\d+)" title="[^"]*"><div class="bar" style="width:[\d.]+%;'
        r'background:(#[0-9a-f]{6})"', render_report(saved))]
    growth = [line["net_growth"] for r in saved.stats() for line in r["lines"]]
    assert any(g and g > 0 for g in growth) and any(g and g < 0 for g in growth)
    assert len(bars) == text_bars(saved)
    assert [v < 0 for v, _ in bars] == [color == SHRINK for _, color in bars]
    cells = re.findall(r'linear-gradient\(90deg,(#[0-9a-f]{6})99 [\d.]+%,transparent '
                       r'[\d.]+%\);">([^<]*)</td>', saved._repr_html_())
    assert len(cells) >= len(bars) and any(c == SHRINK for c, _ in cells)
    assert [text.startswith("-") for _, text in cells] == [c == SHRINK for c, _ in cells]


def text_bars(saved):
    """How many figures of the tables are not zero (each has a bar)."""
    return sum(1 for r in saved.stats() for line in r["lines"]
               for c in r["columns"] + ["held_at_peak", "net_growth"] if line.get(c))


def test_wide_tables_scroll_in_their_own_box(profile_path):
    """The page fits a narrow window (checked in Chromium below): every table
    sits in a box that scrolls sideways, no wider than the page."""
    text = render_report(load(profile_path))
    assert text.count('<table class="prof"') == text.count('<div class="scroll"><table '
                                                           'class="prof"') == 3
    rules = dict(re.findall(r"^([^{}\n]+)\{([^}]*)\}", text, re.M))
    assert {"max-width:100%", "overflow-x:auto"} <= set(rules["div.scroll,pre"].split(";"))
    assert "max-width:100%" in rules["svg.curve,svg.timeline"].split(";")


def test_sources_of_a_report(profile_path, tmp_path):
    saved = load(profile_path)
    from_path = render_report(profile_path)
    assert render_report(saved) == from_path == render_report(saved.to_dict())
    write_report(str(profile_path), tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text() == from_path
    with pytest.raises(TypeError, match="cannot report on int"):
        render_report(3)


def test_live_profiler_report_has_no_timeline():
    prof = LineProfiler(work, device="cpu")
    with prof:
        work(1024)
    text = render_report(prof)
    assert 'class="timeline"' not in text and "work" in text


# ---- in Chromium -------------------------------------------------------------------

def read_png(path):
    """(width, height, rows of RGB(A) bytes, bytes per pixel) of an 8-bit PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        elif kind == b"IEND":
            break
    assert depth == 8 and interlace == 0 and color in (2, 6), (depth, color, interlace)
    bpp = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride) if kind else ():
            left = line[x - bpp] if x >= bpp else 0
            up, corner = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + ((left + up) >> 1)) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc
                                      else up if pb <= pc else corner)) & 255
        rows.append(line)
        prev = line
    return width, height, rows, bpp


def count_near(rows, bpp, rgb, tolerance=6):
    total = 0
    for line in rows:
        for x in range(0, len(line), bpp):
            if all(abs(line[x + k] - rgb[k]) <= tolerance for k in range(3)):
                total += 1
    return total


def over_white(rgb, alpha=0.6):
    return tuple(round(alpha * c + (1 - alpha) * 255) for c in rgb)


def chromium(tmp_path, *args):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--disable-extensions", "--enable-logging=stderr", "--v=0",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def console_messages(stderr):
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def page_widths(tmp_path, text, width=700):
    """``text`` (an HTML page) opened in Chromium ``width`` px wide, its console
    silent: {"page": [scrollWidth, clientWidth], "boxes": the same for each
    div.scroll}."""
    page = tmp_path / "widths.html"
    measure = ('<script>document.body.dataset.widths = JSON.stringify({page: ['
               'document.documentElement.scrollWidth, document.documentElement.clientWidth], '
               'boxes: Array.prototype.map.call(document.querySelectorAll("div.scroll"), '
               'function (b) { return [b.scrollWidth, b.clientWidth]; })});</script></body>')
    page.write_text(text.replace("</body>", measure))
    dom = chromium(tmp_path, f"--window-size={width},900", "--dump-dom", page.as_uri())
    assert console_messages(dom.stderr) == []
    return json.loads(re.search(r'data-widths="([^"]*)"', dom.stdout).group(1)
                      .replace("&quot;", '"'))


@needs_chromium
def test_chromium_shows_table_bars_and_timeline(profile_path, tmp_path):
    report = tmp_path / "report.html"
    write_report(profile_path, report)
    url = report.as_uri()

    shot = tmp_path / "shot.png"
    # tall: the column legend and the curves come before the tables
    out = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,2600", url)
    assert console_messages(out.stderr) == []
    width, height, rows, bpp = read_png(shot)
    assert (width, height) == (1000, 2600)
    # bars: the column colours at the bars' opacity over white, in solid blocks
    assert count_near(rows, bpp, over_white(BLUE)) > 1500
    assert count_near(rows, bpp, over_white(ORANGE)) > 1500
    # the timeline's active line, drawn in the full colour
    assert count_near(rows, bpp, BLUE, tolerance=12) > 300

    dom = chromium(tmp_path, "--dump-dom", url)
    assert console_messages(dom.stderr) == []
    assert dom.stdout.count('<table class="prof"') == 3
    curves = sum(1 for r in load(profile_path).stats() if r.get("curve"))
    assert dom.stdout.count("<polyline") == 2 + 3 * curves   # 3 lines per curve
    assert "## " not in dom.stdout and "step" in dom.stdout


@needs_chromium
def test_chromium_sorts_by_a_column(profile_path, tmp_path):
    report = tmp_path / "report.html"
    write_report(profile_path, report)
    dom = chromium(tmp_path, "--dump-dom", report.as_uri() + "#sort=cpu/net_growth")
    assert console_messages(dom.stderr) == []
    saved = load(profile_path)
    for record, body in zip(saved.stats(), re.findall(r"<tbody>(.*?)</tbody>", dom.stdout)):
        order = [int(n) for n in re.findall(r'<tr data-line="(\d+)"', body)]
        growth = {line["lineno"]: line["net_growth"] for line in record["lines"]}
        ran = [growth[n] for n in order if growth[n] is not None]
        assert ran == sorted(ran, reverse=True)            # largest first
        assert all(growth[n] is None for n in order[len(ran):])   # lines never run: last
        assert sorted(order) == sorted(growth)
    assert 'class="sort desc" data-col' in dom.stdout


@needs_chromium
def test_chromium_700_px_wide_page_does_not_scroll_sideways(profile_path, tmp_path):
    """At 700 px the page is no wider than the window; the tables, wider than
    that, scroll inside their boxes."""
    widths = page_widths(tmp_path, render_report(profile_path))
    page, client = widths["page"]
    assert client == 700 and page <= client, widths
    assert len(widths["boxes"]) == 3
    assert all(box <= client for _, box in widths["boxes"])
    assert any(table > box for table, box in widths["boxes"])      # a table wider than 700
