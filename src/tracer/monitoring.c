/* The sys.monitoring hook (3.12+): local events on registered code objects
 * only, so unrelated code runs uninstrumented on every thread.  Here the
 * tool id and the instrumented codes; the callbacks are monitoring_events.c's. */
#include "monitoring_internal.h"
#include "module_state.h"

#if MEMLAB_HAVE_MONITORING

/* CPython reserves 0, 1, 2 and 5 (debugger, coverage, profiler, optimizer):
 * cProfile, line_profiler and coverage's sysmon core claim theirs and fail
 * when it is taken.  We take only the free-for-all ids. */
static const int our_tool_ids[] = {3, 4};
#define N_OUR_IDS ((int)(sizeof(our_tool_ids) / sizeof(our_tool_ids[0])))

/* Process-wide state, like the list of enabled tracers: the tracers of a
 * module executed twice (del sys.modules[...], import) share one tool id and
 * one map of instrumented codes, which monitoring_init() makes at the first
 * exec only.  Sub-interpreters are declared unsupported (module.c).
 *
 * One tool id serves every enabled tracer, the way one settrace hook does:
 * ids are few and other tools want them too. */
static struct {
    int tool_id;                   /* ours while a tracer is enabled, else -1 */
    /* Owned. {id(code): code} of the codes with local events on.  Keyed by
     * identity: code objects compiled from the same source in two files
     * compare equal, and each needs its own events. */
    PyObject *instrumented;
} runtime = {-1, NULL};

/* The callbacks' type, in the state of the module that made t's type; NULL
 * with an exception set when that module was cleared. */
static PyTypeObject *
callback_type_of(TracerObject *t)
{
    PyObject *module = PyType_GetModuleByDef(Py_TYPE(t), &memlab_tracer_module);
    PyTypeObject *type = module != NULL ? memlab_module_state(module)->callback_type : NULL;
    if (module != NULL && type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pytorch_memlab._tracer was cleared");
    }
    return type;
}

/* ---- talking to sys.monitoring ----------------------------------------- */

static PyObject *
monitoring_module(void)
{
    PyObject *sys = PyImport_ImportModule("sys");
    if (sys == NULL) {
        return NULL;
    }
    PyObject *mon = PyObject_GetAttrString(sys, "monitoring");
    Py_DECREF(sys);
    return mon;
}

static long
event_bit(PyObject *mon, int i)
{
    PyObject *events = PyObject_GetAttrString(mon, "events");
    PyObject *v = events ? PyObject_GetAttrString(events, monitor_events[i].name) : NULL;
    long bit = v ? PyLong_AsLong(v) : -1;
    Py_XDECREF(v);
    Py_XDECREF(events);
    return bit;
}

/* Bits of the events with the given locality, read at run time. */
static int
event_bits(PyObject *mon, int local, long *bits)
{
    *bits = 0;
    for (int i = 0; i < N_EVENTS; i++) {
        if (monitor_events[i].local != local) {
            continue;
        }
        long bit = event_bit(mon, i);
        if (bit == -1 && PyErr_Occurred()) {
            return -1;
        }
        *bits |= bit;
    }
    return 0;
}

/* "3 (name), 4 (name)": who holds our ids, for the error message. */
static PyObject *
holders(PyObject *mon)
{
    PyObject *parts = PyList_New(0);
    PyObject *sep = NULL, *joined = NULL;
    for (int k = 0; parts != NULL && k < N_OUR_IDS; k++) {
        PyObject *name = PyObject_CallMethod(mon, "get_tool", "i", our_tool_ids[k]);
        PyObject *part = name ? PyUnicode_FromFormat("%d (%R)", our_tool_ids[k], name)
                              : NULL;
        Py_XDECREF(name);
        if (part == NULL || PyList_Append(parts, part) < 0) {
            Py_CLEAR(parts);
        }
        Py_XDECREF(part);
    }
    sep = parts ? PyUnicode_FromString(", ") : NULL;
    joined = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    Py_XDECREF(parts);
    return joined;
}

static int
claim_tool_id(PyObject *mon)
{
    for (int k = 0; k < N_OUR_IDS; k++) {
        int id = our_tool_ids[k];
        PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "is", id, "pytorch_memlab");
        if (r != NULL) {
            Py_DECREF(r);
            return id;
        }
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) {
            return -1;
        }
        PyErr_Clear();
    }
    PyObject *who = holders(mon);
    if (who == NULL) {
        return -1;
    }
    PyErr_Format(PyExc_RuntimeError, "pytorch_memlab needs sys.monitoring tool id 3 or 4 "
                 "(0, 1, 2 and 5 belong to debuggers, coverage, profilers and optimizers), "
                 "but both are in use: %U; disable one of those tools and retry", who);
    Py_DECREF(who);
    return -1;
}

