"""What held the memory when an out-of-memory error escaped a profiled call.

``capture(exc)`` runs where the profiler first sees the exception (the
wrapper's handler, ``LineProfiler.__exit__``, the ``run`` command), while the
traceback's frames still hold the tensors.  It returns a plain dict, the
post-mortem, which the profiler attaches to the record of the innermost
profiled function the error passed through (``stats()``, the JSON export) and
prints after the line table (``reports.postmortem_text``, which needs no torch)::

    {"error": "OutOfMemoryError", "device": "cuda:0",
     "when": "at the failing allocation",        # or "after the error"
     "requested_bytes": ..., "allocated_bytes": ..., "reserved_bytes": ...,
     "free_bytes": ..., "total_bytes": ...,      # the device (CPU: the machine)
     "fragmentation_bytes": ...,                 # reserved - allocated
     "largest_free_block_bytes": ...,            # CUDA: largest inactive block
     "tensors": [{"name", "kind", "dtype", "shape", "bytes", "line"}, ...],   # top 10
     # kind: "local" (a frame's variable), else MemReporter's "gradient" or "other"
     "live_by_line": {"bytes", "call", "before_call", "other_threads",
                      "after_call", "lines": [{"lineno", "bytes"}, ...],
                      "by_kind": {...}, "by_module": {...}},   # since version 6
     "hints": ["..."]}

On CUDA, ``requested_bytes`` is what the allocator tried to reserve for the
request: the request rounded up as the caching allocator does (to 2 MiB for
large requests; a small one asks for a whole 2 MiB or 20 MiB segment).
CUDA figures come from the caching allocator's out-of-memory observer
(``torch._C._cuda_attach_out_of_memory_observer``), which runs inside the
failing allocation, before any frame unwinds.  A CPU allocation failure
(``DefaultCPUAllocator: can't allocate memory``, a RuntimeError) is read in the
handler: the CPU allocator caches nothing, so nothing changed in between.  A
figure that cannot be known is None.

``live_by_line`` (new in schema version 4; only where the profiler follows
allocations one by one, and of the moment of ``allocated_bytes``, which it
splits exactly: on CUDA it is read in the handler and given only when the
allocator's allocated bytes are still those the observer read): what was alive, by where it was made, around the failing
call of the innermost profiled function: ``lines``, what each of its lines
made during that call (callees included) and still alive, in line order;
``before_call``, alive before that call began; ``other_threads``, made by
other threads during it; ``after_call``, made after it ended, before these
figures were read.  ``bytes`` is their sum.  ``by_kind`` (schema version 6,
where exact) splits ``bytes`` by kind as a peak's ``by_kind`` does (before
the call: input; made during it: temporary; other threads and after it:
other; see ``pytorch_memlab.kinds``), ``by_module`` the lines' bytes by the
module that made them.  The profiler reads it through ``capture``'s
``live``, before it switches its tracer off.
"""
from __future__ import annotations

import dis
import os
import re
import threading
import types
from typing import Any, Callable, Container, Optional

import torch

from ..common.devices import device_matches
from ..common.frames import frame_tensors, is_own_frame
from ..kinds.breakdown import live_kinds

TOP = 10
_CPU_OOM = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")

_events = threading.local()     # .last: the latest CUDA OOM seen on this thread
_watch_lock = threading.Lock()
_watching = False


# ---------------------------------------------------------------- CUDA observer

def _on_cuda_oom(device: int, requested: int, limit: int, free: int) -> None:
    """Runs inside the failing allocation (the allocator's lock released)."""
    try:
        stats = torch.cuda.memory_stats(device)
        largest = 0
        for segment in torch.cuda.memory._snapshot().get("segments", []):
            if int(segment.get("device", -1)) == device:
                for block in segment.get("blocks", ()):
                    if block.get("state") == "inactive":
                        largest = max(largest, int(block["size"]))
        _events.last = {
            "device": f"cuda:{device}", "requested_bytes": int(requested),
            "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0)),
            "reserved_bytes": int(stats.get("reserved_bytes.all.current", 0)),
            "free_bytes": int(free), "total_bytes": int(limit),
            "largest_free_block_bytes": largest,
            "num_ooms": int(stats.get("num_ooms", 0))}
    except Exception:   # never raise inside the allocator
        _events.last = None


def _attach() -> None:
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is not None:
        attach(_on_cuda_oom)


