"""LineProfiler keeps look-alike code objects apart: the same source in two
files (two copies of a model, a vendored module) compiles to code objects that
compare equal, since equality ignores the file name.  Each is its own function
with its own figures."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler  # noqa: E402

MODEL = '''\
import torch


class Model(torch.nn.Module):
    def forward(self, n):
        out = []
        for _ in range(n):
            out.append(torch.empty(256))
        return len(out)


def step(fail):
    if fail:
        raise ValueError("step")
    return 1
'''


@pytest.fixture
def copies(tmp_path):
    """The namespaces of MODEL run from a/model.py and from b/model.py."""
    spaces = []
    for name in ("a", "b"):
        path = tmp_path / name / "model.py"
        path.parent.mkdir()
        path.write_text(MODEL)
        namespace = {"__name__": "model_" + name}
        exec(compile(MODEL, str(path), "exec"), namespace)
        spaces.append(namespace)
    a, b = spaces
    assert a["Model"].forward.__code__ == b["Model"].forward.__code__
    assert a["Model"].forward.__code__ is not b["Model"].forward.__code__
    return a, b


def counts(record):
    return [line["count"] for line in record["lines"]]


def test_both_forwards_are_registered_and_measured(copies):
    a, b = copies
    model_a, model_b = a["Model"](), b["Model"]()
    prof = LineProfiler(model_a.forward, model_b.forward, device="cpu")
    assert prof.functions == [a["Model"].forward, b["Model"].forward]
    with prof:
        model_a(1)
        model_b(3)
    records = prof.stats()
    assert [r["filename"] for r in records] == [a["Model"].forward.__code__.co_filename,
                                                b["Model"].forward.__code__.co_filename]
    assert [counts(r) for r in records] == [[0, 1, 2, 1, 1], [0, 1, 4, 3, 1]]
    # selecting one copy gives its record only
    (only_b,) = prof.stats(model_b.forward)
    assert only_b["filename"] == b["Model"].forward.__code__.co_filename


def test_code_objects_registered_by_code(copies):
    a, b = copies
    prof = LineProfiler(device="cpu")
    prof.add_code(a["Model"].forward.__code__, "a.forward")
    prof.add_code(b["Model"].forward.__code__, "b.forward")
    with prof:
        b["Model"]()(2)
    assert [(r["qualname"], counts(r)) for r in prof.stats()] == [
        ("a.forward", [0, 0, 0, 0, 0]), ("b.forward", [0, 1, 3, 2, 1])]


def test_exception_is_marked_in_its_own_copy(copies):
    a, b = copies
    prof = LineProfiler(a["step"], b["step"], device="cpu")
    with pytest.raises(ValueError):
        with prof:
            a["step"](False)
            b["step"](True)
    raised = [[line["raised"] for line in r["lines"]] for r in prof.stats()]
    assert raised == [[None, None, None, None], [None, None, "ValueError", None]]
