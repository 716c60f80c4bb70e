"""Typed face of the C tracer (src/tracer/).  It knows nothing about torch.

A *source* is either a PyCapsule named "pytorch_memlab.memlab_source" holding a
``const memlab_source *`` (include/memlab/source.h), or a Python object with:

    name: str
    fields: tuple[str, ...]                 # e.g. "active_bytes.all.peak"
    kinds: tuple[str, ...]                  # per field: "level", "peak" or "counter"
    units: tuple[str, ...]                  # optional, per field: "count" (default), "bytes"
    def prepare(self, device: int) -> None
    def sample(self, device: int) -> Sequence[int]   # len(fields) ints
    def reset_peaks(self, device: int) -> None

and optionally the push path (all three, or the source is polled):

    def open_reader(self, device: int) -> int        # a fresh peak register
    def close_reader(self, device: int, reader: int) -> None
    def read(self, device: int, reader: int) -> Sequence[int]
        # like sample(), but a peak field is this reader's peak since its last
        # read (then rearmed), a counter the calling thread's own total;
        # nothing shared is reset.  One reader per thread's stack of profiled
        # frames.

How a column is aggregated is decided by its field's kind, which the source
declares (a capsule in its memlab_field table, a Python source in ``kinds``):
  "peak"    -> per line execution: peak during the line; over executions: max
  "counter" -> delta during the line; over executions: sum
  "level"   -> value at the end of the line; over executions: max
"""
from types import CodeType
from typing import Any, Callable, Optional, Protocol, Sequence, TypeAlias, TypeVar, Union, final

_T = TypeVar("_T")

@final
class Capsule:
    """A PyCapsule named "pytorch_memlab.memlab_source" (the torch shim's
    sources, ``_testsource``'s): a type for annotations only (there is no
    such class at run time; ``types.CapsuleType`` from Python 3.13)."""

class PythonSource(Protocol):
    """A source written in Python (the CUDA fallback, the tests' sources);
    ``units`` is optional, and so is the push path (``open_reader``,
    ``close_reader``, ``read``), which is not typed here."""
    @property
    def name(self) -> str: ...
    @property
    def fields(self) -> tuple[str, ...]: ...
    @property
    def kinds(self) -> tuple[str, ...]: ...
    def prepare(self, device: int) -> None: ...
    def sample(self, device: int) -> Sequence[int]: ...
    def reset_peaks(self, device: int) -> None: ...

# What the tracer reads: a capsule it calls in C, or a Python source.
Source: TypeAlias = Union[Capsule, PythonSource]

MECHANISM: str
CURVE_MAX_POINTS: int
""""monitoring" (sys.monitoring, 3.12+) or "settrace" (PyEval_SetTrace).
Set PYTORCH_MEMLAB_TRACER=settrace before import to force the latter."""

def source_info(source: Source, /) -> tuple[str, tuple[str, ...]]:
    """(name, fields) of a capsule or Python source."""

def field_table(source: Source, /) -> tuple[tuple[str, str, str], ...]:
    """(name, kind, unit) of each field of a capsule or Python source: kind
    "level", "peak" or "counter", unit "count" or "bytes"."""

def allocated_at(source: str, device: int, ptr: int, /) -> tuple[CodeType, int] | None:
    """(code, lineno) of the profiled line that allocated the live block
    starting at address ``ptr`` of the source named ``source`` on ``device``,
    as an enabled tracer whose source pushes its allocations recorded it
    (the innermost profiled function running then; a block made on a
    callee's line counts on that callee).  None when no enabled tracer saw
    it made inside a profiled function: made outside them or before the
    tracer was enabled, or not a live block's start.  Read-only.
    ValueError for a ``ptr`` that is no address."""

TAGGED_KINDS: int
"""How many kinds tag_blocks takes (numbered from 1)."""

def tag_blocks(tracer: Tracer, kind: int, ptrs: Sequence[int], sizes: Sequence[int],
               only_from: int = -1, back: bool = True, /) -> int:
    """Tag the live blocks of ``tracer``'s device at ``ptrs`` as ``kind`` (1 to
    TAGGED_KINDS; 0 untags): their bytes count as that kind in every open
    call and, with ``back``, at every peak of this enable() they were alive
    at (without: from now on only, a role that ended).  ``only_from`` >= 0:
    only blocks of that kind now (0: untagged ones).  A block made before the
    tracer was enabled is taken in with ``sizes[i]`` bytes, as alive before
    every call, where that fits the untagged bytes alive before each; else
    the kinds are marked not exact.  Returns how many blocks changed kind."""