def watch_cuda() -> None:
    """Attach the observer once per process, when CUDA is (or gets) initialised.
    There is no detach: it stays, and costs nothing until an allocation fails."""
    global _watching
    if _watching or not torch.cuda.is_available():
        return
    with _watch_lock:
        if _watching:
            return
        _watching = True
        try:
            if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch: unannotated
                _attach()
            else:
                # device allocators exist only after init
                torch.cuda._lazy_call(_attach)  # type: ignore[no-untyped-call]  # torch: unannotated
        except Exception:   # no observer: the figures are read after the error instead
            pass


def _fresh_cuda_event(exc: BaseException) -> Optional[dict[str, Any]]:
    """The observer's reading for this error: the latest on this thread, if no
    other OOM happened on its device since."""
    event: Optional[dict[str, Any]] = getattr(_events, "last", None)
    _events.last = None
    if event is None or "Tried to allocate" not in str(exc):
        return None
    try:
        index = int(event["device"].split(":")[1])
        if int(torch.cuda.memory_stats(index).get("num_ooms", 0)) != event["num_ooms"]:
            return None
    except Exception:
        return None
    return event


# ---------------------------------------------------------------- the figures

def is_oom(exc: BaseException) -> bool:
    """An allocator's failure: CUDA's OutOfMemoryError ("... Tried to allocate
    ...") or the CPU allocator's RuntimeError.  An OutOfMemoryError raised by
    hand, without an allocation, gets no post-mortem."""
    if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return "Tried to allocate" in str(exc)
    return isinstance(exc, RuntimeError) and _CPU_OOM.search(str(exc)) is not None


