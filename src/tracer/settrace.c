/* The PyEval_SetTrace hook (<= 3.11, or forced on 3.12+).
 *
 * One C trace function per thread serves every enabled tracer.  It is
 * installed on the thread that enables, on threads started afterwards (via
 * threading.settrace), and on any thread that calls install_thread_hook().
 * A thread whose hook finds no enabled tracer removes it.  We never replace
 * another tool's trace function (debugger, coverage): such a thread is left
 * alone and a warning says so once. */
#include "tracer.h"

#include <string.h>

/* The object passed with our trace function; sys.gettrace() returns it.  It
 * is the thread-starter callable, so code that saves and restores the trace
 * function (sys.settrace(sys.gettrace())) reinstalls us harmlessly. */
static PyObject *hook_token;          /* Owned by the module. */
static PyObject *str_f_trace_lines;   /* Owned. interned, set once per call */
static int warned_foreign_tracer;

static int
any_registered(PyObject *code)
{
    for (TracerObject *t = memlab_enabled_tracers; t != NULL; t = t->next_enabled) {
        if (codemap_get(&t->codes, code) != NULL) {
            return 1;
        }
    }
    return 0;
}

static void
dispatch(PyFrameObject *frame, PyObject *code, int what)
{
    TracerObject *next;
    for (TracerObject *t = memlab_enabled_tracers; t != NULL; t = next) {
        next = t->next_enabled;
        LineTable *table = codemap_get(&t->codes, code);
        if (table == NULL) {
            continue;
        }
        switch (what) {
        case PyTrace_CALL:
            /* A resumed generator continues a line counted before it yielded;
             * the next line event says where it stands. */
            tracer_on_start(t, table, -1);
            break;
        case PyTrace_LINE:
            tracer_on_line(t, table, PyFrame_GetLineNumber(frame));
            break;
        case PyTrace_RETURN:
            tracer_on_leave(t, table);
            break;
        }
    }
}

static int
trace_function(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    if (memlab_enabled_tracers == NULL) {
        PyEval_SetTrace(NULL, NULL);
        return 0;
    }
    if (what != PyTrace_CALL && what != PyTrace_LINE && what != PyTrace_RETURN) {
        return 0;
    }
    PyObject *code = (PyObject *)PyFrame_GetCode(frame);
    if (!any_registered(code)) {
        if (what == PyTrace_CALL) {
            /* No line events for frames nobody profiles. */
            memlab_saved_exc saved;
            memlab_save_exc(&saved);
            if (PyObject_SetAttr((PyObject *)frame, str_f_trace_lines, Py_False) < 0) {
                PyErr_Clear();
            }
            memlab_restore_exc(&saved);
        }
        Py_DECREF(code);
        return 0;
    }
    dispatch(frame, code, what);
    Py_DECREF(code);
    return 0;
}

/* Install on the calling thread unless another tool traces it. */
static int
install_here(void)
{
    PyObject *sys = PyImport_ImportModule("sys");
    PyObject *current = sys ? PyObject_CallMethod(sys, "gettrace", NULL) : NULL;
    Py_XDECREF(sys);
    if (current == NULL) {
        return -1;
    }
    int foreign = current != Py_None && current != hook_token;
    Py_DECREF(current);
    if (foreign) {
        if (!warned_foreign_tracer) {
            warned_foreign_tracer = 1;
            return PyErr_WarnEx(PyExc_RuntimeWarning,
                                "pytorch_memlab: another trace function (a debugger or coverage) "
                                "is set on this thread; it is left in place and this thread's "
                                "lines are not profiled", 1);
        }
        return 0;
    }
    PyEval_SetTrace(trace_function, hook_token);
    return 0;
}

static int
uninstall_here(void)
{
    PyObject *sys = PyImport_ImportModule("sys");
    PyObject *current = sys ? PyObject_CallMethod(sys, "gettrace", NULL) : NULL;
    Py_XDECREF(sys);
    if (current == NULL) {
        return -1;
    }
    if (current == hook_token) {
        PyEval_SetTrace(NULL, NULL);
    }
    Py_DECREF(current);
    return 0;
}

/* threading.settrace(token) for new threads, or clear it if it is ours. */
static int
set_thread_starter(int on)
{
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL) {
        return -1;
    }
    PyObject *r = NULL;
    if (on) {
        r = PyObject_CallMethod(threading, "settrace", "O", hook_token);
    }
    else {
        PyObject *cur = PyObject_GetAttrString(threading, "_trace_hook");
        if (cur == NULL) {
            PyErr_Clear();
        }
        r = cur == hook_token ? PyObject_CallMethod(threading, "settrace", "O", Py_None)
                              : Py_NewRef(Py_None);
        Py_XDECREF(cur);
    }
    Py_DECREF(threading);
    Py_XDECREF(r);
    return r ? 0 : -1;
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
    int rc = uninstall_here();
    return set_thread_starter(0) < 0 ? -1 : rc;
}

PyObject *
memlab_install_thread_hook(PyObject *module, PyObject *unused)
{
    if (strcmp(memlab_mechanism, "settrace") != 0 || memlab_enabled_tracers == NULL) {
        Py_RETURN_FALSE;
    }
    if (install_here() < 0) {
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* Called as a Python trace function in a new thread (threading.settrace):
 * swap itself for the C hook. */
static PyObject *
thread_starter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (memlab_enabled_tracers != NULL) {
        PyEval_SetTrace(NULL, NULL);
        if (install_here() < 0) {
            return NULL;
        }
    }
    else {
        PyEval_SetTrace(NULL, NULL);
    }
    Py_RETURN_NONE;
}

static PyMethodDef thread_starter_def = {
    "_thread_starter", (PyCFunction)(void (*)(void))thread_starter, METH_FASTCALL,
    "Installs pytorch_memlab's C trace hook in a new thread."
};

int
settrace_init(PyObject *module)
{
    str_f_trace_lines = PyUnicode_InternFromString("f_trace_lines");
    if (str_f_trace_lines == NULL) {
        return -1;
    }
    hook_token = PyCFunction_NewEx(&thread_starter_def, NULL, NULL);
    if (hook_token == NULL) {
        return -1;
    }
    return PyModule_AddObject(module, "_thread_starter", Py_NewRef(hook_token)) < 0 ? -1 : 0;
}
