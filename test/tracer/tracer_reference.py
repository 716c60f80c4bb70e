"""The pure-Python reference tracer that test_tracer_property.py holds the C
tracer to: a line-for-line restatement in Python of the semantics in
src/tracer/events.c:

* every event takes one reading and folds the interval into the pending
  figures of the current line of *every* profiled frame on the stack
  (``*.peak``: max, counters: sum of deltas, levels: the last reading, i.e.
  the level at the line's end);
* a line event commits the innermost frame's line and opens the next one; a
  start pushes a frame (a resumed generator continues an already counted
  line: the one it yielded at, so what runs before its next line event is
  charged there); a leave commits and pops the frame, and any frames above it;
* over executions: counters sum, everything else max; count = line events;
  net growth sums (current at line end - at line start).

It listens with the same mechanism as the C tracer (``sys.monitoring`` with
its own tool id, or ``sys.settrace``), so both see the same event stream and
any difference is the C tracer's bookkeeping.  Needs no torch.
"""
import inspect
import opcode
import sys

from pytorch_memlab import _tracer

GROWTH = "bytes.current"                # the growth field the tracers are given


class ManualModel:
    """Python twin of the C manual source."""

    def __init__(self):
        self.fields = {"bytes.current": 0, "bytes.peak": 0,
                       "bytes.allocated": 0, "bytes.freed": 0}

    def manual_alloc(self, n):
        f = self.fields
        f["bytes.current"] += n
        if n > 0:
            f["bytes.allocated"] += n
        else:
            f["bytes.freed"] -= n
        f["bytes.peak"] = max(f["bytes.peak"], f["bytes.current"])

    def sample(self):
        return dict(self.fields)

    def reset_peaks(self):
        self.fields["bytes.peak"] = self.fields["bytes.current"]


def column_kind(name):
    last = name.rsplit(".", 1)[-1]
    if last in ("allocated", "freed"):
        return "counter"
    return "peak" if last == "peak" else "level"


class Frame:
    __slots__ = ("code", "line", "counted", "start_level", "pending")

    def __init__(self, code, line, level, width):
        self.code = code
        self.line = line
        self.counted = 0
        self.start_level = level
        self.pending = [0] * width


class Reference:
    """The tracer's semantics, written plainly (one thread)."""

    def __init__(self, codes, model, columns):
        self.codes = {id(c): c for c in codes}
        self.tables = {id(c): {} for c in codes}
        self.model = model
        self.columns = columns
        self.kinds = [column_kind(c) for c in columns]
        self.summed = [k == "counter" for k in self.kinds]
        self.last_wins = [k == "level" for k in self.kinds]
        self.has_peaks = "peak" in self.kinds
        self.last = {}
        self.stack = []

    def _read(self):
        reading = self.model.sample()
        if self.has_peaks:
            self.model.reset_peaks()
        interval = []
        for name, kind in zip(self.columns, self.kinds):
            if kind == "counter":
                interval.append(reading[name] - self.last[name])
                self.last[name] = reading[name]
            else:
                interval.append(reading[name])
        return interval, reading[GROWTH]

    def start(self):
        reading = self.model.sample()
        if self.has_peaks:
            self.model.reset_peaks()
        self.last = reading

    def _fold(self):
        interval, level = self._read()
        for frame in self.stack:
            pending = frame.pending
            for c, v in enumerate(interval):
                if self.summed[c]:
                    pending[c] += v
                elif self.last_wins[c] or v > pending[c]:
                    pending[c] = v
        return level

    def _commit(self, frame, level, next_line):
        if frame.line >= 0:
            table = self.tables[id(frame.code)]
            row = table.get(frame.line)
            if row is None:
                row = table[frame.line] = [0, 0, list(frame.pending)]
            else:
                values = row[2]
                for c, v in enumerate(frame.pending):
                    values[c] = values[c] + v if self.summed[c] else max(values[c], v)
            row[0] += frame.counted
            row[1] += level - frame.start_level
        frame.pending = [0] * len(self.columns)
        frame.line = next_line
        frame.counted = 1
        frame.start_level = level

    def _push(self, code, line, level):
        self.stack.append(Frame(code, line, level, len(self.columns)))

    def on_start(self, code, line):
        if id(code) in self.tables:
            self._push(code, line, self._fold())

    def on_line(self, code, line):
        if id(code) not in self.tables:
            return
        level = self._fold()
        if not self.stack or self.stack[-1].code is not code:
            self._push(code, -1, level)
        self._commit(self.stack[-1], level, line)

    def on_leave(self, code):
        if id(code) not in self.tables:
            return
        level = self._fold()
        target = len(self.stack) - 1
        while target >= 0 and self.stack[target].code is not code:
            target -= 1
        while target >= 0 and len(self.stack) > target:
            self._commit(self.stack[-1], level, -1)
            self.stack.pop()

    def close_all(self):
        if self.stack:
            level = self._fold()
            while self.stack:
                self._commit(self.stack[-1], level, -1)
                self.stack.pop()

    def stats(self):
        return {self.codes[k]: {line: (row[0], row[1], tuple(row[2]))
                                for line, row in table.items()}
                for k, table in self.tables.items()}


