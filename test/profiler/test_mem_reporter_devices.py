"""MemReporter per device: agreement with the CUDA allocator (on the device), meta
tensors, storages counted once, and the allocator's blocks matched to tensors."""
import json
import os

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytorch_memlab.mem_reporter import MemReport, MemReporter, allocator, blocks, collect  # noqa: E402
from helpers import line_of  # noqa: E402
from test_mem_reporter import mlp, named, quiet_report  # noqa: E402


# ------------------------------------------------------------------ CUDA


def _cuda_total(result: MemReport, device: str = "cuda:0"):
    return next(d for d in result.devices if d.device == device)


@pytest.mark.cuda
def test_cuda_allocator_total_is_reported():
    torch.cuda.synchronize()
    reporter = MemReporter()
    before = _cuda_total(quiet_report(reporter, device="cuda:0")) if torch.cuda.memory_allocated(0) else None
    a = torch.empty(1000, device="cuda:0")        # 4000 bytes -> one 4096-byte block
    b = torch.empty(3, device="cuda:0")           # 12 bytes -> one 512-byte block
    view = a[100:200]
    result = quiet_report(reporter, device="cuda:0", verbose=True)
    total = _cuda_total(result)
    assert total.allocator_bytes == torch.cuda.memory_allocated(0)
    assert total.block_bytes <= total.allocator_bytes
    assert {r.device for r in result.rows} == {"cuda:0"}
    sizes = sorted(r.bytes for r in result.rows if r.shape in ((1000,), (3,), (100,)))
    assert sizes == [0, 12, 4000]
    if before is not None:
        assert total.allocator_bytes - before.allocator_bytes == 4096 + 512
        assert total.block_bytes - before.block_bytes == 4096 + 512
    else:
        assert total.allocator_bytes == total.block_bytes == 4096 + 512
        assert total.note.startswith("Every allocated block is accounted for")
    assert total.block_bytes + total.other_block_bytes == total.allocator_bytes
    assert "(torch.cuda.memory_allocated)" in str(result)
    del a, b, view


@pytest.mark.cuda
def test_cuda_linear_and_adam_exact():
    lin = nn.Linear(64, 32).cuda()
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.randn(8, 64, device="cuda")).sum().backward()
    opt.step()
    reporter = MemReporter(lin)
    reporter.add_optimizer(opt)
    result = quiet_report(reporter, module=lin, device="cuda")
    rows = named(result)
    for name in ("weight", "weight.grad", "Adam.weight.exp_avg", "Adam.weight.exp_avg_sq"):
        assert rows[name].bytes == 64 * 32 * 4 and rows[name].device.startswith("cuda")
    assert rows["bias"].bytes == 32 * 4
    total = _cuda_total(result, rows["weight"].device)
    assert total.allocator_bytes == torch.cuda.memory_allocated(rows["weight"].device)
    assert total.block_bytes <= total.allocator_bytes


@pytest.mark.cuda
def test_cuda_saved_tensors_close_the_gap():
    model = mlp().cuda()
    x = torch.randn(256, 4, device="cuda")
    loss = model(x).pow(2).sum()
    reporter = MemReporter(model)
    without = _cuda_total(quiet_report(reporter, device="cuda:0"))
    with_graph = quiet_report(reporter, device="cuda:0", outputs=loss)
    total = _cuda_total(with_graph)
    assert total.allocator_bytes == without.allocator_bytes == torch.cuda.memory_allocated(0)
    assert named(with_graph)["AddmmBackward0.mat1"].bytes == 256 * 8 * 4
    gap_without = without.allocator_bytes - without.block_bytes
    gap_with = total.allocator_bytes - total.block_bytes
    # Intermediates that were once Python objects stay reachable through gc
    # (torch preserves their PyObject while autograd holds them), so the
    # plain walk may already have counted them; outputs= must never count
    # a storage twice, and never find less.
    assert 0 <= gap_with <= gap_without
    assert total.block_bytes >= without.block_bytes


def test_allocator_lines_without_a_gpu(monkeypatch):
    # the CUDA summary path, fed fake allocator totals so it runs on CPU too
    monkeypatch.setattr(allocator, "cuda_allocated", lambda: {"cuda:0": 1024, "cuda:1": 0})
    lin = nn.Linear(2, 2)
    result = quiet_report(MemReporter(lin), module=lin)
    assert [d.device for d in result.devices] == ["cpu", "cuda:0"]   # cuda:1 holds nothing
    gpu = result.devices[1]
    assert (gpu.tensors, gpu.bytes, gpu.block_bytes, gpu.allocator_bytes) == (0, 0, 0, 1024)
    assert gpu.note.startswith("Allocator holds 1.00K more than found: this report is scoped")
    text = str(result)
    assert "Allocated on cuda:0 (torch.cuda.memory_allocated): 1.00K (1,024 bytes)" in text
    assert gpu.note in text
    assert quiet_report(MemReporter(lin), module=lin, device="cuda:1").devices == []


