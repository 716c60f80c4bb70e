"""The out-of-memory post-mortem: a real allocation failure (a CPU allocation
larger than any machine, 2**62 bytes) escapes a profiled function; the
post-mortem's figures are checked against the allocator's own counts."""
import json
import re

import pytest
from helpers import MiB, by_line, line_of, run_script  # noqa: E402

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, load  # noqa: E402
from pytorch_memlab.line_profiler import postmortem  # noqa: E402
from pytorch_memlab.reports import postmortem_text  # noqa: E402
from pytorch_memlab.line_profiler.timeline import read_totals  # noqa: E402

TOO_MUCH = 1 << 62
BIG = 1 << 22


def step():
    big = torch.empty(BIG, dtype=torch.uint8)
    small = torch.ones(256)
    huge = torch.empty(TOO_MUCH, dtype=torch.uint8)
    return big, small, huge


def run_failing(profiler):
    """Run step() under the profiler; return the caught error with the live
    figures read in the handler (the frames still hold the tensors)."""
    try:
        with profiler:
            step()
    except RuntimeError as exc:
        return exc, read_totals("cpu", 0)
    raise AssertionError("no allocation failure")


def test_cpu_allocation_failure_is_a_runtime_error():
    # what CPU torch raises: a RuntimeError naming the exact size, not OutOfMemoryError
    with pytest.raises(RuntimeError, match=f"you tried to allocate {TOO_MUCH} bytes") as info:
        torch.empty(TOO_MUCH, dtype=torch.uint8)
    assert postmortem.is_oom(info.value)
    assert not postmortem.is_oom(RuntimeError("shape mismatch"))
    assert postmortem.is_oom(torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ..."))
    assert not postmortem.is_oom(torch.OutOfMemoryError("CUDA out of memory (pretend)"))


def test_postmortem_figures_are_exact():
    prof = LineProfiler(step, device="cpu")
    exc, (active, reserved) = run_failing(prof)
    (record,) = prof.stats()
    pm = record["postmortem"]
    assert pm["error"] == "RuntimeError" and pm["device"] == "cpu"
    assert pm["requested_bytes"] == TOO_MUCH
    assert (pm["allocated_bytes"], pm["reserved_bytes"]) == (active, reserved)
    assert pm["allocated_bytes"] >= BIG + 1024
    assert pm["fragmentation_bytes"] == 0
    assert pm["total_bytes"] > 0 and 0 < pm["free_bytes"] <= pm["total_bytes"]
    big_line = line_of(step, "big = torch.empty")
    # other tests of this process may leave larger tensors alive: look big up by name
    big = next(t for t in pm["tensors"] if t["name"] == "big")
    assert big == {"name": "big", "kind": "local", "dtype": "uint8", "shape": [BIG],
                   "bytes": BIG, "line": f"test_postmortem.py:{big_line}"}
    # the list is the TOP largest tensors on the device, gc-found ones included:
    # after other tests a full list of larger tensors may push the 1 KiB one out
    small = [t for t in pm["tensors"] if t["name"] == "small"]
    if small:
        assert small[0]["bytes"] == 1024 and small[0]["dtype"] == "float32"
    else:
        assert len(pm["tensors"]) == postmortem.TOP
        assert min(t["bytes"] for t in pm["tensors"]) >= 1024
    assert pm["hints"][0].startswith("The failing allocation alone (4096.00P) is larger "
                                     "than the machine's memory")
    raised = [line for line in record["lines"] if line["raised"]]
    assert [line["lineno"] for line in raised] == [line_of(step, "huge = torch.empty")]
    del exc


def test_postmortem_is_printed_after_the_table():
    prof = LineProfiler(step, device="cpu")
    exc, (active, _) = run_failing(prof)
    text = repr(prof.display())
    table, _, after = text.partition("Out of memory (RuntimeError) in step on cpu")
    assert "<-- RuntimeError raised here" in table
    assert f"requested             4096.00P ({TOO_MUCH:,} bytes)" in after
    assert "  allocated             " in after and f"({active:,} bytes)" in after
    assert "largest live tensors on cpu:" in after
    assert re.search(r"\n    big +uint8 +\(4194304,\) +4\.00M  assigned at "
                     r"test_postmortem\.py:\d+\n", after)
    assert "  hint: The failing allocation alone (4096.00P) is larger than" in after
    assert "<pre>Out of memory (RuntimeError) in step on cpu" in prof.display()._repr_html_()
    del exc


def test_postmortem_in_json_round_trip(tmp_path):
    prof = LineProfiler(step, device="cpu")
    exc, _ = run_failing(prof)
    del exc
    prof.save(tmp_path / "oom.json")
    data = json.loads((tmp_path / "oom.json").read_text())
    (record,) = data["functions"]
    assert record["postmortem"]["requested_bytes"] == TOO_MUCH
    assert "big" in [t["name"] for t in record["postmortem"]["tensors"]]
    saved = load(tmp_path / "oom.json")
    assert saved.stats()[0]["postmortem"] == record["postmortem"]
    assert repr(saved) == repr(prof.display())
    from pytorch_memlab.html_report import write_report
    write_report(saved, tmp_path / "oom.html")
    assert "<pre>Out of memory (RuntimeError) in step on cpu" in (tmp_path / "oom.html").read_text()
    prof.clear()
    assert "postmortem" not in prof.stats()[0]


def test_other_errors_leave_no_postmortem():
    def fails():
        x = torch.zeros(4)
        raise ValueError(x)

    prof = LineProfiler(fails, device="cpu")
    with pytest.raises(ValueError):
        with prof:
            fails()
    assert "postmortem" not in prof.stats()[0]
    assert "Out of memory" not in repr(prof.display())


def test_profile_decorator_prints_the_postmortem(tmp_path):
    out, _ = run_script(tmp_path, """
        import torch
        from pytorch_memlab import profile

        @profile(device="cpu")
        def train():
            weights = torch.zeros(1 << 20)            # 4 MiB
            grads = torch.empty(1 << 62, dtype=torch.uint8)
            return weights, grads

        try:
            train()
        except RuntimeError:
            print("caught")
        """)
    table, _, after = out.partition("Out of memory (RuntimeError) in train on cpu; "
                                    "figures read after the error:")
    assert "<-- RuntimeError raised here" in table and after
    assert ("  live at the failure (call 1), by the line that allocated it:\n"
            "    4.00M line 7\n") in after
    assert "  requested             4096.00P (4,611,686,018,427,387,904 bytes)" in after
    assert "    weights  float32         (1048576,)         4.00M  assigned at script.py:7" in after
    assert after.rstrip().endswith("caught")


def test_hints_follow_the_figures():
    base = {"device": "cuda:0", "requested_bytes": 64 << 20, "allocated_bytes": 900 << 20,
            "reserved_bytes": 1000 << 20, "total_bytes": 1024 << 20, "free_bytes": 0,
            "largest_free_block_bytes": 20 << 20, "tensors": []}
    (hint,) = postmortem_text.hints(base)
    assert "fragmented" in hint and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in hint
    roomy = dict(base, largest_free_block_bytes=80 << 20)
    assert postmortem_text.hints(roomy)[0].startswith("Live tensors fill the memory")
    huge = dict(base, largest_free_block_bytes=80 << 20,
                tensors=[{"name": "cache", "bytes": 600 << 20, "line": "train.py:3"}])
    assert postmortem_text.hints(huge) == [
        "cache alone holds 600.00M (66% of allocated, assigned at train.py:3): free it "
        "(del cache) or make it smaller before the failing line."]


@pytest.mark.cuda
def test_cuda_oom_names_the_big_tensor():
    def grow():
        big = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")     # 4 GiB
        more = torch.empty(1 << 40, dtype=torch.uint8, device="cuda")    # 1 TiB: cannot fit
        return big, more

    prof = LineProfiler(grow, device="cuda:0")
    try:
        with prof:
            grow()
    except torch.OutOfMemoryError:
        allocated = torch.cuda.memory_allocated(0)
        reserved = torch.cuda.memory_reserved(0)
    pm = prof.stats()[0]["postmortem"]
    print("\n" + repr(prof.display()))
    assert pm["when"] == "at the failing allocation"
    assert pm["requested_bytes"] == 1 << 40
    assert pm["allocated_bytes"] == allocated and pm["reserved_bytes"] == reserved
    assert pm["tensors"][0]["name"] == "big" and pm["tensors"][0]["bytes"] == 4 << 30
    assert pm["tensors"][0]["line"] == f"test_postmortem.py:{line_of(grow, 'big = torch')}"
    assert "is larger than cuda:0's memory" in pm["hints"][0]


@pytest.mark.cuda
def test_cuda_fragmentation_hint():
    # 6 MiB tensors come three to a new 20 MiB segment; keeping the middle one of
    # each leaves 6 and 8 MiB holes everywhere: 9 MiB fits in the reserved-but-free
    # memory but in no single hole, and the device (capped here) has no room left.
    # Blocks that filled holes of segments left by earlier tests are all kept.
    torch.cuda.empty_cache()
    earlier = {s["address"] for s in torch.cuda.memory_snapshot()}
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved(0) + (1 << 30)) / total, 0)
    try:
        filled = []
        try:
            while True:
                filled.append(torch.empty(6 * MiB, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            pass
        by_segment = {}
        segments = torch.cuda.memory_snapshot()
        for t in filled:
            start = next(s["address"] for s in segments
                         if s["address"] <= t.data_ptr() < s["address"] + s["total_size"])
            by_segment.setdefault(start, []).append(t)
        kept = [t for start, ts in by_segment.items()
                for t in (ts if start in earlier else sorted(ts, key=torch.Tensor.data_ptr)[1:2])]
        assert all(len(ts) == 3 for start, ts in by_segment.items() if start not in earlier)
        del filled, by_segment, t

        def needs_a_hole():
            hole = torch.empty(9 * MiB, dtype=torch.uint8, device="cuda")
            return hole

        prof = LineProfiler(needs_a_hole, device="cuda:0")
        with pytest.raises(torch.OutOfMemoryError):
            with prof:
                needs_a_hole()
        pm = prof.stats()[0]["postmortem"]
        print("\n" + repr(prof.display()))
        assert pm["when"] == "at the failing allocation"
        assert pm["largest_free_block_bytes"] < pm["requested_bytes"] <= pm["fragmentation_bytes"]
        assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in pm["hints"][0]
        del kept
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
        torch.cuda.empty_cache()


def test_run_command_prints_and_saves_the_postmortem(tmp_path):
    import subprocess
    import sys
    script = tmp_path / "prog.py"
    script.write_text("import torch\n\ndef work():\n    cache = torch.zeros(1 << 20)\n"
                      "    return torch.empty(1 << 62, dtype=torch.uint8), cache\n\nwork()\n")
    proc = subprocess.run([sys.executable, "-m", "pytorch_memlab", "run", "-d", "cpu",
                           "-o", str(tmp_path / "out.json"), str(script)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Out of memory (RuntimeError) in work on cpu" in proc.stdout
    assert "  live at the failure (call 1), by the line that allocated it:\n" \
           "    4.00M line 4\n" in proc.stdout
    pm = json.loads((tmp_path / "out.json").read_text())["functions"][0]["postmortem"]
    live, lines = by_line(pm)
    assert lines == {4: 4 << 20} and live["call"] == 1
    assert pm["requested_bytes"] == TOO_MUCH
    assert pm["tensors"][0] == {"name": "cache", "kind": "local", "dtype": "float32",
                                "shape": [1 << 20], "bytes": 4 << 20, "line": "prog.py:4"}
