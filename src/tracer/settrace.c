/* The PyEval_SetTrace hook (<= 3.11, or forced on 3.12+): its events here,
 * its installing and chaining in settrace_install.c.
 *
 * One C trace function per thread serves every enabled tracer.  It is
 * installed on the thread that enables, on threads started afterwards (via
 * threading.settrace), and on any thread that calls install_thread_hook().
 * A thread whose hook finds no enabled tracer removes it.
 *
 * Another tool's trace function (coverage, a debugger) is never replaced: we
 * chain to it.  Our C function takes its place with the other tool's object,
 * so sys.gettrace() still returns what that tool set, and every event goes to
 * us first and then to the other tool's function.  On disable the other
 * tool's function is put back as it was.  Likewise threading.settrace: a hook
 * set before ours runs first in each new thread, and is put back on disable.
 *
 * A tool that calls sys.settrace() after enable() takes the thread from us;
 * an audit hook on "sys.settrace" notices, warns once, and at that thread's
 * next event (a one-shot profile function; or, when a profiler holds that
 * slot, the main thread's next pending-call check) chains to the newcomer
 * or, when it left with settrace(None), installs us alone again.  A tool we
 * chain to that changes the thread's trace function from inside its own
 * (Scalene leaves with PyEval_SetTrace(NULL) at each new line) is looked at
 * as soon as it returns: waiting for the next call event loses the lines
 * run until then.
 *
 * Tools that save sys.gettrace() and call it from their own trace function
 * (memory_profiler) call our token: it does our part of that event when we
 * are not in front of them, and nothing when we are (we had it already). */
#include "settrace_internal.h"

#include <string.h>

/* Where a generator or coroutine frame stands at a 'call' or 'return' event:
 * starting, resuming after a yield or await, thrown into (throw(), close()),
 * suspending at a yield; GEN_NONE: not a generator, or a return or unwind. */
typedef enum { GEN_NONE, GEN_START, GEN_RESUME, GEN_THROW, GEN_YIELD } gen_point;

/* 3.11+: a 'call' comes at a RESUME instruction whose argument is 0 at the
 * start and non-zero after a yield.  The 'return' of a yield, with the value
 * yielded as `arg`, comes at the yield (3.11, 3.12) or at the RESUME after it
 * (3.13+); so does a throw's 'call' (an exception thrown in and not caught
 * unwinds from there too, with no `arg`).  Before 3.11: a frame that has not
 * run yet has f_lasti == -1, and a yield leaves the frame suspended. */
static gen_point
generator_point(PyFrameObject *frame, PyCodeObject *code, int what, PyObject *arg)
{
    if (!(code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
                            | CO_ITERABLE_COROUTINE))) {
        return GEN_NONE;
    }
    int lasti = memlab_frame_lasti(frame);
#if PY_VERSION_HEX >= 0x030B0000
    if (lasti < 0 || memlab_settrace.resume_opcode < 0) {
        return what == PyTrace_CALL ? GEN_START : GEN_NONE;
    }
    PyObject *bytes = PyCode_GetCode(code);
    if (bytes == NULL) {
        PyErr_Clear();
        return GEN_NONE;
    }
    const unsigned char *op = (const unsigned char *)PyBytes_AS_STRING(bytes);
    int at_yield = 0, at_resume = 0, at_start = 0;
    if (lasti + 1 < PyBytes_GET_SIZE(bytes)) {
        at_yield = op[lasti] == memlab_settrace.yield_opcode;
        at_resume = op[lasti] == memlab_settrace.resume_opcode && op[lasti + 1] != 0;
        at_start = op[lasti] == memlab_settrace.resume_opcode && op[lasti + 1] == 0;
    }
    Py_DECREF(bytes);
    if (what == PyTrace_CALL) {
        return at_start ? GEN_START : at_resume ? GEN_RESUME : at_yield ? GEN_THROW : GEN_NONE;
    }
    return (at_yield || at_resume) && arg != NULL ? GEN_YIELD : GEN_NONE;
