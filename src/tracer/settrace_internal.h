/* What settrace.c (the events) and settrace_install.c (installing the hook,
 * chaining to other tools) share: one runtime struct, process-wide, and the
 * other tool's trace function per thread. */
#ifndef MEMLAB_SETTRACE_INTERNAL_H
#define MEMLAB_SETTRACE_INTERNAL_H

#include "tracer.h"

typedef struct {
    /* The object passed with our trace function when no other tool traces
     * the thread; sys.gettrace() then returns it.  It is the thread-starter
     * callable, so code that saves and restores the trace function
     * (sys.settrace(sys.gettrace())) reinstalls us harmlessly. */
    PyObject *hook_token;          /* Owned. made once per process */
    PyObject *str_f_trace_lines;   /* Owned. interned, made once per process */
    PyObject *prior_thread_hook;   /* Owned. threading's hook before ours, or NULL */
    int warned_foreign_tracer;     /* since the first tracer was enabled */
    int setting_trace;             /* we are calling PyEval_SetTrace */
    int recheck_pending;
    int cleared_trace_lines;       /* some frame's f_trace_lines was cleared by us */
    int resume_opcode;             /* opcode.opmap["RESUME"] (3.11+), or -1 */
    int yield_opcode;              /* opcode.opmap["YIELD_VALUE"] (3.11+), or -1 */
} SettraceRuntime;

extern SettraceRuntime memlab_settrace;

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

extern MEMLAB_THREAD_LOCAL ForeignTrace memlab_foreign;

/* The other tool's function when our function runs with `obj`; NULL when
 * we trace the thread alone.  (The object check guards against a thread
 * state that moved to this OS thread from another.) */
static inline Py_tracefunc
foreign_func(PyObject *obj)
{
    return obj != memlab_settrace.hook_token && obj == memlab_foreign.obj ? memlab_foreign.func : NULL;
}

/* Our C trace function (settrace.c). */
int memlab_trace_function(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);

/* Our token called as a Python trace function by another tool's (settrace.c). */
PyObject *memlab_chained_call(PyObject *const *args, Py_ssize_t nargs);

/* settrace_install.c: PyEval_SetTrace with the object kept alive across it;
 * the other tool's function put back (or nothing) on this thread, where our
 * function runs with `obj`; after another tool changed the thread's trace
 * function, chain to it or stand alone again. */
void memlab_set_trace(Py_tracefunc func, PyObject *obj);
void memlab_restore_foreign(PyObject *obj);
void memlab_recheck_here(void);

#endif /* MEMLAB_SETTRACE_INTERNAL_H */