def peaks_by_kind(tracer: Tracer, /) -> tuple[list[tuple[CodeType, tuple[
        int, int, int, int, int, dict[int, int], tuple[int, ...], tuple[int, ...],
        dict[int, tuple[int, ...]], dict[int, int], dict[int, tuple[int, ...]]] | None]],
        str | None, str | None]:
    """``Tracer.peaks()`` with the tagged kinds and the modules: each peak is
    ``(bytes, lineno, call, before_call, other_threads, {lineno: held},
    before's tagged bytes, other threads', {lineno: a line's tagged bytes},
    {module: bytes}, {module: its tagged bytes})``, the tagged bytes in kind
    order (TAGGED_KINDS each; the untagged rest of each part is not tagged),
    the modules' what each made during the call (set_module), still alive,
    and of that what is tagged (modules holding some).  Then why the kinds
    are not exact and why the modules are not, or None."""

def live_kinds(tracer: Tracer, code: CodeType, /) -> tuple[tuple[tuple[int, ...], ...],
                                                          dict[int, int]] | None:
    """Beside ``Tracer.live_by_line(code)``: the tagged bytes alive now
    before the latest call of ``code``, made during it, made by other threads
    during it, made after it (each in kind order, TAGGED_KINDS long), and
    ``{module: bytes}`` of what each module made during it.  None where
    live_by_line has no figures."""

def set_module(number: int, /) -> None:
    """The calling thread runs module ``number`` (0: none) from now on:
    blocks it makes are charged to it."""

def instances_of(cls: type[_T], /) -> list[_T]:
    """The objects the garbage collector tracks whose type is ``cls`` or a
    subclass of it (type slots only: no object's code runs)."""

def install_thread_hook() -> bool:
    """settrace mechanism only: hook the calling thread if any tracer is
    enabled (threads that existed before enable()).  No-op otherwise."""

def _shutdown() -> None:
    """Disable every tracer (registered with atexit at import)."""

def _thread_starter(*args: Any) -> Any:
    """The threading.settrace hook of the settrace mechanism: runs the hook
    that was there before (returning what it returns, else None), then hooks
    the new thread."""

class ProfiledCall:
    """``func``, with ``enter()`` before each call and ``leave(exception or
    None)`` after it; no Python frame of its own.  Has a ``__dict__``, binds
    as a method, pickles by ``__qualname__``."""
    __code__: CodeType
    __wrapped__: Callable[..., Any]
    def __init__(self, func: Callable[..., Any], enter: Callable[[], object],
                 leave: Callable[[BaseException | None], object]) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: object, owner: type | None = None) -> Any: ...

