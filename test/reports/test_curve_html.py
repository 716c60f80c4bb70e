"""The curve in the HTML report, in real headless Chromium: no
console errors, one point per kept event, hover shows the line's code, a
click scrolls its table row into view, the screenshot is not blank, and the
render time of a 100,000-point curve (printed; run with -s to see it)."""
import json
import re

import pytest
from helpers import MiB
from test_html_report import CHROMIUM, chromium, console_messages, read_png

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.html_report import render_report  # noqa: E402

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

# Appended by the test only: moves the mouse to the curve's peak point, clicks
# it, and writes what the page did into <pre id="result"> for --dump-dom.
DRIVER = """<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    var rendered = performance.now();
    var box = document.querySelector("div.curve"), svg = box.querySelector("svg");
    var d = JSON.parse(box.querySelector("script.curve-data").textContent);
    var best = 0;
    for (var i = 0; i < d.peak.length; i++) { if (d.peak[i] > d.peak[best]) { best = i; } }
    var r = svg.getBoundingClientRect(), s = r.width / d.geom.vw;
    var n = d.line.length, x = d.geom.left + d.geom.width * (n > 1 ? best / (n - 1) : 0.5);
    var ev = {clientX: r.left + x * s, clientY: r.top + (d.geom.top + 10) * s, bubbles: true};
    svg.dispatchEvent(new MouseEvent("mousemove", ev));
    var tip = box.querySelector("div.curvetip");
    var tipText = tip.hidden ? "" : tip.textContent;
    window.scrollTo(0, document.body.scrollHeight);
    svg.dispatchEvent(new MouseEvent("click", ev));
    var row = document.querySelector("tr.hl"), rr = row && row.getBoundingClientRect();
    var out = document.createElement("pre");
    out.id = "result";
    out.textContent = JSON.stringify({
      rendered_ms: rendered, tip: tipText, at: +box.dataset.at, best: best,
      row: row ? +row.dataset.line : null,
      row_in_view: !!rr && rr.top >= 0 && rr.bottom <= window.innerHeight,
      polyline_points: svg.querySelector("polyline.active").points.numberOfItems});
    document.body.appendChild(out);
  }, 0);
});
</script>"""


def step():
    a = torch.empty(MiB // 4)
    b = torch.empty(MiB)
    del a
    return b


def driven(tmp_path, page):
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", DRIVER + "</body>"), encoding="utf-8")
    out = chromium(tmp_path, "--dump-dom", "--virtual-time-budget=10000",
                   "--window-size=1000,800", path.as_uri())
    found = re.search(r'<pre id="result">(.*?)</pre>', out.stdout, re.S)
    assert found, out.stdout[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">")), out


@needs_chromium
def test_hover_click_and_a_point_per_event(tmp_path):
    prof = LineProfiler(step, device="cpu")
    with prof:
        for _ in range(3):
            step()
    record = prof.stats()[0]
    result, out = driven(tmp_path, render_report(prof))
    assert console_messages(out.stderr) == []
    assert result["polyline_points"] == len(record["curve"]) == 4
    best = result["best"]
    assert result["at"] == best
    assert record["curve"][best][0] == result["row"]
    assert "b = torch.empty(MiB)" in result["tip"] and f"line {result['row']}" in result["tip"]
    assert result["row_in_view"]

    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,800",
             (tmp_path / "report.html").as_uri())
    _, _, rows, bpp = read_png(shot)
    colours = {bytes(line[x:x + 3]) for line in rows[::8] for x in range(0, len(line), bpp * 8)}
    assert len(colours) > 20     # not blank: text, curve, bars


def long_loop(n):
    for i in range(n):
        t = torch.empty(64 * (i % 13))
    return t


@needs_chromium
def test_a_100000_point_curve_renders_fast(tmp_path):
    prof = LineProfiler(long_loop, device="cpu")
    with prof:
        long_loop(99_999)
    record = prof.stats()[0]
    assert record["curve_of"]["merged"] == 2 and len(record["curve"]) == 100_000
    result, out = driven(tmp_path, render_report(prof))
    assert console_messages(out.stderr) == []
    assert result["polyline_points"] == len(record["curve"])
    print(f"\n{len(record['curve']):,}-point curve: page loaded, parsed and first drawn "
          f"{result['rendered_ms']:.0f} ms after navigation start (headless Chromium)")