#else
    if (what == PyTrace_CALL) {
        return lasti < 0 ? GEN_START : GEN_RESUME;
    }
#  if PY_VERSION_HEX >= 0x030A0000
    return frame->f_state == FRAME_SUSPENDED ? GEN_YIELD : GEN_NONE;
#  else
    return frame->f_stacktop != NULL ? GEN_YIELD : GEN_NONE;
#  endif
#endif
}

/* Only 3.11 and 3.12 tell a throw (at the yield) from a resume. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#  define RESUME_MAY_BE_THROWN 0
#else
#  define RESUME_MAY_BE_THROWN 1
#endif

/* The enabled tracer after `t` that registers `code` (its table in *table),
 * the reference to `t` passed to it; NULL after the last. */
static TracerObject *
next_wanting(TracerObject *t, PyObject *code, LineTable **table)
{
    do {
        TracerObject *next = t->next_enabled;
        Py_XINCREF(next);
        Py_DECREF(t);
        t = next;
    } while (t != NULL && (*table = codemap_get(&t->codes, code)) == NULL);
    return t;
}

/* `t`: the first enabled tracer that registers `code`, with its `table`
 * (looked up once by trace_ours); later tracers are looked up here. */
static void
dispatch(PyFrameObject *frame, PyObject *code, int what, PyObject *arg,
         TracerObject *t, LineTable *table)
{
    gen_point point = what == PyTrace_LINE
                      ? GEN_NONE : generator_point(frame, (PyCodeObject *)code, what, arg);
    PyObject *gen = point == GEN_RESUME || point == GEN_THROW || point == GEN_YIELD
                    ? memlab_frame_generator(frame) : NULL;
    if (gen == NULL && PyErr_Occurred()) {
        PyErr_Clear();
    }
    /* Strong references while a Python source's sample() may run code that
     * drops a tracer (this one or the next). */
    Py_INCREF(t);
    while (t != NULL) {
        switch (what) {
        case PyTrace_CALL:
            /* A resumed generator continues the line that yielded (counted
             * before), and no line event comes until it moves on: what runs
             * meanwhile (the awaited callee) is charged to that line. */
            if (point == GEN_RESUME) {
                tracer_on_resume(t, table, PyFrame_GetLineNumber(frame), gen,
                                 RESUME_MAY_BE_THROWN);
            }
            else if (point == GEN_THROW) {
                tracer_on_resume(t, table, -1, gen, 1);
            }
            else {
                tracer_on_start(t, table, -1);
            }
            break;
        case PyTrace_LINE:
            tracer_on_line(t, table, PyFrame_GetLineNumber(frame));
            break;
        case PyTrace_RETURN:
            tracer_on_leave(t, table, point == GEN_YIELD ? gen : NULL);
            break;
        }
        t = next_wanting(t, code, &table);
    }
    Py_XDECREF(gen);
}

/* Our part of an event: 1 when the frame runs registered code. */
static int
trace_ours(PyFrameObject *frame, int what, PyObject *arg, int alone)
{
    if (what != PyTrace_CALL && what != PyTrace_LINE && what != PyTrace_RETURN) {
        return 0;
    }
    PyObject *code = (PyObject *)PyFrame_GetCode(frame);
    TracerObject *t;
    LineTable *table = NULL;
    for (t = memlab_enabled_tracers; t != NULL; t = t->next_enabled) {
        table = codemap_get(&t->codes, code);
        if (table != NULL) {
            break;
        }
    }
    int wanted = table != NULL;
    if (wanted) {
        dispatch(frame, code, what, arg, t, table);
    }
    else if (what == PyTrace_CALL && alone) {
        /* No line events for frames nobody profiles (unless the other
         * tool wants them): without this, <= 3.11 and 3.12's settrace call
         * us for every line of unrelated code (bench_tracer "unrelated":
         * 2.73x -> 2.82x on 3.10, 3.99x -> 4.42x on 3.11).  A
         * debugger started in such a frame wants them: the audit hook sets
         * the flag again on the thread's frames when sys.settrace runs. */
        memlab_settrace.cleared_trace_lines = 1;
        memlab_saved_exc saved;
        memlab_save_exc(&saved);
        if (PyObject_SetAttr((PyObject *)frame, memlab_settrace.str_f_trace_lines,
                             Py_False) < 0) {
            PyErr_Clear();
        }
        memlab_restore_exc(&saved);
    }
    Py_DECREF(code);
    return wanted;
}

