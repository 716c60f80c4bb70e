/* Installing the settrace hook (settrace.c has its events): on the thread
 * that enables, on threads started afterwards (threading.settrace), chained
 * to another tool's trace function, and looked at again when another tool
 * calls sys.settrace (the audit hook). */
#include "settrace_internal.h"

SettraceRuntime memlab_settrace = {
    .resume_opcode = -1,
    .yield_opcode = -1,
};

MEMLAB_THREAD_LOCAL ForeignTrace memlab_foreign;

static void
forget_foreign(void)
{
    memlab_foreign.func = NULL;
    memlab_foreign.obj = NULL;
}

void
memlab_set_trace(Py_tracefunc func, PyObject *obj)
{
    /* PyEval_SetTrace (3.9-3.11) drops the old object before it takes the
     * new one: when both are one object, only our reference keeps it. */
    Py_XINCREF(obj);
    memlab_settrace.setting_trace++;
    PyEval_SetTrace(func, obj);
    memlab_settrace.setting_trace--;
    Py_XDECREF(obj);
}

/* Put the other tool's function back (or nothing) on this thread, where our
 * function runs with `obj`. */
void
memlab_restore_foreign(PyObject *obj)
{
    Py_tracefunc func = foreign_func(obj);
    forget_foreign();
    if (func != NULL) {
        memlab_set_trace(func, obj);
    }
    else {
        memlab_set_trace(NULL, NULL);
    }
}

/* Install on the calling thread, chained to another tool's function if one
 * is set. */
static int
install_here(void)
{
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_tracefunc == memlab_trace_function) {
        return 0;
    }
    if (ts->c_tracefunc == NULL) {
        forget_foreign();
        memlab_set_trace(memlab_trace_function, memlab_settrace.hook_token);
        return 0;
    }
    memlab_foreign.func = ts->c_tracefunc;
    memlab_foreign.obj = ts->c_traceobj;
    memlab_set_trace(memlab_trace_function, ts->c_traceobj);
    return 0;
}

static void
uninstall_here(void)
{
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_tracefunc == memlab_trace_function) {
        memlab_restore_foreign(ts->c_traceobj);
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
        if (cur != memlab_settrace.hook_token) {
            Py_XSETREF(memlab_settrace.prior_thread_hook, cur == Py_None ? NULL : Py_NewRef(cur));
            r = PyObject_CallMethod(threading, "settrace", "O", memlab_settrace.hook_token);
        }
        else {
            r = Py_NewRef(Py_None);
        }
    }
    else {
        r = cur == memlab_settrace.hook_token
            ? PyObject_CallMethod(threading, "settrace", "O",
                                  memlab_settrace.prior_thread_hook ? memlab_settrace.prior_thread_hook : Py_None)
            : Py_NewRef(Py_None);
        Py_CLEAR(memlab_settrace.prior_thread_hook);
    }
    Py_DECREF(cur);
    Py_DECREF(threading);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* After another tool called sys.settrace on this thread while we profile:
 * chain to the newcomer, or stand alone again if it left. */
void
memlab_recheck_here(void)
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
    if (ts->c_tracefunc == memlab_trace_function) {
        memlab_restore_exc(&saved);
        return;
    }
    if (ts->c_tracefunc != NULL && !memlab_settrace.warned_foreign_tracer) {
        memlab_settrace.warned_foreign_tracer = 1;
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
    memlab_settrace.recheck_pending = 0;
    memlab_recheck_here();
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
    memlab_recheck_here();
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
        if (PyObject_SetAttr((PyObject *)frame, memlab_settrace.str_f_trace_lines, Py_True) < 0) {
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
    if (memlab_settrace.setting_trace || (memlab_enabled_tracers == NULL && !memlab_settrace.cleared_trace_lines)
            || strcmp(event, "sys.settrace") != 0) {
        return 0;
    }
    if (memlab_settrace.cleared_trace_lines) {
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
    if (ts->c_tracefunc == memlab_trace_function && ts->c_profilefunc == NULL) {
        memlab_saved_exc saved;
        memlab_save_exc(&saved);
        PyEval_SetProfile(recheck_at_event, NULL);
        PyErr_Clear();                  /* another audit hook refused: no recheck */
        memlab_restore_exc(&saved);
    }
    else if (ts->c_profilefunc != recheck_at_event && !memlab_settrace.recheck_pending
             && Py_AddPendingCall(recheck, NULL) == 0) {
        memlab_settrace.recheck_pending = 1;
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
    memlab_settrace.warned_foreign_tracer = 0;   /* once per profiling session, not per process */
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
static PyObject *
thread_starter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_traceobj != memlab_settrace.hook_token || ts->c_tracefunc == memlab_trace_function) {
        /* Not the thread's trace function (set by threading.settrace, or
         * put back by a tool with sys.settrace(token)): a tool calls us. */
        return memlab_chained_call(args, nargs);
    }
    PyObject *result = Py_None;
    memlab_set_trace(NULL, NULL);
    if (memlab_settrace.prior_thread_hook != NULL) {
        result = PyObject_Vectorcall(memlab_settrace.prior_thread_hook, args, (size_t)nargs, NULL);
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
    memlab_settrace.resume_opcode = resume ? (int)PyLong_AsLong(resume) : -1;
    memlab_settrace.yield_opcode = yield ? (int)PyLong_AsLong(yield) : -1;
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
    if (memlab_settrace.str_f_trace_lines == NULL) {
        memlab_settrace.str_f_trace_lines = PyUnicode_InternFromString("f_trace_lines");
        if (memlab_settrace.str_f_trace_lines == NULL) {
            return -1;
        }
    }
    if (memlab_settrace.hook_token == NULL) {
        memlab_settrace.hook_token = PyCFunction_NewEx(&thread_starter_def, NULL, NULL);
        if (memlab_settrace.hook_token == NULL) {
            return -1;
        }
    }
    return PyModule_AddObjectRef(module, "_thread_starter", memlab_settrace.hook_token);
}

