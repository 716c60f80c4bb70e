/* The sys.monitoring hook (3.12+): local events on registered code objects
 * only, so unrelated code runs uninstrumented on every thread. */
#include "tracer.h"

#if MEMLAB_HAVE_MONITORING

/* What an event does to the tracer. */
typedef enum { ACT_LINE, ACT_START, ACT_RESUME, ACT_LEAVE } event_action;

/* Registration is driven by this table, and so is teardown. */
static const struct {
    const char *name;
    event_action action;
    int local;          /* 1: set per code object; 0: global, filtered by code */
} monitor_events[] = {
    {"LINE", ACT_LINE, 1},
    {"PY_START", ACT_START, 1},
    {"PY_RESUME", ACT_RESUME, 1},
    {"PY_RETURN", ACT_LEAVE, 1},
    {"PY_YIELD", ACT_LEAVE, 1},
    {"PY_UNWIND", ACT_LEAVE, 0},   /* global-only in 3.12/3.13 */
    {"PY_THROW", ACT_RESUME, 0},   /* global-only in 3.12/3.13 */
};
#define N_EVENTS ((int)(sizeof(monitor_events) / sizeof(monitor_events[0])))

static const int first_tool_id = 2, last_tool_id = 5;

/* A callable registered with sys.monitoring for one tracer and one event. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    TracerObject *tracer;      /* Owned. */
    event_action action;
} CallbackObject;

static PyTypeObject *callback_type;   /* Owned by the module (kept alive with it). */

static PyObject *
callback_call(CallbackObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    TracerObject *t = self->tracer;
    if (nargs < 2 || !PyCode_Check(args[0])) {
        Py_RETURN_NONE;
    }
    LineTable *table = codemap_get(&t->codes, args[0]);
    if (table == NULL) {
        Py_RETURN_NONE;
    }
    switch (self->action) {
    case ACT_LINE: {
        int line = (int)PyLong_AsLong(args[1]);
        if (line == -1 && PyErr_Occurred()) {
            PyErr_Clear();
        }
        else {
            tracer_on_line(t, table, line);
        }
        break;
    }
    case ACT_START:
        tracer_on_start(t, table, -1);
        break;
    case ACT_RESUME: {
        /* A resume continues the line that yielded: no LINE event comes. */
        int offset = (int)PyLong_AsLong(args[1]);
        int line = offset < 0 ? -1 : PyCode_Addr2Line((PyCodeObject *)args[0], offset);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            line = -1;
        }
        tracer_on_start(t, table, line);
        break;
    }
    case ACT_LEAVE:
        tracer_on_leave(t, table);
        break;
    }
    Py_RETURN_NONE;
}

static int
callback_traverse(CallbackObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->tracer);
    return 0;
}

static int
callback_clear(CallbackObject *self)
{
    Py_CLEAR(self->tracer);
    return 0;
}

static void
callback_dealloc(CallbackObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    callback_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyMemberDef callback_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CallbackObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot callback_slots[] = {
    {Py_tp_doc, "A sys.monitoring callback of one tracer."},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_dealloc, callback_dealloc},
    {Py_tp_traverse, callback_traverse},
    {Py_tp_clear, callback_clear},
    {Py_tp_members, callback_members},
    {0, NULL},
};

