"""The HTML report page's style and scripts (``html_page``): inline, nothing
fetched from the network.  The page fits a narrow window: a wide table
scrolls sideways in its own box (``div.scroll``), the SVGs shrink, long
names wrap."""

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px 24px;color:#222;
 background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 2px;font-family:monospace}
.meta,.where{color:#666;font-size:12px;margin:0 0 8px}
h1,h2,.meta,.where,p.peaknote,p.summary{overflow-wrap:anywhere}
div.scroll,pre{max-width:100%;overflow-x:auto}
svg.curve,svg.timeline{max-width:100%;height:auto}
table.prof{border-collapse:collapse;font-family:monospace;font-size:12px}
table.prof th{padding:2px 8px;text-align:right;border-bottom:1px solid #bbb;
 vertical-align:bottom;white-space:nowrap;background:#fff}
table.prof th.group{text-align:center;border-bottom:1px solid #ddd}
table.prof th.sort{cursor:pointer;user-select:none}
table.prof th.sort:hover{background:#f0f0f0}
table.prof th.asc::after{content:" \\25B2"} table.prof th.desc::after{content:" \\25BC"}
table.prof td{padding:1px 8px;text-align:right;white-space:nowrap}
table.prof td.fig{position:relative;min-width:6.5em}
table.prof td.fig .bar{position:absolute;left:0;top:1px;bottom:1px;opacity:.6}
table.prof td.fig span{position:relative}
table.prof td.code{text-align:left;white-space:pre}
table.prof tr.idle td{color:#999}
table.prof tr.raised{background:#fde0dc}
table.prof b.raised{color:#b00}
.timeline text{font:11px monospace;fill:#444}
.legend{font-size:12px;margin:2px 0 0}
.legend i{display:inline-block;width:18px;height:3px;vertical-align:middle;margin:0 4px 0 10px}
table.prof tr.hl td{background:#fff3b0}
div.curve{position:relative;margin:4px 0 8px}
div.curve .cap{color:#666;font-size:12px;margin:0}
div.curvetip{position:absolute;pointer-events:none;background:#fff;border:1px solid #999;
 padding:4px 6px;font:12px monospace;white-space:pre;box-shadow:0 1px 4px #0003;z-index:2}
table.prof td.up{color:#b00} table.prof td.down{color:#070}
table.prof tr.largest td{background:#ffe2b8} table.prof tr.gone td{color:#999}
table.prof b.largest{color:#b00} p.summary{font-family:monospace;font-size:13px;margin:6px 0}
details.columns{font-size:12px;margin:6px 0 0} details.columns dt{font-family:monospace;
 font-weight:bold;margin-top:4px} details.columns dd{margin:0 0 0 16px}
div.peak{margin:8px 0 4px;max-width:72em}
p.peaknote{font-family:monospace;font-size:12px;margin:0 0 3px}
div.peakbar{display:flex;height:20px;border:1px solid #bbb;font:11px/20px monospace}
div.peakbar .seg{flex:none;box-sizing:border-box;overflow:hidden;text-indent:4px;
 white-space:nowrap;text-overflow:ellipsis;border-right:1px solid #fff}
div.peakbar .seg:last-child{border-right:0}
"""

# Sorts a table's rows by the data-v of the clicked column; empty cells last.
SORT_JS = """
document.querySelectorAll("table.prof").forEach(function (table) {
  table.querySelectorAll("th.sort").forEach(function (th) {
    th.addEventListener("click", function () {
      var col = +th.dataset.col, body = table.tBodies[0];
      var desc = th.dataset.key !== "line" && !th.classList.contains("desc");
      table.querySelectorAll("th.sort").forEach(function (o) { o.classList.remove("asc", "desc"); });
      th.classList.add(desc ? "desc" : "asc");
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) { var v = row.cells[col].dataset.v; return v === undefined || v === "" ? null : +v; }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) { return (x === null) - (y === null) || a.dataset.line - b.dataset.line; }
        return (desc ? y - x : x - y) || a.dataset.line - b.dataset.line;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
// report.html#sort=cpu/active_bytes.all.peak opens sorted by that column
var wanted = /^#sort=(.+)$/.exec(location.hash);
if (wanted) {
  document.querySelectorAll("th.sort").forEach(function (th) {
    if (th.dataset.key === decodeURIComponent(wanted[1])) { th.click(); }
  });
}
"""

# Hover and click on a curve: the nearest point's line, code and figures in a
# tip; a click scrolls to that line's row (in the callee's table for a nested
# call's line) and highlights it.
CURVE_JS = """
function memlabSize(b) {
  var u = ["B", "K", "M", "G", "T"], v = Math.abs(b), i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (b < 0 ? "-" : "") + v.toFixed(2) + u[i];
}
document.querySelectorAll("div.curve").forEach(function (box) {
  var d = JSON.parse(box.querySelector("script.curve-data").textContent);
  var svg = box.querySelector("svg"), tip = box.querySelector("div.curvetip");
  var mark = svg.querySelector(".mark"), rule = svg.querySelector(".rule");
  var g = d.geom, n = d.line.length;
  function owner(i) { return d.callee[i] < 0 ? d.self : d.callees[d.callee[i]]; }
  function xOf(i) { return g.left + g.width * (n > 1 ? i / (n - 1) : 0.5); }
  function yOf(v) { return g.top + g.height * (1 - v / g.max); }
  function at(ev) {
    var r = svg.getBoundingClientRect(), sx = (ev.clientX - r.left) * g.vw / r.width;
    var i = n > 1 ? Math.round((sx - g.left) / g.width * (n - 1)) : 0;
    return Math.max(0, Math.min(n - 1, i));
  }
  function show(i, ev) {
    var who = owner(i), code = (d.code[who] || {})[d.line[i]] || "";
    tip.textContent = "event " + (i + 1) + ": line " + d.line[i]
      + (d.callee[i] < 0 ? "" : " (in " + who + ")") + "\\n" + code.trim()
      + "\\nactive " + memlabSize(d.active[i]) + "  reserved " + memlabSize(d.reserved[i])
      + "  peak in line " + memlabSize(d.peak[i]);
    var r = svg.getBoundingClientRect(), scale = r.width / g.vw;
    var px = xOf(i) * scale, py = yOf(d.active[i]) * scale;
    tip.style.left = Math.min(px + 12, r.width - 260) + "px";
    tip.style.top = Math.max(py - 60, 0) + "px";
    tip.hidden = false;
    mark.setAttribute("cx", xOf(i)); mark.setAttribute("cy", yOf(d.active[i]));
    rule.setAttribute("x1", xOf(i)); rule.setAttribute("x2", xOf(i));
    mark.setAttribute("visibility", "visible"); rule.setAttribute("visibility", "visible");
    box.dataset.at = i;
  }
  function go(i) {
    var who = owner(i), section = null;
    document.querySelectorAll("section[data-qualname]").forEach(function (s) {
      if (!section && s.dataset.qualname === who) { section = s; }
    });
    if (d.callee[i] < 0) { section = box.closest("section"); }
    var row = section && section.querySelector('tr[data-line="' + d.line[i] + '"]');
    if (!row) { return; }
    document.querySelectorAll("tr.hl").forEach(function (o) { o.classList.remove("hl"); });
    row.classList.add("hl");
    row.scrollIntoView({block: "center"});
  }
  svg.addEventListener("mousemove", function (ev) { show(at(ev), ev); });
  svg.addEventListener("mouseleave", function () {
    tip.hidden = true; mark.setAttribute("visibility", "hidden");
    rule.setAttribute("visibility", "hidden");
  });
  svg.addEventListener("click", function (ev) { go(at(ev)); });
});
"""

# Shows the rank picked in the selector (report.html#rank=1 opens on rank 1).
RANK_JS = """
var picker = document.getElementById("rank");
function showRank() {
  document.querySelectorAll("div.rank").forEach(function (d) {
    d.hidden = d.dataset.rank !== picker.value; });
}
picker.addEventListener("change", showRank);
var askedRank = /^#rank=(\\d+)$/.exec(location.hash);
if (askedRank) { picker.value = askedRank[1]; }
showRank();
"""
