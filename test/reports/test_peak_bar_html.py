"""The HTML report's bar of what each function's peak is made of:
a real CPU profile, exact bytes, read back from the written page with the
standard library's HTML parser; then laid out in headless Chromium (skipped
without it)."""
import json
import re
from html.parser import HTMLParser

import pytest
from helpers import MiB, line_of
from test_html_report import CHROMIUM, chromium, console_messages

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, load  # noqa: E402
from pytorch_memlab.html_report import render_report, write_report  # noqa: E402
from pytorch_memlab.common.sizes import readable_size  # noqa: E402
from pytorch_memlab.records.model import FunctionRecord, LineRecord, Profile  # noqa: E402
from pytorch_memlab.reports.base import reporter_for  # noqa: E402

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


def u8(n):
    return torch.empty(n, dtype=torch.uint8)


def six_lines():
    a = u8(8 * MiB)                  # eight
    b = u8(6 * MiB)                  # six
    c = u8(5 * MiB)                  # five
    d = u8(3 * MiB)                  # three
    e = u8(2 * MiB)                  # two
    f = u8(MiB)                      # one
    return a, b, c, d, e, f


def two_lines():
    a = u8(4 * MiB)                  # kept
    b = u8(16 * MiB)                 # a temporary
    del b
    return a


def caller(func):
    held = u8(MiB // 2)              # alive before the call
    return held, func()


class Peaks(HTMLParser):
    """Per section (function): its note's text and its bar's segments, each
    as (attributes, text)."""

    def __init__(self):
        super().__init__()
        self.sections, self.stack, self.seg, self.note = {}, [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        cls = attrs.get("class")
        if tag == "section" and "data-qualname" in attrs:
            self.current = self.sections[attrs["data-qualname"]] = {"notes": [], "bars": []}
        elif tag == "p" and cls == "peaknote":
            self.note = ""
        elif tag == "div" and cls == "peakbar":
            self.current["bars"].append([])
        elif tag == "div" and cls == "seg":
            self.seg = (attrs, [])

    def handle_data(self, data):
        if self.seg is not None:
            self.seg[1].append(data)
        elif self.note is not None:
            self.note += data

    def handle_endtag(self, tag):
        if tag == "p" and self.note is not None:
            self.current["notes"].append(self.note)
            self.note = None
        elif tag == "div" and self.seg is not None:
            self.current["bars"][-1].append((self.seg[0], "".join(self.seg[1])))
            self.seg = None


def peaks_of(page):
    parser = Peaks()
    parser.feed(page)
    return parser.sections


def profiled(func):
    prof = LineProfiler(func, device="cpu")
    with prof:
        caller(func)
    return prof


def expected_items(func, record, held):
    """(bytes, lineno or None, label, code) of each part of the breakdown,
    largest first (before the call first among equals), then the rest of
    more than 5 summed: worked out here from the sizes the lines allocate."""
    parts = [(record["peak"]["before_call"], None, "before the call", "")]
    for text, size in held:
        lineno = line_of(func, text)
        code = next(l["code"] for l in record["lines"] if l["lineno"] == lineno)
        parts.append((size, lineno, f"line {lineno}", code.strip()))
    parts.sort(key=lambda p: -p[0])
    if len(parts) > 5:
        rest = parts[4:]
        parts = parts[:4] + [(sum(p[0] for p in rest), None, f"{len(rest)} more", rest)]
    return parts


def check_bar(prof, func, held, tmp_path):
    record = prof.stats()[0]
    path = tmp_path / "report.html"
    write_report(prof, path)
    section = peaks_of(path.read_text(encoding="utf-8"))[func.__qualname__]
    # the caption is the text table's breakdown line, as printed
    text_line = next(l for l in repr(prof.display()).splitlines() if l.startswith("peak "))
    assert section["notes"] == [text_line]
    assert len(section["bars"]) == 1
    segments = section["bars"][0]
    expected = expected_items(func, record, held)
    assert sum(p[0] for p in expected) == record["peak"]["bytes"]
    assert len(segments) == len(expected)
    for (attrs, shown), (nbytes, lineno, label, code) in zip(segments, expected):
        assert int(attrs["data-bytes"]) == nbytes
        assert attrs.get("data-line") == (None if lineno is None else str(lineno))
        if isinstance(code, list):          # the rest: its parts in the tooltip
            code = ", ".join(f"{readable_size(p[0])} {p[2]}" for p in code)
        assert attrs["title"] == f"{readable_size(nbytes)} {label}" + (f": {code}" * bool(code))
        # a line's segment is labelled with its code too (cut by the page's CSS)
        assert shown == (attrs["title"] if lineno is not None
                         else f"{readable_size(nbytes)} {label}")
        width = float(re.search(r"width:([\d.]+)%", attrs["style"]).group(1))
        assert width == pytest.approx(100 * nbytes / record["peak"]["bytes"], abs=5e-4)
    return segments


def test_a_segment_per_part_labelled_with_line_code_and_size(tmp_path):
    prof = profiled(two_lines)
    segments = check_bar(prof, two_lines,
                         [("# kept", 4 * MiB), ("# a temporary", 16 * MiB)], tmp_path)
    titles = [attrs["title"] for attrs, _ in segments]
    assert titles[0] == f"16.00M line {line_of(two_lines, '# a temporary')}: " \
                        "b = u8(16 * MiB)                 # a temporary"


def test_more_than_five_parts_sum_the_rest_as_the_text_line_does(tmp_path):
    prof = profiled(six_lines)
    segments = check_bar(prof, six_lines, [("# eight", 8 * MiB), ("# six", 6 * MiB),
                                           ("# five", 5 * MiB), ("# three", 3 * MiB),
                                           ("# two", 2 * MiB), ("# one", MiB)], tmp_path)
    assert len(segments) == 5 and segments[-1][1].endswith(" more")
    # a saved profile draws the same bar
    live = peaks_of(render_report(prof))
    for name in ("p.json", "p.csv"):
        prof.save(tmp_path / name)
        assert peaks_of(render_report(tmp_path / name)) == live


def test_no_breakdown_no_bar(tmp_path):
    # a file saved before the breakdown existed: no bar and no note
    prof = profiled(two_lines)
    prof.save(tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["schema_version"] = 3
    for f in doc["functions"]:
        del f["peak"]
        for line in f["lines"]:
            del line["held_at_peak"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    page = render_report(load(tmp_path / "old.json"))
    assert peaks_of(page)["two_lines"] == {"notes": [], "bars": []}
    assert 'class="peakbar"' not in page
    # a source that reports no allocation one by one (polled; CUDA today):
    # the note that says why, as the text table shows it, and no bar
    why = "its memory source does not report allocations one by one"
    line = LineRecord(2, "return u8(MiB)", 1, 0, {"active_bytes.all.peak": MiB},
                      held_at_peak=None, has_held=True)
    record = FunctionRecord("polled", "f.py", 1, "cpu", ["active_bytes.all.peak"], [line],
                            peak_missing=why)
    profile = Profile([record], ["active_bytes.all.peak"], ["cpu"])
    page = render_report(profile)
    assert peaks_of(page)["polled"] == {"notes": [f"held at peak: not known, {why}"],
                                        "bars": []}
    assert f"\nheld at peak: not known, {why}\n" in reporter_for("text").render(profile)


# Appended by the test only: the laid-out width of the bar and each segment.
MEASURE = """<script>
window.addEventListener("load", function () {
  var out = document.createElement("pre");
  out.id = "result";
  out.textContent = JSON.stringify(Array.prototype.map.call(
    document.querySelectorAll("div.peakbar"), function (bar) {
      return {bar: bar.clientWidth, segs: Array.prototype.map.call(
        bar.querySelectorAll(".seg"), function (s) {
          return [+s.dataset.bytes, s.getBoundingClientRect().width]; })};
    }));
  document.body.appendChild(out);
});
</script>"""


@needs_chromium
def test_chromium_lays_the_segments_out_by_bytes(tmp_path):
    prof = profiled(six_lines)
    path = tmp_path / "report.html"
    path.write_text(render_report(prof).replace("</body>", MEASURE + "</body>"),
                    encoding="utf-8")
    out = chromium(tmp_path, "--dump-dom", "--virtual-time-budget=5000",
                   "--window-size=1200,900", path.as_uri())
    assert console_messages(out.stderr) == []
    found = re.search(r'<pre id="result">(.*?)</pre>', out.stdout, re.S)
    assert found, out.stdout[-2000:]
    (bar,) = json.loads(found.group(1).replace("&quot;", '"'))
    total = sum(n for n, _ in bar["segs"])
    assert total == prof.stats()[0]["peak"]["bytes"]
    assert sum(w for _, w in bar["segs"]) == pytest.approx(bar["bar"], abs=1)
    for n, w in bar["segs"]:
        assert w == pytest.approx(bar["bar"] * n / total, abs=1)
