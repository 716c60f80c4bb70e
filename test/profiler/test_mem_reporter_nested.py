"""MemReporter on nested tensors: a strided one is its buffer, counted once;
a jagged one is the tensors it holds."""
import json

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from helpers import run_fresh  # noqa: E402
from pytorch_memlab.mem_reporter import MemReporter  # noqa: E402


@pytest.mark.filterwarnings("ignore:.*nested tensors.*")
def test_strided_nested_tensor_counts_its_buffer():
    holder = nn.Module()
    nt = torch.nested.nested_tensor([torch.zeros(3, 4), torch.zeros(5, 4)], layout=torch.strided)
    holder.register_buffer("nt", nt)
    result = MemReporter(holder).report(module=holder, print_report=False)
    row = {r.name: r for r in result.rows}["nt"]
    assert row.bytes == nt.untyped_storage().nbytes() == (3 + 5) * 4 * 4
    assert row.shape == (2, -1, 4) and row.numel == 32
    assert result.total_bytes == 128 and result.skipped == 0


def test_nested_tensors_counted_by_their_own_bytes_in_a_whole_process_report():
    """A whole-process report in a fresh interpreter: a strided nested tensor is
    its buffer, once, and reading its shape leaves no tensor behind (a second
    report finds nothing new); a jagged one is the tensors it holds."""
    out = run_fresh("""
        import gc, json, warnings
        warnings.simplefilter("ignore")
        import torch
        from pytorch_memlab import MemReporter

        def tensors():
            return sum(1 for o in gc.get_objects() if issubclass(type(o), torch.Tensor))

        def cpu(result):
            rows = [[r.name, r.bytes] for r in result.rows if r.device == "cpu" and r.bytes]
            return rows, result.total_bytes

        nt = torch.nested.nested_tensor([torch.ones(16), torch.ones(16)])
        parts = nt.unbind()
        buffer = [sum(p.nbytes for p in parts), nt.untyped_storage().nbytes()]
        del parts
        before = tensors()
        strided = [cpu(MemReporter().report(print_report=False)) for _ in range(2)]
        after = tensors()
        del nt
        j = torch.nested.nested_tensor([torch.zeros(3, 4), torch.zeros(5, 4)],
                                       layout=torch.jagged)
        held = [j._values.untyped_storage().nbytes(), j._offsets.untyped_storage().nbytes()]
        jagged = cpu(MemReporter().report(print_report=False, device="cpu"))
        print(json.dumps([buffer, before, after, strided, held, jagged]))
    """, malloc=None)
    assert out.returncode == 0, out.stderr
    buffer, before, after, strided, held, jagged = json.loads(out.stdout)
    assert buffer == [2 * 16 * 4] * 2
    assert after == before
    assert strided == [[[["nt", buffer[0]]], buffer[0]]] * 2
    assert jagged == [[["j.values", held[0]], ["j.offsets", held[1]]], sum(held)]
