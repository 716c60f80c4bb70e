"""The tracer's read-only lookup: which profiled line allocated the live CPU
block at a data pointer (``_tracer.allocated_at``), real tensors."""
import pytest

from helpers import line_of

torch = pytest.importorskip("torch")
from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.sources import native  # noqa: E402


def inner():
    return torch.ones(100, 3)                   # inner line


def outer(kept):
    kept.append(torch.zeros(64, 8))             # outer line
    kept.append(inner())                        # outer calls inner
    doomed = torch.ones(5)                      # freed soon
    kept.append(doomed.untyped_storage().data_ptr())
    assert native.allocated_at("cpu", 0, kept[-1]) == (outer.__code__,
                                                      line_of(outer, "# freed soon"))
    del doomed


def site(t):
    return native.allocated_at("cpu", 0, t.untyped_storage().data_ptr())


def test_a_block_is_found_by_its_start_on_its_device_and_source_only():
    before = torch.ones(7, 7)
    kept = []
    with LineProfiler(outer, device="cpu"):
        outer(kept)
        made = site(kept[0])
        assert made == (outer.__code__, line_of(outer, "# outer line"))
        assert made[0] is outer.__code__
        # inner is not profiled: its block counts on outer's calling line
        assert site(kept[1]) == (outer.__code__, line_of(outer, "# outer calls inner"))
        assert site(before) is None                             # made before enable()
        ptr = kept[0].untyped_storage().data_ptr()
        assert native.allocated_at("cpu", 0, ptr + 4) is None   # not a block's start
        assert native.allocated_at("cpu", 0, 0) is None
        assert native.allocated_at("cuda", 0, ptr) is None      # another source
        assert native.allocated_at("cpu", 1, ptr) is None       # another device
    assert site(kept[0]) is None                                # disabled: forgotten


def test_the_innermost_profiled_function_answers():
    kept = []
    with LineProfiler(outer, inner, device="cpu"):
        outer(kept)
        assert site(kept[1]) == (inner.__code__, line_of(inner, "# inner line"))


def test_a_freed_block_is_forgotten():
    kept = []
    with LineProfiler(outer, device="cpu"):
        outer(kept)
        # (its address, if reused since, was reused outside outer: None too)
        assert native.allocated_at("cpu", 0, kept[2]) is None


@pytest.mark.parametrize("ptr", [-1, 1 << 64])
def test_what_is_no_address_is_refused(ptr):
    with pytest.raises(ValueError, match=r"allocated_at\(ptr=\.\.\.\) takes an address"):
        native.allocated_at("cpu", 0, ptr)


def test_a_ptr_that_is_no_int_is_refused():
    with pytest.raises(TypeError):
        native.allocated_at("cpu", 0, 1.5)