static int
set_local(PyObject *mon, PyObject *code, long bits)
{
    PyObject *r = PyObject_CallMethod(mon, "set_local_events", "iOl", runtime.tool_id,
                                      code, bits);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* The key of `code` in `runtime.instrumented`: its address (a new reference). */
static PyObject *
code_key(PyObject *code)
{
    return PyLong_FromVoidPtr(code);
}

/* Local events for `code` on (on = 1) unless they already are, or off
 * (on = 0) if they are on; `runtime.instrumented` says which codes have them. */
static int
set_instrumented(PyObject *mon, PyObject *code, int on)
{
    int ret = -1;
    long local_bits = 0;
    PyObject *key = code_key(code);
    if (key == NULL) {
        return -1;
    }
    int present = PyDict_Contains(runtime.instrumented, key);
    if (present < 0) {
        goto error;
    }
    if (present != on) {
        if (on && event_bits(mon, 1, &local_bits) < 0) {
            goto error;
        }
        if (set_local(mon, code, local_bits) < 0) {
            goto error;
        }
        if ((on ? PyDict_SetItem(runtime.instrumented, key, code)
                : PyDict_DelItem(runtime.instrumented, key)) < 0) {
            goto error;
        }
    }
    ret = 0;
error:
    Py_DECREF(key);
    return ret;
}

/* Clear events and callbacks ourselves (3.12/3.13 free_tool_id does not),
 * then free the id.  Carries on past failures; reports the first. */
static int
teardown(PyObject *mon)
{
    int ret = 0;
    int id = runtime.tool_id;
    memlab_saved_exc first = {0};
    PyObject *r;
    PyObject *codes = PyDict_Values(runtime.instrumented);
#define STEP(call)                                             \
    r = (call);                                                \
    if (r == NULL) {                                           \
        if (ret == 0) { memlab_save_exc(&first); ret = -1; }   \
        else PyErr_Clear();                                    \
    }                                                          \
    Py_XDECREF(r);
    STEP(PyObject_CallMethod(mon, "set_events", "ii", id, 0))
    if (codes == NULL) {
        memlab_save_exc(&first);
        ret = -1;
    }
    for (Py_ssize_t i = 0; codes != NULL && i < PyList_GET_SIZE(codes); i++) {
        STEP(PyObject_CallMethod(mon, "set_local_events", "iOi", id,
                                 PyList_GET_ITEM(codes, i), 0))
    }
    Py_XDECREF(codes);
    PyDict_Clear(runtime.instrumented);
    for (int i = 0; i < N_EVENTS; i++) {
        long bit = event_bit(mon, i);
        if (bit < 0) {
            PyErr_Clear();
            continue;
        }
        STEP(PyObject_CallMethod(mon, "register_callback", "ilO", id, bit, Py_None))
    }
    STEP(PyObject_CallMethod(mon, "free_tool_id", "i", id))
#undef STEP
    runtime.tool_id = -1;
    if (ret < 0) {
        memlab_restore_exc(&first);
    }
    return ret;
}

/* Claim the id, register a callback per event and the global events. */
static int
start_monitoring(PyObject *mon, PyTypeObject *callback_type)
{
    long global_bits;
    if (callback_type == NULL) {
        return -1;
    }
    runtime.tool_id = claim_tool_id(mon);
    if (runtime.tool_id < 0) {
        return -1;
    }
    for (int i = 0; i < N_EVENTS; i++) {
        long bit = event_bit(mon, i);
        PyObject *cb = bit < 0 ? NULL
                     : monitoring_new_callback(callback_type, monitor_events[i].action);
        PyObject *r = cb ? PyObject_CallMethod(mon, "register_callback", "ilO",
                                               runtime.tool_id, bit, cb) : NULL;
        Py_XDECREF(cb);
        Py_XDECREF(r);
        if (r == NULL) {
            return -1;
        }
    }
    if (event_bits(mon, 0, &global_bits) < 0) {
        return -1;
    }
    PyObject *r = PyObject_CallMethod(mon, "set_events", "il", runtime.tool_id, global_bits);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static void
teardown_keeping_error(PyObject *mon)
{
    memlab_saved_exc saved;
    memlab_save_exc(&saved);
    if (teardown(mon) < 0) {
        PyErr_Clear();
    }
    memlab_restore_exc(&saved);
}

int
monitoring_enable(TracerObject *t)
{
    int ret = -1;
    PyObject *mon = monitoring_module();
    if (mon == NULL) {
        return -1;
    }
    if (runtime.tool_id < 0 && start_monitoring(mon, callback_type_of(t)) < 0) {
        if (runtime.tool_id >= 0) {
            teardown_keeping_error(mon);
        }
        goto error;
    }
    for (int i = 0; i < t->codes.n_tables; i++) {
        if (set_instrumented(mon, t->codes.tables[i]->code, 1) < 0) {
            goto error;
        }
    }
    t->tool_id = runtime.tool_id;
    ret = 0;
error:
    if (ret < 0 && memlab_enabled_tracers == t && t->next_enabled == NULL
            && runtime.tool_id >= 0) {
        teardown_keeping_error(mon);    /* we were the only user */
    }
    Py_DECREF(mon);
    return ret;
}

/* Called once t is off the enabled list. */
int
monitoring_disable(TracerObject *t)
{
    int ret = 0;
    t->tool_id = -1;
    if (runtime.tool_id < 0) {
        return 0;
    }
    PyObject *mon = monitoring_module();
    if (mon == NULL) {
        return -1;
    }
    if (memlab_enabled_tracers == NULL) {
        ret = teardown(mon);
    }
    else {
        /* Stop instrumenting code that no enabled tracer wants any more. */
        for (int i = 0; i < t->codes.n_tables && ret == 0; i++) {
            PyObject *code = t->codes.tables[i]->code;
            if (!memlab_code_wanted(code)) {
                ret = set_instrumented(mon, code, 0);
            }
        }
    }
    Py_DECREF(mon);
    return ret;
}

int
monitoring_add_code(TracerObject *t, PyObject *code)
{
    PyObject *mon = monitoring_module();
    if (mon == NULL) {
        return -1;
    }
    int ret = set_instrumented(mon, code, 1);
    Py_DECREF(mon);
    return ret;
}

/* Makes the runtime's map at the first exec only: replacing it under
 * enabled tracers lost the codes whose local events disable() must clear. */
int
monitoring_init(PyObject *module)
{
    if (runtime.instrumented == NULL) {
        runtime.instrumented = PyDict_New();
        if (runtime.instrumented == NULL) {
            return -1;
        }
    }
    return monitoring_callback_type_init(module);
}

#endif /* MEMLAB_HAVE_MONITORING */
