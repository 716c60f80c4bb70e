"""bench_torch.py's table: each measure, ours beside the old package's, the
target, and the notes that say how each was measured."""
import platform

import torch

import bench_cli  # noqa: E402  (bench/ is on sys.path when run as a script)
from torch_common import CURVE_BOUND, TARGETS  # noqa: E402
import pytorch_memlab
from pytorch_memlab import _tracer

def fmt(value, spec, suffix=""):
    return "n/a" if value is None else format(value, spec) + suffix


def ratio_cell(old, ours):
    if old is None or ours is None:
        return "n/a"
    if ours <= 0:
        return "inf"
    return f"{old / ours:.1f}x"


def table(env, res, old_why):
    rows = []
    pl, un, tr, mem = res["per_line"], res["unrelated"], res["train"], res["memory"]
    ours_pl, old_pl = pl["ours"]["per_line_us"], (pl.get("old") or {}).get("per_line_us")
    rows.append(("per-line cost (us/line)", fmt(ours_pl, ".3f"), fmt(old_pl, ".1f"),
                 ratio_cell(old_pl, ours_pl), "<= 0.5", ours_pl <= TARGETS["per_line_us"]))
    rows.append(("unrelated code after @profile", fmt(un["ours"], ".3f", "x"),
                 fmt(un.get("old"), ".2f", "x"), ratio_cell(un.get("old"), un["ours"]),
                 "<= 1.02x", un["ours"] <= TARGETS["unrelated_ratio"]))
    cli = res["cli"]
    rows.append(("unrelated code under run -f", fmt(cli["cli"], ".3f", "x"), "n/a", "n/a",
                 f"<= {bench_cli.TARGET:.2f}x", cli["cli"] <= TARGETS["cli_unrelated_ratio"]))
    rows.append(("MLP train step profiled", fmt(tr["ours"], ".3f", "x"),
                 fmt(tr.get("old"), ".2f", "x"), ratio_cell(tr.get("old"), tr["ours"]),
                 "<= 1.10x", tr["ours"] <= TARGETS["train_ratio"]))
    ours_b = mem["ours"]["bytes_per_event"]
    old_b = (mem.get("old") or {}).get("bytes_per_event")
    rows.append(("host memory (B/line event at 1M / 10M)",
                 " / ".join(fmt(r["bytes_per_event"], ".3f") for r in mem["ours"]["runs"]),
                 fmt(old_b, ".0f"),
                 "n/a" if old_b is None else ("inf" if ours_b <= 0 else f"{old_b / ours_b:.0f}x"),
                 "flat", mem["ours"]["bounded"]))
    head = ("measure", "ours", "old 0.3.2", "old/ours", "target", "ours ok")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(5)]
    line = "  ".join("{:<%d}" % widths[0] if i == 0 else "{:>%d}" % widths[i]
                     for i in range(5)) + "  {}"
    out = [f"== bench_torch: {env.dev}, torch {torch.__version__}, python "
           f"{platform.python_version()}, tracer {_tracer.MECHANISM}, "
           f"pytorch_memlab {pytorch_memlab.__version__}",
           line.format(*head), line.format(*["-" * w for w in widths], "-------")]
    for r in rows:
        out.append(line.format(*r[:5], "yes" if r[5] else "NO"))
    notes = []
    if old_why:
        notes.append(f"old n/a: {old_why}")
    for name in ("per_line", "unrelated", "train", "memory"):
        why = res[name].get("old_na")
        if why:
            notes.append(f"old {name} n/a: {why}")
    notes.append(f"hot loop unprofiled {pl['ours']['base_us_per_line']:.2f} us/line; "
                 f"line events: per-line ours {pl['ours']['line_events']}/run"
                 + (f", old {pl['old']['line_events']}/run" if pl.get("old") else "")
                 + f"; memory ours {mem['ours']['events']}"
                 + (f", old {mem['old']['events']}" if mem.get("old") else "")
                 + f"; train step {tr['step_ms']:.2f} ms unprofiled, {tr['steps']} steps each way"
                 + f"; unrelated base {un['base_ms']:.2f} ms")
    notes.append("host memory held after one call (RSS): " + ", ".join(
        f"{r['rss_delta'] / 1e6:.2f} MB at {r['events']:,} events ({r['bytes_per_event']:.3f} B each)"
        for r in mem["ours"]["runs"])
        + f"; within the curve's two buffers, {CURVE_BOUND / 1e6:.1f} MB: "
        + ("yes" if mem["ours"]["bounded"] else "NO")
        + f"; curve=None: {mem['ours']['no_curve']['rss_delta'] / 1e6:.2f} MB at "
        f"{mem['ours']['no_curve']['events']:,} events")
    notes.append(f"run -f: the same script under @profile {cli['decorator']:.3f}x; "
                 f"trace hook seen by the unrelated code: run -f {cli['hooked']['cli']}, "
                 f"@profile {cli['hooked']['decorator']}; plain base {cli['base_ms']:.1f} ms, "
                 f"{cli['rounds']} rounds")
    return "\n".join(out + ["  " + n for n in notes])
