"""The line profiler on CUDA: skipped without a GPU, run on the device.

Figures are compared with torch's own counting (torch.cuda.memory_stats());
printed text is checked in a fresh interpreter, where nothing else holds
CUDA memory."""
import gc

import pytest
from helpers import run_script  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.cuda

from pytorch_memlab import (  # noqa: E402
    LineProfiler,
    reset_target_gpu,
    set_target_gpu,
    target_gpu,
)

from helpers import MiB, line_of  # noqa: E402
N_GPUS = torch.cuda.device_count()
two_gpus = pytest.mark.skipif(N_GPUS < 2, reason="needs two GPUs")


def body_rows(table):
    """(active peak, reserved peak, lineno, code) of each line of the first table;
    blank figures are None."""
    lines = table.splitlines()
    code_at = lines[3].index("code")
    line_end = code_at - 2
    rows = []
    for text in lines[5:]:
        if not text.strip():
            break
        cells = text[:line_end].split()
        lineno = int(cells[-1])
        figures = cells[:-1]
        active, reserved = (figures[0], figures[1]) if figures else (None, None)
        rows.append((active, reserved, lineno, text[code_at:]))
    return rows


@pytest.fixture(autouse=True)
def clean_target():
    yield
    reset_target_gpu()


def test_seed_example_text(tmp_path):
    out, err = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import profile

        @profile
        def func():
            linear1 = torch.nn.Linear(100, 100).cuda()
            linear2 = torch.nn.Linear(100, 100).cuda()
            linear3 = torch.nn.Linear(100, 100).cuda()

        func()
        """)
    assert "CUDA is not available" not in err
    assert out.startswith("## func\n")
    assert "cuda:0" in out.splitlines()[2]
    rows = body_rows(out)
    ran = [(a, r) for a, r, _, code in rows if a is not None]
    # Our tracer gives the def line no figures (the old tool showed 0.00B there):
    # accept either, then the three Linear lines in order.
    assert ran[-3:] == [("40.00K", "2.00M"), ("80.00K", "2.00M"), ("120.00K", "2.00M")]
    assert all(a == "0.00B" for a, _ in ran[:-3])
    linear_rows = [code for a, _, _, code in rows if a in ("40.00K", "80.00K", "120.00K")]
    assert [c.strip().split(" =")[0] for c in linear_rows] == ["linear1", "linear2", "linear3"]


def cuda_work():
    a = torch.empty(1 << 20, device="cuda")  # 4 MiB
    b = torch.empty(1 << 18, device="cuda")  # 1 MiB
    del a  # free a
    return b  # keep b


KEYS = ["allocated_bytes.all.allocated", "allocated_bytes.all.freed",
        "allocation.all.allocated", "allocation.all.freed", "segment.all.allocated",
        "requested_bytes.all.allocated", "active_bytes.all.current",
        "reserved_bytes.all.current", "active_bytes.all.peak"]


def test_stats_match_memory_stats_deltas():
    gc.collect()
    torch.cuda.synchronize()
    prof = LineProfiler(cuda_work, device="cuda:0", columns=KEYS)
    torch.cuda.init()
    before = torch.cuda.memory_stats(0)
    with prof:
        kept = cuda_work()
    after = torch.cuda.memory_stats(0)
    lines = [line for line in prof.stats()[0]["lines"] if line["count"]]
    assert [line["count"] for line in lines] == [1, 1, 1, 1]
    for key in KEYS:
        if key.endswith((".allocated", ".freed")):
            assert sum(line[key] for line in lines) == after[key] - before[key], key
    last = lines[-1]
    assert last["active_bytes.all.current"] == after["active_bytes.all.current"]
    assert last["reserved_bytes.all.current"] == after["reserved_bytes.all.current"]
    assert sum(line["net_growth"] for line in lines) == (
        after["active_bytes.all.current"] - before["active_bytes.all.current"])
    base = before["active_bytes.all.current"]
    assert lines[0]["active_bytes.all.peak"] - base == 4 * MiB
    assert lines[1]["active_bytes.all.peak"] - base == 5 * MiB
    assert lines[2]["net_growth"] == -4 * MiB
    del kept


def test_device_selection():
    assert LineProfiler(device="cuda:0").devices == ["cuda:0"]
    assert LineProfiler(device=0).devices == ["cuda:0"]
    assert LineProfiler(device=torch.device("cuda", 0)).devices == ["cuda:0"]
    assert LineProfiler(target_gpu=0).devices == ["cuda:0"]
    assert LineProfiler(device="all").devices == [f"cuda:{i}" for i in range(N_GPUS)]
    assert LineProfiler(device=["cpu", "cuda:0"]).devices == ["cpu", "cuda:0"]
    with pytest.raises(ValueError, match="does not exist"):
        LineProfiler(device=f"cuda:{N_GPUS}")
    with target_gpu(0):
        assert LineProfiler().devices == ["cuda:0"]
    with pytest.raises(ValueError, match="unknown column"):
        LineProfiler(device="cuda:0", columns=["active_bytes.all.peek"])


def test_all_devices_one_group_each():
    def work():
        x = torch.empty(1 << 18, device="cuda:0")  # on gpu 0
        return x

    with LineProfiler(work, device="all") as prof:
        work()
    records = prof.stats()
    assert [r["device"] for r in records] == [f"cuda:{i}" for i in range(N_GPUS)]
    text = repr(prof.display())
    for i in range(N_GPUS):
        assert f" cuda:{i} " in text.splitlines()[2]
    growth = {r["device"]: sum(line["net_growth"] or 0 for line in r["lines"])
              for r in records}
    assert growth["cuda:0"] == MiB
    assert all(growth[f"cuda:{i}"] == 0 for i in range(1, N_GPUS))


def test_cpu_and_cuda_groups():
    def work():
        c = torch.empty(262144)  # cpu MiB
        g = torch.empty(262144, device="cuda")  # gpu MiB
        return c, g

    with LineProfiler(work, device=["cpu", "cuda:0"]) as prof:
        work()
    by_device = {r["device"]: r["lines"] for r in prof.stats()}
    growth = {d: [line["net_growth"] for line in lines if line["count"]]
              for d, lines in by_device.items()}
    assert growth["cpu"][:2] == [MiB, 0]
    assert growth["cuda:0"][:2] == [0, MiB]


@two_gpus
def test_set_target_gpu_inside_function_moves_followers_only():
    def work():
        a = torch.empty(1 << 18, device="cuda:0")  # gpu0 line
        set_target_gpu(1)
        b = torch.empty(1 << 18, device="cuda:1")  # gpu1 line
        return a, b

    follower = LineProfiler(work)            # follows the target
    fixed = LineProfiler(work, device="cuda:0")
    set_target_gpu(0)
    with follower, fixed:
        work()
    assert follower.devices == ["cuda:1"] and fixed.devices == ["cuda:0"]

    def growth(prof, text):
        lineno = line_of(work, text)
        line = next(x for x in prof.stats()[0]["lines"] if x["lineno"] == lineno)
        return line["net_growth"]

    assert growth(follower, "# gpu0 line") == MiB
    assert growth(follower, "# gpu1 line") == MiB     # read on GPU 1 after the switch
    assert growth(fixed, "# gpu0 line") == MiB
    assert growth(fixed, "# gpu1 line") == 0          # stays on GPU 0


def test_real_cuda_oom_marks_the_line(tmp_path):
    out, err = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import profile

        @profile(columns=["active_bytes.all.peak", "num_ooms"])
        def too_big():
            total = torch.cuda.get_device_properties(0).total_memory
            x = torch.empty(2 * total, dtype=torch.uint8, device="cuda")
            return x

        too_big()
        """, expect_rc=1)
    assert "OutOfMemoryError" in err
    marked = [line for line in out.splitlines() if "<-- OutOfMemoryError raised here" in line]
    assert len(marked) == 1 and "torch.empty(2 * total" in marked[0]
    assert marked[0].split()[1] == "1"       # num_ooms at the end of that line


def test_profile_default_reads_cuda(tmp_path):
    out, err = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import profile

        @profile
        def work():
            x = torch.empty(262144, device="cuda")
            return x

        work()
        """)
    assert "CUDA is not available" not in err
    rows = body_rows(out)
    assert [a for a, _, _, _ in rows if a is not None] == ["1.00M", "1.00M"]