/* A frame we profile gives line events, whatever the tool we chain to did
 * at its call event (Scalene clears f_trace_lines on every frame called
 * while its trace function is in place). */
static void
keep_line_events(PyFrameObject *frame)
{
    memlab_saved_exc saved;
    memlab_save_exc(&saved);
    if (PyObject_SetAttr((PyObject *)frame, memlab_settrace.str_f_trace_lines, Py_True) < 0) {
        PyErr_Clear();
    }
    memlab_restore_exc(&saved);
}

int
memlab_trace_function(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    Py_tracefunc func = foreign_func(obj);
    if (func == NULL) {
        if (memlab_enabled_tracers == NULL) {
            memlab_set_trace(NULL, NULL);      /* nobody profiles any more */
        }
        else {
            trace_ours(frame, what, arg, 1);
        }
        return 0;
    }
    /* Chained.  Our part may run Python code (a source's sample()) that
     * disables the last tracer, which puts the other tool's function back,
     * or calls sys.settrace: hold on to what we call it with. */
    Py_XINCREF(obj);
    int wanted = 0;
    if (memlab_enabled_tracers == NULL) {
        memlab_restore_foreign(obj);           /* nobody profiles any more */
    }
    else {
        wanted = trace_ours(frame, what, arg, 0);
    }
    int rc = 0;
    PyThreadState *ts = PyThreadState_Get();
    /* The other tool still traces this thread, through us or on its own
     * again: it gets this event. */
    if (ts->c_traceobj == obj && (ts->c_tracefunc == memlab_trace_function
                                  || ts->c_tracefunc == func)) {
        rc = func(obj, frame, what, arg);
        if (wanted && what == PyTrace_CALL) {
            keep_line_events(frame);
        }
        if (ts->c_tracefunc != memlab_trace_function) {
            memlab_recheck_here();             /* it left, or set another function */
        }
    }
    Py_XDECREF(obj);
    return rc;
}

/* Our token called by another tool's trace function, as the function it
 * found in sys.gettrace() and chains to: (frame, event, arg). */
PyObject *
memlab_chained_call(PyObject *const *args, Py_ssize_t nargs)
{
    PyThreadState *ts = PyThreadState_Get();
    if (memlab_enabled_tracers == NULL || ts->c_tracefunc == memlab_trace_function
            || nargs < 2 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        return Py_NewRef(memlab_settrace.hook_token);   /* in front of it: ours already */
    }
    const char *event = PyUnicode_AsUTF8(args[1]);
    if (event == NULL) {
        return NULL;
    }
    int what = strcmp(event, "call") == 0 ? PyTrace_CALL
               : strcmp(event, "line") == 0 ? PyTrace_LINE
               : strcmp(event, "return") == 0 ? PyTrace_RETURN : -1;
    if (what >= 0) {
        /* A Python trace function sees None for an unwinding return: on
         * 3.11+ a generator yielding None then ends its call there. */
        PyObject *arg = nargs > 2 && args[2] != Py_None ? args[2] : NULL;
        trace_ours((PyFrameObject *)args[0], what, arg, 0);
    }
    /* For a 'call', the frame's local trace function: keep calling us. */
    return Py_NewRef(memlab_settrace.hook_token);
}
