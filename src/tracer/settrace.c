/* The PyEval_SetTrace hook (<= 3.11, or forced on 3.12+).
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
#include "tracer.h"

#include <string.h>

/* The object passed with our trace function when no other tool traces the
 * thread; sys.gettrace() then returns it.  It is the thread-starter callable,
 * so code that saves and restores the trace function
 * (sys.settrace(sys.gettrace())) reinstalls us harmlessly. */
static PyObject *hook_token;          /* Owned. made once per process */
static PyObject *str_f_trace_lines;   /* Owned. interned, made once per process */
static PyObject *prior_thread_hook;   /* Owned. threading's hook before ours, or NULL */
static int warned_foreign_tracer;    /* since the first tracer was enabled */
static int setting_trace;             /* we are calling PyEval_SetTrace */
static int recheck_pending;
static int cleared_trace_lines;       /* some frame's f_trace_lines was cleared by us */

/* Per OS thread, like the thread state that is current on it. */
#if defined(_MSC_VER)
#  define MEMLAB_THREAD_LOCAL __declspec(thread)
#else
#  define MEMLAB_THREAD_LOCAL _Thread_local
#endif

/* The other tool's trace function on this thread, while we chain to it.
 * Its object is the one the thread state holds for our function (it must
 * stay what sys.gettrace() returns), so we keep no reference to it and
 * allocate nothing: nothing is left to free when the thread ends. */
typedef struct {
    Py_tracefunc func;
    PyObject *obj;        /* Borrowed, only compared: the thread state holds it */
} ForeignTrace;

static MEMLAB_THREAD_LOCAL ForeignTrace foreign;

static int trace_function(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);

/* The other tool's function when our function runs with `obj`; NULL when
 * we trace the thread alone.  (The object check guards against a thread
 * state that moved to this OS thread from another.) */
static Py_tracefunc
foreign_func(PyObject *obj)
{
    return obj != hook_token && obj == foreign.obj ? foreign.func : NULL;
}

static void
forget_foreign(void)
{
    foreign.func = NULL;
    foreign.obj = NULL;
}

static void
set_trace(Py_tracefunc func, PyObject *obj)
{
    /* PyEval_SetTrace (3.9-3.11) drops the old object before it takes the
     * new one: when both are one object, only our reference keeps it. */
    Py_XINCREF(obj);
    setting_trace++;
    PyEval_SetTrace(func, obj);
    setting_trace--;
    Py_XDECREF(obj);
}

/* Put the other tool's function back (or nothing) on this thread, where our
 * function runs with `obj`. */
static void
restore_foreign(PyObject *obj)
{
    Py_tracefunc func = foreign_func(obj);
    forget_foreign();
    if (func != NULL) {
        set_trace(func, obj);
    }
    else {
        set_trace(NULL, NULL);
    }
}

#if PY_VERSION_HEX >= 0x030B0000
static int resume_opcode = -1;        /* opcode.opmap["RESUME"] */
static int yield_opcode = -1;         /* opcode.opmap["YIELD_VALUE"] */
#endif

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
    if (lasti < 0 || resume_opcode < 0) {
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
        at_yield = op[lasti] == yield_opcode;
        at_resume = op[lasti] == resume_opcode && op[lasti + 1] != 0;
        at_start = op[lasti] == resume_opcode && op[lasti + 1] == 0;
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
        cleared_trace_lines = 1;
        memlab_saved_exc saved;
        memlab_save_exc(&saved);
        if (PyObject_SetAttr((PyObject *)frame, str_f_trace_lines, Py_False) < 0) {
            PyErr_Clear();
        }
        memlab_restore_exc(&saved);
    }
    Py_DECREF(code);
    return wanted;
}

static void recheck_here(void);

/* A frame we profile gives line events, whatever the tool we chain to did
 * at its call event (Scalene clears f_trace_lines on every frame called
 * while its trace function is in place). */
static void
keep_line_events(PyFrameObject *frame)
{
    memlab_saved_exc saved;
    memlab_save_exc(&saved);
    if (PyObject_SetAttr((PyObject *)frame, str_f_trace_lines, Py_True) < 0) {
        PyErr_Clear();
    }
    memlab_restore_exc(&saved);
}