def test_allocator_explanations():
    assert allocator.explain(1024, 1024, False).startswith("Matches the allocator")
    assert "pass outputs=" in allocator.explain(2048, 1024, False)
    assert allocator.explain(512, 1024, False).startswith("Found 512.00B more than the allocator counts")


# ------------------------------------------------------------------ meta tensors, shared storages


def test_meta_tensor_holds_no_memory():
    holder = nn.Module()
    holder.register_buffer("meta", torch.empty(1000, device="meta"))
    holder.register_buffer("real", torch.zeros(10))
    result = quiet_report(MemReporter(holder), module=holder)
    rows = named(result)
    assert rows["meta"].bytes == 0 and rows["meta"].storage_id is None
    assert rows["meta"].shape == (1000,) and rows["meta"].device == "meta"
    assert result.total_bytes == 40
    # A CUDA machine adds its (empty here) cuda devices to the totals.
    by_device = {d.device: d.bytes for d in result.devices}
    assert {k: by_device[k] for k in ("cpu", "meta")} == {"cpu": 40, "meta": 0}
    assert sum(by_device.values()) == 40


def test_cpu_total_is_the_sum_of_distinct_storages():
    holder = nn.Module()
    base = torch.arange(60, dtype=torch.float64)
    holder.register_buffer("base", base)
    holder.register_buffer("view", base[5:9])
    holder.register_buffer("fp16", torch.zeros(7, dtype=torch.float16))
    holder.register_buffer("ints", torch.zeros(3, 3, dtype=torch.int32))
    holder.register_buffer("again", holder.ints.t())
    result = quiet_report(MemReporter(holder), module=holder)
    storages = {b.untyped_storage().data_ptr(): b.untyped_storage().nbytes()
                for b in holder.buffers()}
    assert len(storages) == 3
    assert result.total_bytes == sum(storages.values()) == 480 + 14 + 36
    assert sum(r.bytes for r in result.rows) == result.total_bytes


# ------------------------------------------------------------------ allocator blocks


def _segment(blocks, device=0, stream=0, pool=(0, 0)):
    return {"device": device, "stream": stream, "segment_pool_id": pool,
            "address": blocks[0]["address"], "total_size": sum(b["size"] for b in blocks),
            "blocks": blocks}


def _block(address, size, state="active_allocated", requested=None, frames=()):
    return {"address": address, "size": size, "requested_size": requested or size,
            "state": state, "frames": list(frames)}


def test_split_blocks_matches_storage_addresses():
    # addresses of real storages stand in for device pointers: the split is arithmetic
    a, b = torch.zeros(1000), torch.zeros(10)
    pa, pb = a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()
    far = max(pa, pb) + (1 << 30)
    segments = [
        _segment([_block(pa, 4096), _block(pa + 4096, 512, state="inactive")]),
        _segment([_block(pb, 512)], stream=0x2),
        _segment([_block(far, 32 << 20, requested=32 << 20),
                  _block(far + (32 << 20), 1024, state="active_awaiting_free",
                         frames=[{"filename": torch.__file__, "line": 1, "name": "f"},
                                 {"filename": "/x/train.py", "line": 12, "name": "step"}])]),
        _segment([_block(far + (64 << 20), 2048)], pool=(1, 0)),
        _segment([_block(far + (96 << 20), 8192)]),
        _segment([_block(far + (128 << 20), 512)], device=1),
    ]
    graph = {far + (96 << 20) + 16: "AddmmBackward0.mat1"}
    split = blocks.split_blocks(segments, "cuda:0", [pa, pb + 4], lambda: graph,
                                 lambda: {32 << 20: "cuBLAS workspace (by its size)"})
    assert (split.held_bytes, split.held_blocks) == (4096 + 512, 2)
    by_size = {r.size: r for r in split.other}
    assert sorted(by_size) == [1024, 2048, 8192, 32 << 20]
    assert by_size[32 << 20].label == "cuBLAS workspace (by its size)"
    assert by_size[1024].label == "freed, waiting for another stream to finish with it"
    assert by_size[1024].allocated_at == "train.py:12 (step)" and not by_size[1024].counted
    assert by_size[2048].label.startswith("private pool (1, 0)")
    assert by_size[8192].label == "saved for backward (AddmmBackward0.mat1); pass outputs= to name it"
    assert {size: r.kind for size, r in by_size.items()} == {
        32 << 20: "workspace", 1024: "other", 2048: "other", 8192: "saved_for_backward"}
    assert split.other_bytes == (32 << 20) + 2048 + 8192 and split.awaiting_bytes == 1024
    assert split.held_bytes + split.other_bytes == 4096 + 512 + (32 << 20) + 2048 + 8192


