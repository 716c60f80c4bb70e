"""Kinds of the followed blocks, in the tracer alone: the test source
"deferred" pushes blocks as the CUDA source does (sizes after the event), and
tags are given by address.  A tag reaches every peak the block was alive at;
a tag from now on leaves earlier peaks alone; a block made before the tracer
was enabled is taken in with the size it is tagged with, and a size that
proves wrong says the kinds are not exact while the level stays right."""
import pytest

from helpers import MiB, line_of

from pytorch_memlab import _testsource, _tracer

block = _testsource.deferred_block
PARAMETER, GRADIENT, SAVED = 1, 3, 5      # the tracer's numbers (kinds.names.TAGGED)
TRACER = []                                 # the tracer the profiled functions tag in


@pytest.fixture(autouse=True)
def fresh_readings():
    _testsource.manual_reset()
    yield
    _testsource.manual_reset()
    TRACER.clear()


def tag(kind, ptr, size=0, only_from=-1, back=True):
    return _tracer.tag_blocks(TRACER[0], kind, [ptr], [size], only_from, back)


def run(*funcs):
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
    assert modules_missing is None
    return {code: peak for code, peak in peaks}, missing


def kinds(values):
    return {n: v for n, v in zip(range(1, _tracer.TAGGED_KINDS + 1), values) if v}


def after_the_peak():
    block(0x1000, 4 * MiB)                          # made
    block(0x2000, 8 * MiB)                          # temporary
    block(0x2000, -8 * MiB)
    tag(GRADIENT, 0x1000)                           # tagged
    tag(PARAMETER, 0x100, MiB)                      # made before: taken in
    block(0x1000, -4 * MiB)
    return 0


def test_a_tag_reaches_back_to_the_peak_and_a_block_from_before_is_taken_in():
    block(0x100, MiB)
    peaks, missing = run(after_the_peak)
    size, lineno, call, before, other, held, kbefore, kother, klines, modules, mkinds = \
        peaks[after_the_peak.__code__]
    assert missing is None
    assert (size, lineno, before, other) == (13 * MiB, line_of(after_the_peak, "# temporary"),
                                            MiB, 0)
    assert kinds(kbefore) == {PARAMETER: MiB} and kinds(kother) == {}
    made = line_of(after_the_peak, "# made")
    assert held == {made: 4 * MiB, lineno: 8 * MiB}
    assert {n: kinds(k) for n, k in klines.items()} == {made: {GRADIENT: 4 * MiB}}
    block(0x100, -MiB)                              # its free: the size it was taken in with


def saved_then_released():
    block(0x1000, 2 * MiB)                          # saved
    tag(SAVED, 0x1000, only_from=0)                 # only an untagged block
    tag(PARAMETER, 0x1000, only_from=0)             # no longer untagged: stays saved
    block(0x2000, MiB)                              # first peak
    block(0x2000, -MiB)
    tag(0, 0x1000, only_from=SAVED, back=False)     # released: from now on
    block(0x3000, 4 * MiB)                          # higher peak
    block(0x3000, -4 * MiB); block(0x1000, -2 * MiB)
    return 0


def test_a_tag_from_now_on_leaves_the_earlier_peaks_alone():
    peaks, missing = run(saved_then_released)
    size, lineno, *_, klines, modules, mkinds = peaks[saved_then_released.__code__]
    assert (size, lineno) == (6 * MiB, line_of(saved_then_released, "# higher peak"))
    assert all(not kinds(k) for k in klines.values())       # no longer saved at that one
    assert missing is None


def first_peak_only():
    block(0x1000, 2 * MiB)                          # saved
    tag(SAVED, 0x1000)
    block(0x2000, MiB)                              # the peak
    block(0x2000, -MiB)
    tag(0, 0x1000, only_from=SAVED, back=False)
    tag(GRADIENT, 0x1000)                           # cannot reach back: it was saved then
    block(0x1000, -2 * MiB)
    return 0


def test_a_peak_keeps_the_kind_it_was_told_once_a_block_changed_from_now_on():
    peaks, missing = run(first_peak_only)
    *_, klines, modules, mkinds = peaks[first_peak_only.__code__]
    assert {n: kinds(k) for n, k in klines.items()} == \
        {line_of(first_peak_only, "# saved"): {SAVED: 2 * MiB}}
    assert missing is None