static PyType_Spec callback_spec = {
    .name = "pytorch_memlab._tracer.MonitoringCallback",
    .basicsize = sizeof(CallbackObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = callback_slots,
};

static PyObject *
new_callback(TracerObject *t, event_action action)
{
    CallbackObject *cb = PyObject_GC_New(CallbackObject, callback_type);
    if (cb == NULL) {
        return NULL;
    }
    cb->vectorcall = (vectorcallfunc)callback_call;
    cb->tracer = (TracerObject *)Py_NewRef((PyObject *)t);
    cb->action = action;
    PyObject_GC_Track(cb);
    return (PyObject *)cb;
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

/* Bits of the events with the given locality, read at run time. */
static int
event_bits(PyObject *mon, int local, long *bits)
{
    PyObject *events = PyObject_GetAttrString(mon, "events");
    if (events == NULL) {
        return -1;
    }
    *bits = 0;
    for (int i = 0; i < N_EVENTS; i++) {
        if (monitor_events[i].local != local) {
            continue;
        }
        PyObject *v = PyObject_GetAttrString(events, monitor_events[i].name);
        long bit = v ? PyLong_AsLong(v) : -1;
        Py_XDECREF(v);
        if (bit == -1 && PyErr_Occurred()) {
            Py_DECREF(events);
            return -1;
        }
        *bits |= bit;
    }
    Py_DECREF(events);
    return 0;
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

static int
claim_tool_id(PyObject *mon)
{
    for (int id = first_tool_id; id <= last_tool_id; id++) {
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
    PyErr_Format(PyExc_RuntimeError, "every sys.monitoring tool id from %d to %d is in use "
                 "(other profilers or debuggers); disable one and retry",
                 first_tool_id, last_tool_id);
    return -1;
}

static int
set_local(PyObject *mon, int id, PyObject *code, long bits)
{
    PyObject *r = PyObject_CallMethod(mon, "set_local_events", "iOl", id, code, bits);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* Register callbacks, global and local events; on failure undo via teardown. */
static int
register_all(TracerObject *t, PyObject *mon)
{
    long local_bits, global_bits;
    if (event_bits(mon, 1, &local_bits) < 0 || event_bits(mon, 0, &global_bits) < 0) {
        return -1;
    }
    for (int i = 0; i < N_EVENTS; i++) {
        long bit = event_bit(mon, i);
        PyObject *cb = bit < 0 ? NULL : new_callback(t, monitor_events[i].action);
        PyObject *r = cb ? PyObject_CallMethod(mon, "register_callback", "ilO",
                                               t->tool_id, bit, cb) : NULL;
        Py_XDECREF(cb);
        Py_XDECREF(r);
        if (r == NULL) {
            return -1;
        }
    }
    PyObject *r = PyObject_CallMethod(mon, "set_events", "il", t->tool_id, global_bits);
    Py_XDECREF(r);
    if (r == NULL) {
        return -1;
    }
    for (int i = 0; i < t->codes.n_tables; i++) {
        if (set_local(mon, t->tool_id, t->codes.tables[i]->code, local_bits) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Clear events and callbacks ourselves (3.12/3.13 free_tool_id does not),
 * then free the id.  Carries on past failures; reports the first. */
static int
teardown(TracerObject *t, PyObject *mon)
{
    int ret = 0;
    int id = t->tool_id;
    memlab_saved_exc first = {0};
    PyObject *r;
#define STEP(call)                                             \
    r = (call);                                                \
    if (r == NULL) {                                           \
        if (ret == 0) { memlab_save_exc(&first); ret = -1; }   \
        else PyErr_Clear();                                    \
    }                                                          \
    Py_XDECREF(r);
    STEP(PyObject_CallMethod(mon, "set_events", "ii", id, 0))
    for (int i = 0; i < t->codes.n_tables; i++) {
        STEP(PyObject_CallMethod(mon, "set_local_events", "iOi", id,
                                 t->codes.tables[i]->code, 0))
    }
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
    t->tool_id = -1;
    if (ret < 0) {
        memlab_restore_exc(&first);
    }
    return ret;
}

int
monitoring_enable(TracerObject *t)
{
    int ret = -1;
    PyObject *mon = monitoring_module();
    if (mon == NULL) {
        return -1;
    }
    t->tool_id = claim_tool_id(mon);
    if (t->tool_id < 0) {
        goto error;
    }
    if (register_all(t, mon) < 0) {
        memlab_saved_exc saved;
        memlab_save_exc(&saved);
        if (teardown(t, mon) < 0) {
            PyErr_Clear();
        }
        memlab_restore_exc(&saved);
        goto error;
    }
    ret = 0;
error:
    Py_DECREF(mon);
    return ret;
}

int
monitoring_disable(TracerObject *t)
{
    if (t->tool_id < 0) {
        return 0;
    }
    PyObject *mon = monitoring_module();
    if (mon == NULL) {
        t->tool_id = -1;
        return -1;
    }
    int ret = teardown(t, mon);
    Py_DECREF(mon);
    return ret;
}

int
monitoring_add_code(TracerObject *t, PyObject *code)
{
    long local_bits;
    PyObject *mon = monitoring_module();
    if (mon == NULL) {
        return -1;
    }
    int ret = event_bits(mon, 1, &local_bits);
    if (ret == 0) {
        ret = set_local(mon, t->tool_id, code, local_bits);
    }
    Py_DECREF(mon);
    return ret;
}

int
monitoring_init(PyObject *module)
{
    callback_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &callback_spec, NULL);
    if (callback_type == NULL) {
        return -1;
    }
    /* The module keeps the type alive for as long as callbacks may exist. */
    return PyModule_AddObject(module, "_MonitoringCallback",
                              Py_NewRef((PyObject *)callback_type)) < 0 ? -1 : 0;
}

#endif /* MEMLAB_HAVE_MONITORING */
