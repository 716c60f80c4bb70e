/* The callables sys.monitoring calls (3.12+): one per event, each handing
 * the event to every enabled tracer that registers the code.  Their type
 * lives in the module's state (module_state.h). */
#include "monitoring_internal.h"
#include "module_state.h"

#if MEMLAB_HAVE_MONITORING

/* A callable registered with sys.monitoring for one event. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    event_action action;
} CallbackObject;

/* The generator whose frame gives the event (a new reference), or NULL:
 * a callback runs in the monitored frame, so it is the current one. */
static PyObject *
current_generator(void)
{
    PyFrameObject *frame = PyEval_GetFrame();    /* Borrowed */
    PyObject *gen = frame != NULL ? memlab_frame_generator(frame) : NULL;
    if (gen == NULL) {
        PyErr_Clear();
    }
    return gen;
}

/* `*gen`: the event's generator, looked up at the first event that needs it. */
static void
dispatch(TracerObject *t, LineTable *table, event_action action, PyObject *code,
         PyObject *where, PyObject **gen, int *gen_known)
{
    if ((action == ACT_RESUME || action == ACT_THROW || action == ACT_YIELD)
            && !*gen_known) {
        *gen = current_generator();
        *gen_known = 1;
    }
    switch (action) {
    case ACT_LINE: {
        int line = (int)PyLong_AsLong(where);
        if (line == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return;
        }
        tracer_on_line(t, table, line);
        break;
    }
    case ACT_START:
        tracer_on_start(t, table, -1);
        break;
    case ACT_RESUME:
    case ACT_THROW: {
        /* A resume continues the line that yielded: no LINE event comes. */
        int offset = (int)PyLong_AsLong(where);
        int line = offset < 0 ? -1 : PyCode_Addr2Line((PyCodeObject *)code, offset);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            line = -1;
        }
        tracer_on_resume(t, table, line, *gen, action == ACT_THROW);
        break;
    }
    case ACT_YIELD:
        tracer_on_leave(t, table, *gen);
        break;
    case ACT_LEAVE:
        tracer_on_leave(t, table, NULL);
        break;
    }
}

static PyObject *
callback_call(CallbackObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 2 || !PyCode_Check(args[0])) {
        Py_RETURN_NONE;
    }
    /* CPython holds no reference to a callback while it calls it, and a
     * Python source's sample() may tear the hook down (the last disable()
     * unregisters, and so frees, every callback) and set it up again: keep
     * this one alive until we return.  Strong references to the tracers too,
     * as sample() may drop a tracer (this one or the next). */
    Py_INCREF(self);
    const event_action action = self->action;
    PyObject *gen = NULL;
    int gen_known = 0;
    TracerObject *t = memlab_enabled_tracers;
    Py_XINCREF(t);
    while (t != NULL) {
        LineTable *table = codemap_get(&t->codes, args[0]);
        if (table != NULL) {
            dispatch(t, table, action, args[0], args[1], &gen, &gen_known);
        }
        TracerObject *next = t->next_enabled;
        Py_XINCREF(next);
        Py_DECREF(t);
        t = next;
    }
    Py_XDECREF(gen);
    Py_DECREF(self);
    Py_RETURN_NONE;
}

static void
callback_dealloc(CallbackObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyMemberDef callback_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CallbackObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot callback_slots[] = {
    {Py_tp_doc, "A sys.monitoring callback of pytorch_memlab's tracers."},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_dealloc, callback_dealloc},
    {Py_tp_members, callback_members},
    {0, NULL},
};

static PyType_Spec callback_spec = {
    .name = "pytorch_memlab._tracer.MonitoringCallback",
    .basicsize = sizeof(CallbackObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = callback_slots,
};

PyObject *
monitoring_new_callback(PyTypeObject *type, event_action action)
{
    CallbackObject *cb = PyObject_New(CallbackObject, type);
    if (cb == NULL) {
        return NULL;
    }
    cb->vectorcall = (vectorcallfunc)callback_call;
    cb->action = action;
    return (PyObject *)cb;
}

int
monitoring_callback_type_init(PyObject *module)
{
    TracerModuleState *state = memlab_module_state(module);
    if (state->callback_type == NULL) {
        state->callback_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &callback_spec,
                                                                        NULL);
        if (state->callback_type == NULL) {
            return -1;
        }
    }
    return PyModule_AddObjectRef(module, "_MonitoringCallback",
                                 (PyObject *)state->callback_type);
}

#endif /* MEMLAB_HAVE_MONITORING */