static int
trace_function(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    Py_tracefunc func = foreign_func(obj);
    if (func == NULL) {
        if (memlab_enabled_tracers == NULL) {
            set_trace(NULL, NULL);      /* nobody profiles any more */
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
        restore_foreign(obj);           /* nobody profiles any more */
    }
    else {
        wanted = trace_ours(frame, what, arg, 0);
    }
    int rc = 0;
    PyThreadState *ts = PyThreadState_Get();
    /* The other tool still traces this thread, through us or on its own
     * again: it gets this event. */
    if (ts->c_traceobj == obj && (ts->c_tracefunc == trace_function
                                  || ts->c_tracefunc == func)) {
        rc = func(obj, frame, what, arg);
        if (wanted && what == PyTrace_CALL) {
            keep_line_events(frame);
        }
        if (ts->c_tracefunc != trace_function) {
            recheck_here();             /* it left, or set another function */
        }
    }
    Py_XDECREF(obj);
    return rc;
}

/* Install on the calling thread, chained to another tool's function if one
 * is set. */
static int
install_here(void)
{
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_tracefunc == trace_function) {
        return 0;
    }
    if (ts->c_tracefunc == NULL) {
        forget_foreign();
        set_trace(trace_function, hook_token);
        return 0;
    }
    foreign.func = ts->c_tracefunc;
    foreign.obj = ts->c_traceobj;
    set_trace(trace_function, ts->c_traceobj);
    return 0;
}

static void
uninstall_here(void)
{
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_tracefunc == trace_function) {
        restore_foreign(ts->c_traceobj);
    }
}

static PyObject *
threading_hook(PyObject *threading)
{
    PyObject *cur = PyObject_GetAttrString(threading, "_trace_hook");
    if (cur == NULL) {
        PyErr_Clear();
        cur = Py_NewRef(Py_None);
    }
    return cur;
}

/* threading.settrace(token) for new threads, keeping the hook another tool
 * set there to run first; on removal, put that hook back if ours is still
 * in place. */
static int
set_thread_starter(int on)
{
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL) {
        return -1;
    }
    PyObject *r = NULL;
    PyObject *cur = threading_hook(threading);
    if (on) {
        if (cur != hook_token) {
            Py_XSETREF(prior_thread_hook, cur == Py_None ? NULL : Py_NewRef(cur));
            r = PyObject_CallMethod(threading, "settrace", "O", hook_token);
        }
        else {
            r = Py_NewRef(Py_None);
        }
    }
    else {
        r = cur == hook_token
            ? PyObject_CallMethod(threading, "settrace", "O",
                                  prior_thread_hook ? prior_thread_hook : Py_None)
            : Py_NewRef(Py_None);
        Py_CLEAR(prior_thread_hook);
    }
    Py_DECREF(cur);
    Py_DECREF(threading);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* After another tool called sys.settrace on this thread while we profile:
 * chain to the newcomer, or stand alone again if it left. */
static void
recheck_here(void)
{
    if (memlab_enabled_tracers == NULL || memlab_mechanism != MECH_SETTRACE) {
        return;
    }
    PyThreadState *ts = PyThreadState_Get();
    memlab_saved_exc saved;
    memlab_save_exc(&saved);
    /* Tools that set sys.settrace usually set threading.settrace too. */
    if (set_thread_starter(1) < 0) {
        PyErr_WriteUnraisable(NULL);
    }
    if (ts->c_tracefunc == trace_function) {
        memlab_restore_exc(&saved);
        return;
    }
    if (ts->c_tracefunc != NULL && !warned_foreign_tracer) {
        warned_foreign_tracer = 1;
        if (PyErr_WarnEx(PyExc_RuntimeWarning,
                         "pytorch_memlab: another tool called sys.settrace while profiling; "
                         "its trace function is kept and pytorch_memlab runs chained to it "
                         "(profiling resumes; it stands alone again once that tool leaves)",
                         1) < 0) {
            PyErr_WriteUnraisable(NULL);
        }
    }
    if (install_here() < 0) {
        PyErr_WriteUnraisable(NULL);
    }
    memlab_restore_exc(&saved);
}

/* Pending call, run by the main thread only: the fallback when the thread
 * that called sys.settrace had its profile function slot taken. */
static int
recheck(void *unused)
{
    recheck_pending = 0;
    recheck_here();
    return 0;
}

/* A one-shot profile function: the first event on the thread after another
 * tool's sys.settrace took the thread from us, on whichever thread that was
 * (a pending call would run on the main thread). */
static int
recheck_at_event(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    if (PyThreadState_Get()->c_profilefunc == recheck_at_event) {
        PyEval_SetProfile(NULL, NULL);
    }
    recheck_here();
    return 0;
}

/* A trace function is about to be set on this thread (a debugger, say):
 * the frames on its stack give line events again, as they would have
 * without us. */
