"""The kinds of what each module holds at a peak, in the tracer alone (the
test source "deferred" pushes blocks as the CUDA source does): a module's
tagged bytes move as its lines' do, back to every peak the block was alive
at, in nested calls too; and every peak's modules' kinds add up, kind by
kind, to its lines' (every block here is made inside a module)."""
import pytest

from helpers import MiB, line_of

from pytorch_memlab import _testsource, _tracer

block = _testsource.deferred_block
PARAMETER, GRADIENT, SAVED = 1, 3, 5      # the tracer's numbers (kinds.names.TAGGED)
TRACER = []


@pytest.fixture(autouse=True)
def fresh_readings():
    _testsource.manual_reset()
    yield
    _testsource.manual_reset()
    TRACER.clear()


def tag(kind, ptr, only_from=-1, back=True):
    return _tracer.tag_blocks(TRACER[0], kind, [ptr], [0], only_from, back)


def peaks_of(*funcs):
    t = _tracer.Tracer(_testsource.deferred_source, 0, ["bytes.peak"],
                       growth_field="bytes.current")
    for f in funcs:
        t.add_code(f.__code__)
    TRACER.append(t)
    t.enable()
    try:
        funcs[0]()
    finally:
        t.disable()
    peaks, missing, modules_missing = _tracer.peaks_by_kind(t)
    assert missing is None and modules_missing is None
    return {code: peak for code, peak in peaks}


def kinds(values):
    return {n: v for n, v in zip(range(1, _tracer.TAGGED_KINDS + 1), values) if v}


def sums_agree(peak):
    """Per module, its kinds within its bytes; per kind, the modules' sum is
    the lines' (all made in modules)."""
    *_, klines, modules, mkinds = peak
    assert set(mkinds) <= set(modules)
    assert all(sum(k) <= modules[m] for m, k in mkinds.items())
    by_lines = [sum(k[i] for k in klines.values()) for i in range(_tracer.TAGGED_KINDS)]
    by_mods = [sum(k[i] for k in mkinds.values()) for i in range(_tracer.TAGGED_KINDS)]
    assert by_mods == by_lines


def in_modules():
    _tracer.set_module(2)
    block(0x1000, MiB)                              # module 2, gradient later
    _tracer.set_module(3)
    block(0x2000, 2 * MiB)                          # module 3, saved
    tag(SAVED, 0x2000)
    block(0x3000, MiB)                              # module 3, tagged before its size
    tag(PARAMETER, 0x3000)
    block(0x4000, 4 * MiB)                          # the peak
    block(0x4000, -4 * MiB)
    _tracer.set_module(0)
    tag(GRADIENT, 0x1000)                           # after the peak: reaches back
    tag(0, 0x2000, only_from=SAVED, back=False)     # released: from now on only
    block(0x1000, -MiB); block(0x2000, -2 * MiB); block(0x3000, -MiB)
    return 0


def test_a_modules_kinds_move_with_its_blocks_tags_back_to_the_peak():
    peak = peaks_of(in_modules)[in_modules.__code__]
    size, lineno, *_, modules, mkinds = peak
    assert (size, lineno) == (8 * MiB, line_of(in_modules, "# the peak"))
    assert modules == {2: MiB, 3: 7 * MiB}
    assert {m: kinds(k) for m, k in mkinds.items()} == \
        {2: {GRADIENT: MiB}, 3: {SAVED: 2 * MiB, PARAMETER: MiB}}
    sums_agree(peak)


def inner():
    _tracer.set_module(6)
    block(0x6000, MiB)                              # module 6
    tag(GRADIENT, 0x6000)
    _tracer.set_module(4)
    return 0


def outer():
    _tracer.set_module(4)
    block(0x5000, 2 * MiB)                          # module 4
    inner()
    block(0x7000, 8 * MiB)                          # outer's peak
    block(0x7000, -8 * MiB)
    _tracer.set_module(0)
    tag(SAVED, 0x5000)                              # after both peaks
    block(0x5000, -2 * MiB); block(0x6000, -MiB)
    return 0


def test_nested_calls_keep_the_kinds_of_their_own_modules():
    peaks = peaks_of(outer, inner)
    *_, modules, mkinds = peaks[outer.__code__]
    assert modules == {4: 10 * MiB, 6: MiB}
    assert {m: kinds(k) for m, k in mkinds.items()} == \
        {4: {SAVED: 2 * MiB}, 6: {GRADIENT: MiB}}
    sums_agree(peaks[outer.__code__])
    *_, modules, mkinds = peaks[inner.__code__]
    assert modules == {6: MiB}                      # 0x5000 was alive before inner began
    assert {m: kinds(k) for m, k in mkinds.items()} == {6: {GRADIENT: MiB}}
    sums_agree(peaks[inner.__code__])