def test_block_section_in_the_report(monkeypatch):
    holder = nn.Module()
    holder.register_buffer("w", torch.zeros(256))
    p = holder.w.untyped_storage().data_ptr()
    segments = [_segment([_block(p, 1024)]),
                _segment([_block(p + (1 << 30), 512), _block(p + (1 << 30) + 512, 512)])]
    monkeypatch.setattr(blocks, "snapshot_segments", lambda: segments)
    monkeypatch.setattr(allocator, "cuda_allocated", lambda: {"cuda:0": 2048})
    # the buffer's row is on cpu; pretend its storage address is on cuda:0 too
    real = collect.Collector.storage_ptrs
    monkeypatch.setattr(collect.Collector, "storage_ptrs",
                        lambda self: dict(real(self), **{"cuda:0": [p]}))
    result = quiet_report(MemReporter(holder))
    gpu = next(d for d in result.devices if d.device == "cuda:0")
    assert (gpu.block_bytes, gpu.other_block_bytes, gpu.allocator_bytes) == (1024, 1024, 2048)
    assert gpu.note.startswith("Every allocated block is accounted for")
    assert [b.size for b in result.blocks] == [512, 512]
    text = str(result)
    assert "Allocator blocks not held by a visible tensor on cuda:0" in text
    assert "     2       512.00B  default         other               unknown" in text
    assert "  + blocks not held by a visible tensor:    1.00K (1,024 bytes)" in text
    assert json.loads(result.to_json())["blocks"][0]["size"] == 512


def test_workspace_sizes_follow_the_environment(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    assert blocks._env_cublas_size(8) == 32 << 20
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:2:16:8")
    assert blocks._env_cublas_size(9) == 4096 * 1024 * 2 + 16 * 1024 * 8
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    assert blocks._env_cublas_size(9) == 32 << 20
    assert blocks._env_cublas_size(8) == 4096 * 1024 * 2 + 16 * 1024 * 8
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", "2048")
    assert blocks._env_cublaslt_size() == 2 << 20


def _mlp_after_adam_step():
    """The issue's case: a 2-layer MLP after one Adam step, a new forward's loss."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(512, 1024, device="cuda")
    model(x).pow(2).mean().backward()
    opt.step()
    loss = model(x).pow(2).mean()
    reporter = MemReporter(model)
    reporter.add_optimizer(opt)
    result = reporter.report(outputs=loss, device="cuda:0")   # printed: pytest -s shows it
    return result, torch.cuda.memory_allocated(0), (model, opt, x, loss)


@pytest.mark.cuda
def test_cuda_mlp_after_adam_every_block_accounted():
    result, allocated, _ = _mlp_after_adam_step()
    total = _cuda_total(result)
    assert total.allocator_bytes == allocated
    unexplained = allocated - total.block_bytes - total.other_block_bytes
    assert unexplained == 0, unexplained
    assert sum(b.size for b in result.blocks if b.counted) == total.other_block_bytes
    assert total.note.startswith("Every allocated block is accounted for")


@pytest.mark.cuda
def test_cuda_mlp_leftover_blocks_are_labelled():
    # and what no tensor holds is labelled (the cuBLAS
    # workspaces of the forward and the backward thread), or at most 1% of the device
    result, allocated, _ = _mlp_after_adam_step()
    unlabelled = [b for b in result.blocks if b.counted and b.label is None]
    assert sum(b.size for b in unlabelled) <= allocated // 100, unlabelled
    workspaces = [b for b in result.blocks if b.label and "workspace (by its size)" in b.label]
    assert workspaces and {b.kind for b in workspaces} == {"workspace"}


@pytest.mark.cuda
def test_cuda_record_history_names_the_line():
    reporter = MemReporter(record_history=True)
    hidden = {"t": torch.empty(3 << 20, dtype=torch.uint8, device="cuda")}  # allocated here
    ptr = hidden["t"].untyped_storage().data_ptr()
    held = [hidden.pop("t").untyped_storage()]    # a storage, not a tensor: invisible to gc walk
    result = quiet_report(reporter, device="cuda:0")
    block = next(b for b in result.blocks if b.address == ptr)
    line = line_of(test_cuda_record_history_names_the_line, "# allocated here")
    here = f"{os.path.basename(__file__)}:{line} "
    assert block.allocated_at is not None and block.allocated_at.startswith(here)
    total = _cuda_total(result)
    assert total.block_bytes + total.other_block_bytes == total.allocator_bytes
    del held
    torch.cuda.memory._record_memory_history(enabled=None)