static void
restore_trace_lines(void)
{
    PyFrameObject *frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    while (frame != NULL) {
        if (PyObject_SetAttr((PyObject *)frame, str_f_trace_lines, Py_True) < 0) {
            PyErr_Clear();
        }
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
}

/* Another tool is about to change a thread's trace function: look again
 * once it has. */
static int
audit_hook(const char *event, PyObject *args, void *unused)
{
    if (setting_trace || (memlab_enabled_tracers == NULL && !cleared_trace_lines)
            || strcmp(event, "sys.settrace") != 0) {
        return 0;
    }
    if (cleared_trace_lines) {
        memlab_saved_exc saved;
        memlab_save_exc(&saved);
        restore_trace_lines();
        memlab_restore_exc(&saved);
    }
    if (memlab_enabled_tracers == NULL || memlab_mechanism != MECH_SETTRACE) {
        return 0;
    }
    /* The thread is taken from us: look at its next event (a profile
     * function of ours, while no profiler uses that slot); else at the main
     * thread's next pending-call check. */
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_tracefunc == trace_function && ts->c_profilefunc == NULL) {
        memlab_saved_exc saved;
        memlab_save_exc(&saved);
        PyEval_SetProfile(recheck_at_event, NULL);
        PyErr_Clear();                  /* another audit hook refused: no recheck */
        memlab_restore_exc(&saved);
    }
    else if (ts->c_profilefunc != recheck_at_event && !recheck_pending
             && Py_AddPendingCall(recheck, NULL) == 0) {
        recheck_pending = 1;
    }
    return 0;
}

int
settrace_enable(TracerObject *t)
{
    if (set_thread_starter(1) < 0) {
        return -1;
    }
    return install_here();
}

int
settrace_disable(TracerObject *t)
{
    if (memlab_enabled_tracers != NULL) {
        return 0;   /* others still need the hook */
    }
    warned_foreign_tracer = 0;   /* once per profiling session, not per process */
    uninstall_here();
    return set_thread_starter(0);
}

PyObject *
memlab_install_thread_hook(PyObject *module, PyObject *unused)
{
    if (memlab_mechanism != MECH_SETTRACE || memlab_enabled_tracers == NULL) {
        Py_RETURN_FALSE;
    }
    if (install_here() < 0) {
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* Called as a Python trace function in a new thread (threading.settrace):
 * run the hook another tool had set there first (it installs that tool's
 * trace function), then chain ours to it. */
/* Our token called by another tool's trace function, as the function it
 * found in sys.gettrace() and chains to: (frame, event, arg). */
static PyObject *
chained_call(PyObject *const *args, Py_ssize_t nargs)
{
    PyThreadState *ts = PyThreadState_Get();
    if (memlab_enabled_tracers == NULL || ts->c_tracefunc == trace_function
            || nargs < 2 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        return Py_NewRef(hook_token);   /* in front of it: ours already */
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
    return Py_NewRef(hook_token);
}

static PyObject *
thread_starter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_traceobj != hook_token || ts->c_tracefunc == trace_function) {
        /* Not the thread's trace function (set by threading.settrace, or
         * put back by a tool with sys.settrace(token)): a tool calls us. */
        return chained_call(args, nargs);
    }
    PyObject *result = Py_None;
    set_trace(NULL, NULL);
    if (prior_thread_hook != NULL) {
        result = PyObject_Vectorcall(prior_thread_hook, args, (size_t)nargs, NULL);
        if (result == NULL) {
            return NULL;
        }
    }
    else {
        Py_INCREF(result);
    }
    if (memlab_enabled_tracers != NULL && install_here() < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyMethodDef thread_starter_def = {
    "_thread_starter", (PyCFunction)(void (*)(void))thread_starter, METH_FASTCALL,
    "Installs pytorch_memlab's C trace hook in a new thread."
};

int
settrace_init(PyObject *module)
{
    static int audit_hook_added;     /* audit hooks cannot be removed: add once */
    if (!audit_hook_added) {
        if (PySys_AddAuditHook(audit_hook, NULL) < 0) {
            return -1;
        }
        audit_hook_added = 1;
    }
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *opcode = PyImport_ImportModule("opcode");
    PyObject *opmap = opcode ? PyObject_GetAttrString(opcode, "opmap") : NULL;
    PyObject *resume = opmap ? PyDict_GetItemString(opmap, "RESUME") : NULL;  /* Borrowed */
    PyObject *yield = opmap ? PyDict_GetItemString(opmap, "YIELD_VALUE") : NULL;  /* Borrowed */
    resume_opcode = resume ? (int)PyLong_AsLong(resume) : -1;
    yield_opcode = yield ? (int)PyLong_AsLong(yield) : -1;
    Py_XDECREF(opmap);
    Py_XDECREF(opcode);
    if (PyErr_Occurred()) {
        return -1;
    }
#endif
    /* Made once per process: a second execution of the module (after `del
     * sys.modules[...]`) must find the token that threads and
     * threading._trace_hook already hold, or disable() would not recognise
     * them. */
    if (str_f_trace_lines == NULL) {
        str_f_trace_lines = PyUnicode_InternFromString("f_trace_lines");
        if (str_f_trace_lines == NULL) {
            return -1;
        }
    }
    if (hook_token == NULL) {
        hook_token = PyCFunction_NewEx(&thread_starter_def, NULL, NULL);
        if (hook_token == NULL) {
            return -1;
        }
    }
    return PyModule_AddObjectRef(module, "_thread_starter", hook_token);
}