class Tracer:
    # read-only attributes (getters without setters)
    @property
    def columns(self) -> tuple[str, ...]: ...
    @property
    def growth_field(self) -> str | None: ...
    @property
    def device(self) -> int: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def sample_errors(self) -> int:
        """Readings that failed."""
    @property
    def tool_id(self) -> int:
        """The sys.monitoring tool id, or -1."""
    @property
    def followed_blocks(self) -> tuple[int, int]:
        """(live blocks followed for the breakdown of the peak, slots of the
        table that holds them): its host memory is the slots'."""
    @property
    def followed_level(self) -> Optional[int]:
        """The level (active bytes) the followed blocks make, as the
        source's pushes rebuild it; None while no block is followed."""
    @property
    def peak_unavailable(self) -> str | None:
        """Why ``peaks()`` has no breakdown (a polled source, memory ran out,
        the device changed), or None."""
    def __init__(self, source: Source, device: int, columns: Sequence[str],
                 growth_field: str | None = None, curve: str | int | None = None,
                 curve_columns: tuple[str | None, str | None] | None = None,
                 follow_blocks: bool = True) -> None:
        """ValueError naming the valid fields if a column is unknown.
        ``curve``: which outermost call of each registered function to keep
        the line events of ("peak", "first", "last", a call number >= 1, or
        None: none); ``curve_columns``: (column read as the reserved level,
        column read as the line's peak), each a column or None (then the
        growth field's level); ``follow_blocks``: follow each allocation for
        ``peaks()`` when the source pushes them (False: the benchmark's
        baseline)."""
    def add_code(self, code: CodeType, /) -> None: ...
    def codes(self) -> list[CodeType]: ...
    def enable(self) -> None: ...
    def disable(self) -> None:
        """Commit every open line of every thread, remove all hooks."""
    def set_device(self, device: int, /) -> None:
        """Read another device from the next event on (prepares it if enabled)."""
    def clear(self, keep_calls: bool = False) -> None:
        """Forget the figures.  ``keep_calls``: the calls go on being counted
        and each line's least growth per call is kept; the first call's
        figures go (``call_stats`` says ``first_kept`` False)."""
    def stats(self) -> list[tuple[CodeType, dict[int, tuple[int, int, tuple[int, ...]]]]]:
        """[(code, {lineno: (count, net_growth, values_in_column_order)}), ...],
        one pair per registered code object, in registration order.  A list,
        not a dict: code objects compiled from the same source in two files
        compare equal, yet each has its own figures (find yours with ``is``).
        net_growth sums (growth_field at line end - at line start); 0 if
        growth_field is None.  Only lines that ran appear."""
    def call_stats(self) -> list[tuple[CodeType, tuple[int, bool, dict[int, tuple[
            tuple[int, int, tuple[int, ...]] | None,
            tuple[int, int, tuple[int, ...]] | None,
            int | None]], tuple[int | None, tuple[int | None, ...]]]]]:
        """Figures per outermost call, one pair per registered code object in
        registration order: ``(code, (calls, first_kept, {lineno: (first,
        later, least_growth)}, (first_start, later_starts)))``.  ``calls``: the calls the code took part in (a
        call: from a thread entering a profiled function while none runs on
        any thread, to none running anywhere, a suspended generator or
        coroutine counting as running); ``first``: the first call's
        ``(count, net_growth, values)``, ``later``: the same over the calls
        after it (None where the line did not run in them); ``least_growth``:
        the least growth of the line that one call after the first kept
        (callfigures.h; 0 for a call it did not run in), None before the third call.  ``stats()``
        is the two folded together.  ``first_start``: the growth field's level
        when the first call began (None: not kept or not read);
        ``later_starts``, one per column: the level when the later call began
        that first reached the highest figure of the column's lines over the
        later calls (empty before a later call ended)."""
    def peaks(self) -> list[tuple[CodeType, tuple[int, int, int, int, int, dict[int, int]] | None]]:
        """Per registered code object, what was alive at its function's
        highest level (over all its outermost frames): ``(bytes, lineno,
        call, before_call, other_threads, {lineno: held})``, where ``bytes``
        is the level, ``lineno`` the function's line then, ``held`` what each
        line made (callees included) still alive; the parts sum to
        ``bytes``.  None before it ran, or for a source that does not push its
        allocations."""
    def live_by_line(self, code: CodeType, /) -> tuple[int, int, int, int, int, dict[int, int]] | None:
        """What is alive now, around the latest call of ``code`` (an outermost
        frame of it; the out-of-memory post-mortem reads this after that call
        failed): ``(bytes, call, before_call, other_threads, after_call,
        {lineno: live})``, where ``bytes`` is the level now, ``live`` what
        each line made during that call (callees included) and still alive,
        ``before_call`` what was alive before it began, ``other_threads``
        what other threads (or other code while it was suspended at a
        ``yield`` or ``await``) made during it, ``after_call`` what was made after
        it ended; the parts sum to ``bytes``.  O(live allocations).  None
        while disabled, before a call of it ran in this enable(), or for a
        source that does not push its allocations.  TypeError if ``code`` is
        no code object, ValueError if it is not registered."""
    def curves(self) -> list[tuple[CodeType, tuple[list[tuple[int, int, int, int, CodeType | None]],
                                                    int, int, int, int]]]:
        """[(code, (points, merged, call, calls, line_events)), ...] for each
        function with a kept curve: points (lineno, growth level at the line's
        end, reserved level at its end, peak inside it, the nested function's
        code or None), at most CURVE_MAX_POINTS, each holding ``merged``
        consecutive line events (their maxima); ``call`` is the outermost call
        kept, of ``calls``."""