def _cpu_figures(exc: BaseException) -> dict[str, Any]:
    found = _CPU_OOM.search(str(exc))
    out: dict[str, Any] = {"device": "cpu", "requested_bytes": int(found.group(1)) if found else None,
                           "allocated_bytes": None, "reserved_bytes": None,
                           "free_bytes": None, "total_bytes": None,
                           "largest_free_block_bytes": None}
    try:
        from .timeline import read_totals
        out["allocated_bytes"], out["reserved_bytes"] = read_totals("cpu", 0)
    except Exception:
        pass
    try:
        out["total_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    out["free_bytes"] = int(line.split()[1]) * 1024
    except (OSError, ValueError, AttributeError):
        pass
    return out


def _cuda_after(exc: BaseException) -> dict[str, Any]:
    """No observer reading: what the allocator holds now, after the unwinding."""
    index = torch.cuda.current_device()
    stats = torch.cuda.memory_stats(index)
    free, total = torch.cuda.mem_get_info(index)
    return {"device": f"cuda:{index}", "requested_bytes": None,
            "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0)),
            "reserved_bytes": int(stats.get("reserved_bytes.all.current", 0)),
            "free_bytes": int(free), "total_bytes": int(total),
            "largest_free_block_bytes": None}


# ---------------------------------------------------------------- the tensors

def _assigned_line(code: types.CodeType, name: str, current: int) -> Optional[int]:
    """The line that last stored ``name`` in ``code`` at or before ``current``."""
    stores: list[int] = []
    line: Optional[int] = None
    for ins in dis.get_instructions(code):
        positions = getattr(ins, "positions", None)
        if positions is not None and positions.lineno:
            line = positions.lineno
        elif isinstance(ins.starts_line, int) and not isinstance(ins.starts_line, bool):
            line = ins.starts_line
        if ins.opname.startswith("STORE_") and line is not None:
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            if name in names:
                stores.append(line)
    before = [n for n in stores if n <= current]
    if before:
        return max(before)
    return max(stores) if stores else None


def _frames(exc: BaseException) -> list[types.FrameType]:
    """The traceback's frames outside pytorch_memlab, innermost first."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        if not is_own_frame(tb.tb_frame):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames[::-1]


def _live_tensors(exc: BaseException, device: str) -> list[dict[str, Any]]:
    """MemReporter's rows on ``device`` (largest first), the frames' local
    variables named after themselves."""
    from ..mem_reporter.collect import Collector, walk_gc   # only once memory ran out
    col = Collector()
    origin: dict[str, str] = {}
    try:
        for name, tensor, frame, var in frame_tensors(_frames(exc)):
            if col.seen(tensor):
                continue
            col.add(tensor, name, "local")
            code = frame.f_code
            line = _assigned_line(code, var, frame.f_lineno)
            if line is not None:
                origin[name] = f"{os.path.basename(code.co_filename)}:{line}"
        walk_gc(col)
        rows = col.sorted_rows()
    finally:
        col.release()
    want = torch.device(device)
    mine = [r for r in rows if r.alias_of is None and r.bytes > 0
            and device_matches(want, torch.device(r.device))]
    mine.sort(key=lambda r: -r.bytes)
    return [{"name": r.name, "kind": r.kind, "dtype": r.dtype, "shape": list(r.shape),
             "bytes": r.bytes, "line": origin.get(r.name)} for r in mine[:TOP]]


# ---------------------------------------------------------------- by line

# Reads, for a device label, what is alive now around the failing call:
# (bytes, call, before_call, other_threads, after_call, {lineno: live}) or None
# (tracers.TracerSet.live_by_line, bound to the failing function's code)
LiveReader = Callable[[str], Optional[tuple[int, int, int, int, int, dict[int, int], Any]]]


def _live_by_line(live: LiveReader, pm: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The breakdown of ``allocated_bytes``, or None where it does not add up
    to it.  CUDA's figures were read inside the failing allocation and the
    breakdown is read now, in the handler: kept only if the allocator's
    allocated bytes have not moved in between (nothing freed while unwinding)."""
    if pm["allocated_bytes"] is None:
        return None
    if pm["when"] != "after the error":
        index = int(pm["device"].split(":")[1])
        now = torch.cuda.memory_stats(index).get("allocated_bytes.all.current")
        if now != pm["allocated_bytes"]:
            return None
    found = live(pm["device"])
    if found is None:
        return None
    total, call, before, other, after, lines, *rest = found   # then the kinds, if read
    kinds = rest[0] if rest else None
    if total != pm["allocated_bytes"]:
        return None
    by_line: dict[str, Any] = {
        "bytes": total, "call": call, "before_call": before, "other_threads": other,
        "after_call": after, "lines": [{"lineno": n, "bytes": lines[n]} for n in sorted(lines)]}
    if kinds is not None:
        by_line.update(live_kinds(before, sum(lines.values()), other, after, *kinds))
    return by_line


# ---------------------------------------------------------------- entry points

def capture(exc: BaseException, live: Optional[LiveReader] = None) -> Optional[dict[str, Any]]:
    """The post-mortem of ``exc``, or None if it is no out-of-memory error.
    ``live``: where the profiler can tell, what is alive by line (read right
    after the allocator's figures).  Never raises: a failure to read
    something leaves that figure None (and no ``live_by_line``)."""
    if not is_oom(exc):
        return None
    try:
        if isinstance(exc, RuntimeError) and _CPU_OOM.search(str(exc)):
            pm, when = _cpu_figures(exc), "after the error"
        else:
            event = _fresh_cuda_event(exc) if torch.cuda.is_available() else None
            if event is not None:
                pm, when = event, "at the failing allocation"
                pm.pop("num_ooms", None)
            elif (torch.cuda.is_available()
                  and torch.cuda.is_initialized()):  # type: ignore[no-untyped-call]  # torch: unannotated
                pm, when = _cuda_after(exc), "after the error"
            else:
                pm, when = _cpu_figures(exc), "after the error"
        pm = dict(pm)
        pm["error"] = type(exc).__name__
        pm["when"] = when
        reserved, allocated = pm["reserved_bytes"], pm["allocated_bytes"]
        pm["fragmentation_bytes"] = (None if reserved is None or allocated is None
                                     else reserved - allocated)
        if live is not None:
            try:
                by_line = _live_by_line(live, pm)
            except Exception:
                by_line = None
            if by_line is not None:
                pm["live_by_line"] = by_line
        try:
            pm["tensors"] = _live_tensors(exc, pm["device"])
        except Exception:
            pm["tensors"] = []
        from ..reports.postmortem_text import hints
        pm["hints"] = hints(pm)
        return pm
    except Exception:
        return None


def attach(records: list[Any], found: Optional[tuple[types.CodeType, dict[str, Any]]]) -> list[Any]:
    """Put the post-mortem on the records of the function it belongs to."""
    if found is not None:
        code, pm = found
        for record in records:
            if (record.filename == code.co_filename
                    and record.first_line == code.co_firstlineno):
                record.postmortem = pm
    return records


def innermost(exc: BaseException, codes: Container[types.CodeType]) -> Optional[types.CodeType]:
    """The innermost profiled code object ``exc`` passed through."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            found = tb.tb_frame.f_code
        tb = tb.tb_next
    return found


def noted_before(exc: BaseException, profiler: object) -> bool:
    """Has ``profiler`` noted ``exc`` already?  The first note, nearest the
    failure and while the tracer still follows the allocations, keeps its
    post-mortem (``run`` notes the error again once the program ended).
    Marked on the exception: exceptions take no weak references."""
    seen = getattr(exc, "_pytorch_memlab_noted", ())
    if id(profiler) in seen:
        return True
    try:
        exc._pytorch_memlab_noted = (*seen, id(profiler))  # type: ignore[attr-defined]
    except (AttributeError, TypeError):   # no __dict__: noted again, as before
        pass
    return False
