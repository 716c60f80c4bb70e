"""pytorch_memlab.common: the one byte formatter and the one device parser
every tool uses, and the errors a bad device= or set_target_gpu() gives."""
import pytest

torch = pytest.importorskip("torch")

import pytorch_memlab  # noqa: E402
from pytorch_memlab import LineProfiler, profile, profile_every, set_target_gpu  # noqa: E402
from pytorch_memlab.common import devices  # noqa: E402
from pytorch_memlab.common.sizes import iec_size, readable_size, with_bytes  # noqa: E402

HAVE_CUDA = torch.cuda.is_available()
PROFILER_FORMS = ("expected None (the target GPU, else CPU), 'cpu', 'cuda', 'cuda:N', an int N, "
                  "a torch.device, 'all', or a list of those")


# ---- sizes --------------------------------------------------------------------------

@pytest.mark.parametrize("num_bytes, text", [
    (0, "0.00B"), (4, "4.00B"), (1023, "1023.00B"), (1024, "1.00K"), (40960, "40.00K"),
    (2 << 20, "2.00M"), (1536 << 20, "1.50G"), (1 << 40, "1.00T"), (1 << 62, "4096.00P"),
    (-3 << 20, "-3.00M"),
])
def test_readable_size_is_the_line_table_style(num_bytes, text):
    assert readable_size(num_bytes) == text


def test_the_line_profiler_exports_the_same_formatter():
    assert pytorch_memlab.line_profiler.readable_size is readable_size


def test_with_bytes_and_iec_size():
    assert with_bytes(4194304) == "4.00M (4,194,304 bytes)"
    assert with_bytes(24) == "24.00B (24 bytes)"
    assert iec_size(3145728) == "3.00 MiB (3,145,728 bytes)"
    assert iec_size(1023) == "1023 B"
    assert iec_size(5 << 30) == "5.00 GiB (5,368,709,120 bytes)"


# ---- device= of the line profiler ---------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda bad: profile(device=bad),
    lambda bad: profile_every(2, device=bad),
    lambda bad: LineProfiler(device=bad),
], ids=["profile", "profile_every", "LineProfiler"])
@pytest.mark.parametrize("bad, shown", [(object(), "object"), (1.5, "float 1.5"),
                                        (True, "bool True"), ({"cpu": 1}, "dict {'cpu': 1}"),
                                        (["cpu", 2.5], "float 2.5")])
def test_bad_device_type_names_the_argument(make, bad, shown):
    with pytest.raises(TypeError) as err:
        make(bad)
    assert str(err.value) == f"device: got {shown}; {PROFILER_FORMS}"


@pytest.mark.parametrize("bad, text", [
    ("gpu0", "device: unknown device 'gpu0' ("),
    (-1, "device: GPU index must be >= 0, not -1; "),
    ("meta", "device: 'meta' is not a CUDA device; "),
    ([], "device=[] names no device; "),
])
def test_bad_device_value_names_the_argument(bad, text):
    with pytest.raises(ValueError) as err:
        profile(device=bad)
    assert str(err.value).startswith(text) and str(err.value).endswith(PROFILER_FORMS)


# ---- set_target_gpu ------------------------------------------------------------------

GPU_FORMS = "expected a GPU index N, 'cuda:N' or torch.device('cuda', N)"


@pytest.mark.skipif(HAVE_CUDA, reason="checks the error without CUDA")
@pytest.mark.parametrize("gpu", [0, 3, "cuda:3", torch.device("cuda", 1)])
def test_set_target_gpu_without_cuda(gpu):
    before = devices._target
    with pytest.raises(ValueError) as err:
        set_target_gpu(gpu)
    assert str(err.value) == (f"set_target_gpu({gpu!r}): CUDA is not available, so there is "
                              f"no GPU to target; {GPU_FORMS} of a visible GPU")
    assert devices._target == before


@pytest.mark.parametrize("gpu, error, text", [
    (True, TypeError, f"set_target_gpu(True): got bool True; {GPU_FORMS}"),
    (1.5, TypeError, f"set_target_gpu(1.5): got float 1.5; {GPU_FORMS}"),
    ("cpu", ValueError, f"set_target_gpu('cpu'): 'cpu' is not a CUDA device; {GPU_FORMS}"),
    (-1, ValueError, f"set_target_gpu(-1): GPU index must be >= 0, not -1; {GPU_FORMS}"),
    ("cuda", ValueError, f"set_target_gpu('cuda'): name one GPU; {GPU_FORMS}, e.g. 1 or 'cuda:1'"),
])
def test_set_target_gpu_bad_argument(gpu, error, text):
    before = devices._target
    with pytest.raises(error) as err:
        set_target_gpu(gpu)
    assert str(err.value) == text
    assert devices._target == before


@pytest.mark.cuda
def test_set_target_gpu_out_of_range():
    count = torch.cuda.device_count()
    before = devices._target
    for gpu in (count, f"cuda:{count}"):
        with pytest.raises(ValueError) as err:
            set_target_gpu(gpu)
        assert str(err.value) == (f"set_target_gpu({gpu!r}): GPU {count} does not exist "
                                  f"({count} visible); {GPU_FORMS}")
    assert devices._target == before
