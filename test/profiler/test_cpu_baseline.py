"""CPU figures start from what is alive: the CPU storages alive when
counting begins (the first CPU profile) are counted as live, so a level
means the same whichever function was profiled first, and freeing one of
them later lowers the level by exactly its bytes.  Each case runs in a fresh
interpreter: the counting wrapper is installed once per process.  Expected
figures come from torch itself (untyped_storage().nbytes() of distinct
storages), not from the profiler's own tensor walk."""
import json

import pytest
from helpers import run_script

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

COMMON = """\
import gc, json
import torch
from pytorch_memlab import LineProfiler

COLUMNS = ["active_bytes.all.current", "active_bytes.all.peak",
           "active_bytes.all.allocated", "active_bytes.all.freed"]

def storage_bytes(tensors):
    # distinct storages, by their C object
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s._cdata] = s.nbytes()
    return sum(seen.values())

def every_cpu_tensor():
    # what the test knows is alive, checked against what Python sees
    found = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.device.type == "cpu"]
    return found + [t.grad for t in found if t.is_leaf and t.grad is not None]

def figures(prof):
    out = {}
    for rec in prof.stats():
        for line in rec["lines"]:
            if line["count"] and "# " in line["code"]:
                out[line["code"].split("# ")[-1]] = [line["net_growth"]] + [line[c] for c in COLUMNS]
    return out
"""


def run(tmp_path, body):
    out, err = run_script(tmp_path, COMMON + body)
    return json.loads(out.splitlines()[-1])


def test_first_line_level_is_what_lives(tmp_path):
    got = run(tmp_path, """\
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
data = torch.randn(32, 64)
alias = data[1:]                  # a view: one storage with data
spare = torch.empty(1000, dtype=torch.uint8)
model(data).sum().backward()      # grads exist before profiling
known = list(model.parameters()) + [p.grad for p in model.parameters()] + [data, alias, spare]
live = storage_bytes(known)
assert live == storage_bytes(every_cpu_tensor()), (live, storage_bytes(every_cpu_tensor()))
del known

def step():
    n = data.shape[0]  # first
    global spare
    del spare  # drop spare
    out = model(data).detach()  # forward
    return n, out

prof = LineProfiler(step, device="cpu", columns=COLUMNS)
with prof:
    step()
print(json.dumps({"live": live, "figures": figures(prof)}))
""")
    live, fig = got["live"], got["figures"]
    # (net growth, current, peak, allocated, freed)
    assert fig["first"] == [0, live, live, 0, 0]
    assert fig["drop spare"] == [-1000, live - 1000, live, 0, 1000]
    growth, current, peak, allocated, freed = fig["forward"]
    out_bytes = 32 * 8 * 4
    assert current == live - 1000 + out_bytes
    assert peak >= live - 1000 + 32 * 128 * 4 + out_bytes


STEP = """\
early = {early}
if early:
    def nothing():
        return 0  # nothing
    with LineProfiler(nothing, device="cpu", columns=COLUMNS):
        nothing()    # counting begins here, before the data is made
data = torch.randn(256, 256)

def step():
    x = data * 2  # step line
    return x

prof = LineProfiler(step, device="cpu", columns=COLUMNS)
with prof:
    step()
print(json.dumps({{"live": storage_bytes(every_cpu_tensor()), "step": figures(prof)["step line"]}}))
"""


def test_level_is_the_same_whichever_function_is_profiled_first(tmp_path):
    # The case: counting began at the first CPU profile, so the data
    # made before it was missing from the step's figures when the step was
    # profiled first, and counted when something else was profiled earlier.
    late = run(tmp_path, STEP.format(early=False))
    early = run(tmp_path, STEP.format(early=True))
    assert late["live"] == early["live"] == 256 * 256 * 4
    size = 256 * 256 * 4
    assert late["step"] == early["step"]
    assert late["step"][:2] == [size, 2 * size]        # growth, level at the line's end


def test_resized_and_onednn_storages_made_before(tmp_path):
    # a storage made before counting began and resized later reallocates
    # through the wrapper (its old bytes freed exactly, the new ones counted);
    # oneDNN still works on tensors made before (the wrapper's deleter on a
    # block made by the base allocator)
    got = run(tmp_path, """\
import torch.nn.functional as F
grow = torch.empty(1000, dtype=torch.uint8)
plain = torch.randn(4096)
early = torch.randn(2, 3, 8, 8).to_mkldnn() if torch.backends.mkldnn.is_available() else None

def step():
    grow.resize_(3000)  # resize
    global plain
    del plain  # drop plain
    if early is not None:
        assert F.conv2d(early.to_dense(), torch.randn(4, 3, 3, 3)).shape == (2, 4, 6, 6)
    return 0

prof = LineProfiler(step, device="cpu", columns=COLUMNS)
with prof:
    step()
print(json.dumps({"figures": figures(prof)}))
""")
    fig = got["figures"]
    assert fig["resize"][0] == 2000
    assert fig["resize"][3:] == [3000, 1000]
    assert fig["drop plain"][0] == -4096 * 4
    assert fig["drop plain"][4] == 4096 * 4