def wrong_size():
    tag(PARAMETER, 0x100, MiB // 2)                 # half its block
    block(0x100, -MiB)                              # freed: the source's size counts
    block(0x200, 3 * MiB)                           # the peak
    block(0x200, -3 * MiB)
    return 0


def test_a_wrong_size_says_the_kinds_are_not_exact_and_the_level_stays_right():
    block(0x100, MiB)
    block(0x50, MiB)
    peaks, missing = run(wrong_size)
    size, lineno, call, before, *_ = peaks[wrong_size.__code__]
    assert (size, before) == (4 * MiB, MiB)        # 0x50 and the new block
    assert missing == "a storage's size differs from its block's"
    block(0x50, -MiB)


def too_large():
    tag(PARAMETER, 0x777, 8 * MiB)                  # no such block before the call
    block(0x200, MiB)                               # the peak
    block(0x200, -MiB)
    return 0


def test_a_storage_larger_than_what_was_alive_before_is_not_taken_in():
    block(0x100, MiB)
    peaks, missing = run(too_large)
    *_, kbefore, kother, klines, modules, mkinds = peaks[too_large.__code__]
    assert not kinds(kbefore) and "not one the memory source counts" in missing
    block(0x100, -MiB)


def inner():
    block(0x1000, MiB)                              # inner makes
    tag(GRADIENT, 0x1000)
    return 0


def outer():
    block(0x2000, 2 * MiB)                          # outer makes
    inner()                                         # calls inner
    block(0x1000, -MiB); block(0x2000, -2 * MiB)
    return 0


def test_nested_calls_see_a_tag_on_their_own_lines():
    peaks, missing = run(outer, inner)
    *_, klines, modules, mkinds = peaks[outer.__code__]
    assert {n: kinds(k) for n, k in klines.items()} == \
        {line_of(outer, "# calls inner"): {GRADIENT: MiB}}
    *_, klines, modules, mkinds = peaks[inner.__code__]
    before = peaks[inner.__code__][3]
    assert before == 2 * MiB
    assert {n: kinds(k) for n, k in klines.items()} == \
        {line_of(inner, "# inner makes"): {GRADIENT: MiB}}


def test_bad_arguments_are_refused_with_what_is_accepted():
    t = _tracer.Tracer(_testsource.deferred_source, 0, ["bytes.peak"],
                       growth_field="bytes.current")
    with pytest.raises(ValueError, match="expected kinds 0"):
        _tracer.tag_blocks(t, _tracer.TAGGED_KINDS + 1, [1], [1])
    with pytest.raises(ValueError, match="1 ptrs but 2 sizes"):
        _tracer.tag_blocks(t, 1, [1], [1, 2])
    with pytest.raises(ValueError, match="expected bytes >= 0"):
        _tracer.tag_blocks(t, 1, [1], [-1])
    with pytest.raises(TypeError, match="takes a Tracer"):
        _tracer.peaks_by_kind(object())
    assert _tracer.tag_blocks(t, 1, [1], [1]) == 0            # not enabled: nothing to tag


def in_modules():
    _tracer.set_module(7)
    block(0x1000, MiB)                              # module 7
    _tracer.set_module(3)
    block(0x2000, 2 * MiB)                          # module 3
    block(0x3000, 4 * MiB); block(0x3000, -4 * MiB)  # module 3, freed
    _tracer.set_module(0)
    block(0x4000, MiB)                              # no module
    block(0x1000, -MiB); block(0x2000, -2 * MiB); block(0x4000, -MiB)
    return 0


def test_blocks_are_charged_to_the_module_the_thread_runs():
    peaks, missing = run(in_modules)
    size, lineno, *_, modules, mkinds = peaks[in_modules.__code__]
    assert (size, lineno) == (7 * MiB, line_of(in_modules, "# module 3, freed"))
    assert modules == {7: MiB, 3: 6 * MiB} and mkinds == {}     # nothing tagged
    peaks, missing = run(in_modules)                # the same from a later enable
    assert peaks[in_modules.__code__][-2] == {7: MiB, 3: 6 * MiB}
    with pytest.raises(ValueError, match="expected a module number"):
        _tracer.set_module(-1)


def made_then_left():
    _tracer.set_module(2)
    block(0x1000, MiB)                              # module 2, tagged
    tag(GRADIENT, 0x1000)
    _tracer.set_module(0)
    block(0x2000, 2 * MiB)                          # no module
    return 0


def test_what_is_alive_now_by_kind_and_module():
    block(0x100, MiB)                               # before: tagged inside
    t = _tracer.Tracer(_testsource.deferred_source, 0, ["bytes.peak"],
                       growth_field="bytes.current")
    t.add_code(made_then_left.__code__)
    TRACER.append(t)
    t.enable()
    tag(PARAMETER, 0x100, MiB)
    made_then_left()
    block(0x3000, MiB)                              # after the call
    tag(SAVED, 0x3000)                              # before its size came: counted once it does
    block(0x4000, 16)                               # the source's next event sizes it
    places, modules = _tracer.live_kinds(t, made_then_left.__code__)
    t.disable()
    before, during, other, after = (kinds(p) for p in places)
    assert (before, during, other, after) == ({PARAMETER: MiB}, {GRADIENT: MiB}, {},
                                              {SAVED: MiB})
    assert modules == {2: MiB}
    assert _tracer.live_kinds(t, made_then_left.__code__) is None      # disabled
    for ptr, size in ((0x100, MiB), (0x1000, MiB), (0x2000, 2 * MiB), (0x3000, MiB),
                      (0x4000, 16)):
        block(ptr, -size)


def module_peaks(*funcs):
    """run's peaks, with the modules' figures exact."""
    peaks, missing = run(*funcs)
    assert missing is None
    return peaks


# ---- what each module holds at a peak, by kind (every block here is made
# inside a module): a module's tagged bytes move as its lines' do, back to
# every peak the block was alive at, in nested calls too, and every peak's
# modules' kinds add up, kind by kind, to its lines'

def sums_agree(peak):
    """Per module, its kinds within its bytes; per kind, the modules' sum is
    the lines' (all made in modules)."""
    *_, klines, modules, mkinds = peak
    assert set(mkinds) <= set(modules)
    assert all(sum(k) <= modules[m] for m, k in mkinds.items())
    by_lines = [sum(k[i] for k in klines.values()) for i in range(_tracer.TAGGED_KINDS)]
    by_mods = [sum(k[i] for k in mkinds.values()) for i in range(_tracer.TAGGED_KINDS)]
    assert by_mods == by_lines


def made_in_modules():
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
    peak = module_peaks(made_in_modules)[made_in_modules.__code__]
    size, lineno, *_, modules, mkinds = peak
    assert (size, lineno) == (8 * MiB, line_of(made_in_modules, "# the peak"))
    assert modules == {2: MiB, 3: 7 * MiB}
    assert {m: kinds(k) for m, k in mkinds.items()} == \
        {2: {GRADIENT: MiB}, 3: {SAVED: 2 * MiB, PARAMETER: MiB}}
    sums_agree(peak)


def mod_inner():
    _tracer.set_module(6)
    block(0x6000, MiB)                              # module 6
    tag(GRADIENT, 0x6000)
    _tracer.set_module(4)
    return 0


def mod_outer():
    _tracer.set_module(4)
    block(0x5000, 2 * MiB)                          # module 4
    mod_inner()
    block(0x7000, 8 * MiB)                          # mod_outer's peak
    block(0x7000, -8 * MiB)
    _tracer.set_module(0)
    tag(SAVED, 0x5000)                              # after both peaks
    block(0x5000, -2 * MiB); block(0x6000, -MiB)
    return 0


def test_nested_calls_keep_the_kinds_of_their_own_modules():
    peaks = module_peaks(mod_outer, mod_inner)
    *_, modules, mkinds = peaks[mod_outer.__code__]
    assert modules == {4: 10 * MiB, 6: MiB}
    assert {m: kinds(k) for m, k in mkinds.items()} == \
        {4: {SAVED: 2 * MiB}, 6: {GRADIENT: MiB}}
    sums_agree(peaks[mod_outer.__code__])
    *_, modules, mkinds = peaks[mod_inner.__code__]
    assert modules == {6: MiB}                      # 0x5000 was alive before mod_inner began
    assert {m: kinds(k) for m, k in mkinds.items()} == {6: {GRADIENT: MiB}}
    sums_agree(peaks[mod_inner.__code__])
