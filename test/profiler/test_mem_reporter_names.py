"""MemReporter names a tensor that is no model state by the variable that
holds it in the calling frames, and, while a profiler reads the CPU, by the
profiled line that allocated it: real CPU tensors, exact bytes."""
import gc
import weakref

import pytest

from helpers import line_of

torch = pytest.importorskip("torch")
from pytorch_memlab import LineProfiler, MemReporter  # noqa: E402


def report(**kwargs):
    return MemReporter(**kwargs).report(print_report=False, verbose=True)


def rows_of(result, shape):
    return [r for r in result.rows if r.shape == shape]


# ------------------------------------------------------------------ variables


def test_a_local_variable_names_its_tensor():
    activations = torch.ones(37, 41)
    (row,) = rows_of(report(), (37, 41))
    assert row.name == "activations" and row.kind == "other"
    assert row.bytes == 37 * 41 * 4 and row.alias_of is None and row.allocated_at is None
    del activations


def held_by_caller():
    return report()


def test_the_callers_caller_is_walked_too():
    outer_batch = torch.ones(43, 5)
    (row,) = rows_of(held_by_caller(), (43, 5))
    assert row.name == "outer_batch"
    del outer_batch


def test_a_tensor_held_by_two_names_is_charged_once():
    first = torch.ones(29, 3)
    second = first
    result = report()
    rows = rows_of(result, (29, 3))
    assert [(r.name, r.bytes, r.alias_of) for r in rows] == [
        ("first", 29 * 3 * 4, None), ("second", 0, "first")]
    assert "second(->first)" in result.format(verbose=True)
    assert "second" not in result.format(verbose=False)
    del first, second


def test_a_tensor_in_a_list_is_named_by_its_index():
    batches = [torch.ones(31, 2), torch.ones(31, 3)]
    result = report()
    assert [r.name for r in rows_of(result, (31, 2))] == ["batches[0]"]
    assert [(r.name, r.bytes) for r in rows_of(result, (31, 3))] == [("batches[1]", 31 * 3 * 4)]
    del batches


def test_a_variable_comes_before_the_list_that_also_holds_it():
    kept = []
    item = torch.ones(19, 7)
    kept.append(item)
    rows = rows_of(report(), (19, 7))
    assert [r.name for r in rows] == ["item"]     # the list item is no second name
    del kept, item


def test_model_state_keeps_its_name():
    model = torch.nn.Linear(3, 23)
    weight = model.weight
    result = MemReporter(model).report(print_report=False, verbose=True)
    assert [(r.name, r.kind) for r in rows_of(result, (23, 3))] == [("weight", "parameter")]
    del model, weight


def test_without_a_model_a_modules_parameters_are_named_by_its_variable():
    net = torch.nn.Linear(3, 17)
    rows = rows_of(report(), (17, 3))
    assert [r.name for r in rows] == ["net.weight"]
    del net


def test_the_report_keeps_no_local_alive():
    # Before 3.13, reading a running function's f_locals caches a dict of its
    # variables on the frame: the report must not leave it holding them
    doomed = torch.ones(13, 11)
    report()
    ref = weakref.ref(doomed)
    del doomed
    gc.collect()
    assert ref() is None


# ------------------------------------------------------------------ lines


def make_hidden():
    return torch.ones(64, 32)                          # callee allocates


def step(cache):
    batch = torch.ones(64, 16)                         # batch line
    hidden = make_hidden()                             # hidden line
    cache.append(torch.zeros(64, 8))                   # cache line
    scratch = torch.ones(1)
    weights = torch.nn.Linear(16, 9)                   # params line
    loss = (weights.weight * 2).sum()                  # loss line
    result = MemReporter(weights).report(print_report=False, verbose=True, outputs=loss)
    del scratch
    return result, hidden


def test_a_tensor_allocated_on_a_profiled_line_shows_that_line():
    before = torch.ones(61, 3)                          # made before profiling
    cache = []
    with LineProfiler(step, make_hidden, device="cpu"):
        result, hidden = step(cache)
    sites = {r.name: r.allocated_at for r in result.rows}
    assert sites["batch"] == f"step:{line_of(step, '# batch line')}"
    assert sites["hidden"] == f"make_hidden:{line_of(make_hidden, '# callee allocates')}"
    assert sites["cache[0]"] == f"step:{line_of(step, '# cache line')}"
    assert sites["before"] is None
    assert sites["output"] == f"step:{line_of(step, '# loss line')}"
    assert sites["weight"] is None and sites["bias"] is None   # model state: named by its owner
    (row,) = rows_of(result, (64, 16))
    assert row.bytes == 64 * 16 * 4
    assert f"batch (step:{line_of(step, '# batch line')})" in str(result)
    assert result.to_dicts()[[r.name for r in result.rows].index("batch")]["allocated_at"] \
        == sites["batch"]
    # the profiler disabled, its blocks are forgotten: names only
    after = {r.name: r.allocated_at for r in report().rows}
    assert after["hidden"] is None and after["cache[0]"] is None
    del before, cache, hidden


def test_a_function_not_profiled_names_no_line():
    cache = []
    with LineProfiler(make_hidden, device="cpu"):
        result, hidden = step(cache)
    sites = {r.name: r.allocated_at for r in result.rows}
    assert sites["batch"] is None
    assert sites["hidden"] == f"make_hidden:{line_of(make_hidden, '# callee allocates')}"
    del cache, hidden