def line_of_offset(code, offset):
    """PyCode_Addr2Line for a bytecode offset, -1 when it has no line."""
    if offset < 0:
        return -1
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return -1 if line is None else line
    return -1


# Both listeners feed every reference the same events; each reference keeps
# only its own code objects (as each C tracer does).

GENERATOR_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                   | inspect.CO_ITERABLE_COROUTINE)


def resumed(frame):
    """A generator resuming after a yield (not starting, not thrown into): it
    continues the line that yielded."""
    code = frame.f_code
    if not code.co_flags & GENERATOR_FLAGS:
        return False
    if sys.version_info < (3, 11):
        return frame.f_lasti >= 0
    raw = code.co_code
    i = frame.f_lasti
    return 0 <= i < len(raw) - 1 and raw[i] == opcode.opmap["RESUME"] and raw[i + 1] != 0


def run_with_settrace(refs, run):
    def local(frame, event, arg):
        if event == "line":
            for ref in refs:
                ref.on_line(frame.f_code, frame.f_lineno)
        elif event == "return":
            for ref in refs:
                ref.on_leave(frame.f_code)
        return local

    def global_trace(frame, event, arg):
        if event == "call" and any(id(frame.f_code) in ref.tables for ref in refs):
            line = frame.f_lineno if resumed(frame) else -1
            for ref in refs:
                ref.on_start(frame.f_code, line)
            return local
        return None

    old = sys.gettrace()
    for ref in refs:
        ref.start()
    sys.settrace(global_trace)
    try:
        run()
    finally:
        sys.settrace(old)
    for ref in refs:
        ref.close_all()


def run_with_monitoring(refs, run):
    mon = sys.monitoring
    ev = mon.events
    tool = next(i for i in (4, 3, 5, 2, 1, 0) if mon.get_tool(i) is None)

    def on_line(code, line):
        for ref in refs:
            ref.on_line(code, line)

    def on_start(code, offset):
        for ref in refs:
            ref.on_start(code, -1)

    def on_resume(code, offset, *exc):
        line = line_of_offset(code, offset)
        for ref in refs:
            ref.on_start(code, line)

    def on_leave(code, offset, arg):
        for ref in refs:
            ref.on_leave(code)

    callbacks = {ev.LINE: on_line, ev.PY_START: on_start, ev.PY_RESUME: on_resume,
                 ev.PY_RETURN: on_leave, ev.PY_YIELD: on_leave,
                 ev.PY_UNWIND: on_leave, ev.PY_THROW: on_resume}
    local = ev.LINE | ev.PY_START | ev.PY_RESUME | ev.PY_RETURN | ev.PY_YIELD
    codes = {id(c): c for ref in refs for c in ref.codes.values()}.values()
    mon.use_tool_id(tool, "memlab-reference")
    try:
        for event, callback in callbacks.items():
            mon.register_callback(tool, event, callback)
        mon.set_events(tool, ev.PY_UNWIND | ev.PY_THROW)
        for code in codes:
            mon.set_local_events(tool, code, local)
        for ref in refs:
            ref.start()
        run()
        for ref in refs:
            ref.close_all()
    finally:
        mon.set_events(tool, 0)
        for code in codes:
            mon.set_local_events(tool, code, 0)
        for event in callbacks:
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)


def run_reference(refs, run):
    if _tracer.MECHANISM == "monitoring":
        run_with_monitoring(refs, run)
    else:
        run_with_settrace(refs, run)
