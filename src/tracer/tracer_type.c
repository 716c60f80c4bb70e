/* The Python face of a Tracer: registration, control and the type; its
 * construction is tracer_init.c's, its figures read back tracer_results.c's. */
#include "tracer_methods.h"
#include "list.h"

#include <limits.h>
#include <stdlib.h>


int
tracer_ready(TracerObject *self)
{
    if (self->interval == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Tracer.__init__ was not called");
        return 0;
    }
    return 1;
}

static PyObject *
Tracer_add_code(TracerObject *self, PyObject *code)
{
    int added;
    if (!tracer_ready(self)) {
        return NULL;
    }
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "add_code() takes a code object, not %.100s "
                     "(pass func.__code__)", Py_TYPE(code)->tp_name);
        return NULL;
    }
    if (codemap_add(&self->codes, code, self->sampler.n_columns, &added) == NULL) {
        return NULL;
    }
    if (added && self->enabled && hook_add_code(self, code) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Tracer_codes(TracerObject *self, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    for (int i = 0; list != NULL && i < self->codes.n_tables; i++) {
        if (PyList_Append(list, self->codes.tables[i]->code) < 0) {
            Py_CLEAR(list);
        }
    }
    return list;
}

static void
enabled_list_remove(TracerObject *t)
{
    MEMLAB_LIST_REMOVE(memlab_enabled_tracers, t, next_enabled);
}

static PyObject *
Tracer_enable(TracerObject *self, PyObject *unused)
{
    if (!tracer_ready(self)) {
        return NULL;
    }
    switch (self->state) {
    case TRACER_ON:
    case TRACER_ENABLING:
        /* Re-entered from prepare(), or from another thread while prepare()
         * lets it run: the call under way finishes enabling.  Linking the
         * tracer twice would make the enabled list a cycle. */
        Py_RETURN_NONE;
    case TRACER_DISABLING:
        PyErr_SetString(PyExc_RuntimeError,
                        "Tracer.enable() while the tracer is being disabled (from its memory "
                        "source's sample(), or on another thread); enable it after disable() "
                        "has returned");
        return NULL;
    case TRACER_OFF:
        break;
    }
    self->state = TRACER_ENABLING;
    if (sampler_start(&self->sampler) < 0) {
        self->state = TRACER_OFF;
        return NULL;
    }
    if (self->follow_blocks && attrib_attach(&self->attrib, self->sampler.source.compiled,
                                             self->sampler.device) < 0) {
        sampler_stop(&self->sampler);
        self->state = TRACER_OFF;
        return NULL;
    }
    self->next_enabled = memlab_enabled_tracers;
    memlab_enabled_tracers = self;
    self->enabled = 1;
    if (hook_enable(self) < 0) {
        /* hook_enable may run Python (threading.settrace): other threads
         * have pushed frames meanwhile; end them before their Calls go. */
        self->enabled = 0;
        enabled_list_remove(self);
        tracer_close_all_frames(self);
        attrib_detach(&self->attrib);
        sampler_stop(&self->sampler);
        self->state = TRACER_OFF;
        return NULL;
    }
    self->state = TRACER_ON;
    Py_RETURN_NONE;
}

/* Also used by dealloc and atexit: never leaves a hook behind. */
static int
tracer_disable(TracerObject *self)
{
    switch (self->state) {
    case TRACER_OFF:
    case TRACER_DISABLING:
        /* Re-entered from the last sample(), or from another thread: the
         * call under way finishes disabling. */
        return 0;
    case TRACER_ENABLING:
        PyErr_SetString(PyExc_RuntimeError,
                        "Tracer.disable() while the tracer is being enabled (from its memory "
                        "source's prepare(), or on another thread); disable it after enable() "
                        "has returned");
        return -1;
    case TRACER_ON:
        break;
    }
    self->state = TRACER_DISABLING;
    /* Off the list before the last reading runs Python code: no event may
     * reach this tracer any more.  A dying tracer (dealloc) must not be
     * found there: an event's reference would take it from 0 to 1 and back,
     * freeing it a second time. */
    self->enabled = 0;
    enabled_list_remove(self);
    tracer_close_all_frames(self);
    if (self->attrib.attached && !self->attrib_moved) {
        callfigures_settle_last(&self->clock, &self->codes, &self->attrib);
    }
    attrib_detach(&self->attrib);
    sampler_stop(&self->sampler);
    int rc = hook_disable(self);
    self->state = TRACER_OFF;
    return rc;
}

static PyObject *
Tracer_disable(TracerObject *self, PyObject *unused)
{
    if (tracer_disable(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Lines after this read another device (set_target_gpu inside a profiled
 * function).  The open interval is folded from the old device first. */
static PyObject *
Tracer_set_device(TracerObject *self, PyObject *arg)
{
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!tracer_ready(self)) {
        return NULL;
    }
    if (value < 0 || value > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "device index must be from 0 to %d, not %ld",
                     INT_MAX, value);
        return NULL;
    }
    int device = (int)value;
    int old = self->sampler.device;
    self->sampler.device = device;
    if (!self->enabled) {
        Py_RETURN_NONE;
    }
    /* Close the open interval on the old device, then measure from the new. */
    self->sampler.device = old;
    tracer_fold_now(self);
    self->sampler.device = device;
    if (sampler_start(&self->sampler) < 0) {
        self->sampler.device = old;
        return NULL;
    }
    int64_t level = self->sampler.growth_field >= 0
                    ? self->sampler.reading[self->sampler.growth_field] : 0;
    tracer_restart_levels(self, level);
    /* Blocks are followed per device: start over on the new one.  A peak
     * already taken may be of the old device: stats() says so. */
    if (self->attrib.attached && old != device) {
        if (!self->attrib_moved) {
            callfigures_settle_last(&self->clock, &self->codes, &self->attrib);
        }
        tracer_drop_calls(self);
        attrib_detach(&self->attrib);
        self->attrib_moved = 1;
        if (attrib_attach(&self->attrib, self->sampler.source.compiled, device) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
Tracer_clear(TracerObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"keep_calls", NULL};
    int keep_calls = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:clear", kwlist, &keep_calls)) {
        return NULL;
    }
    for (int i = 0; i < self->codes.n_tables; i++) {
        linetable_clear(self->codes.tables[i]);
        attrib_peak_clear(self->codes.tables[i], !keep_calls);
        if (keep_calls) {
            callfigures_rotate(self->codes.tables[i]);
        }
        else {
            callfigures_clear(self->codes.tables[i]);
        }
    }
    if (!keep_calls) {
        callfigures_clear_clock(&self->clock);
    }
    curveset_clear(&self->curves);
    self->sample_errors = self->memory_errors = 0;
    self->attrib_moved = 0;
    self->attrib.failed = 0;
    Py_RETURN_NONE;
}


static int
Tracer_traverse(TracerObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->sampler.source.object);
    return 0;
}

static void
Tracer_dealloc(TracerObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->state == TRACER_ON) {
        memlab_saved_exc saved;
        memlab_save_exc(&saved);
        if (tracer_disable(self) < 0) {
            PyErr_WriteUnraisable((PyObject *)self);
        }
        memlab_restore_exc(&saved);
    }
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    codemap_dealloc(&self->codes);
    threadstacks_dealloc(&self->threads);
    suspensions_dealloc(&self->suspensions);
    curveset_dealloc(&self->curves);
    sampler_dealloc(&self->sampler);
    free(self->interval);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyMethodDef Tracer_methods[] = {
    {"add_code", (PyCFunction)Tracer_add_code, METH_O, "Register a code object."},
    {"codes", (PyCFunction)Tracer_codes, METH_NOARGS, "Registered code objects."},
    {"enable", (PyCFunction)Tracer_enable, METH_NOARGS, "Start receiving events."},
    {"disable", (PyCFunction)Tracer_disable, METH_NOARGS,
     "Commit open lines and remove every hook."},
    {"set_device", (PyCFunction)Tracer_set_device, METH_O,
     "Read another device from the next event on."},
    {"clear", (PyCFunction)(void (*)(void))Tracer_clear, METH_VARARGS | METH_KEYWORDS,
     "Forget the figures; keep_calls=True goes on counting calls (and each line's "
     "least growth per call)."},
    {"stats", (PyCFunction)Tracer_stats, METH_NOARGS,
     "[(code, {line: (count, net_growth, values)}), ...] in registration order"},
    {"call_stats", (PyCFunction)Tracer_call_stats, METH_NOARGS,
     "[(code, (calls, {line: (first, later, least_growth)})), ...] in registration order"},
    {"peaks", (PyCFunction)Tracer_peaks, METH_NOARGS,
     "[(code, (bytes, lineno, call, before, other, {lineno: held}) or None)]"},
    {"live_by_line", (PyCFunction)Tracer_live_by_line, METH_O,
     "(bytes, call, before, other, after, {lineno: live}) now, around the latest call "
     "of a registered code object, or None"},
    {"curves", (PyCFunction)Tracer_curves, METH_NOARGS,
     "[(code, (points, merged, call, calls, events)), ...]: each function's kept "
     "curve; a point is (line, active, reserved, peak, callee code or None)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tracer_getset[] = {
    {"columns", (getter)Tracer_get_columns, NULL, "column names", NULL},
    {"growth_field", (getter)Tracer_get_growth_field, NULL, "net growth's field", NULL},
    {"enabled", (getter)Tracer_get_enabled, NULL, "receiving events", NULL},
    {"device", (getter)Tracer_get_device, NULL, "device index", NULL},
    {"peak_unavailable", (getter)Tracer_get_peak_unavailable, NULL,
     "why peaks have no breakdown, or None", NULL},
    {"sample_errors", (getter)Tracer_get_sample_errors, NULL, "failed readings", NULL},
    {"tool_id", (getter)Tracer_get_tool_id, NULL, "sys.monitoring tool id or -1", NULL},
    {"followed_blocks", (getter)Tracer_get_followed_blocks, NULL,
     "(live blocks followed, slots of their table)", NULL},
    {"followed_level", (getter)Tracer_get_followed_level, NULL,
     "the level the followed blocks make, or None when none are followed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Tracer_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(TracerObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Tracer_slots[] = {
    {Py_tp_doc, "Per-line memory tracer for registered code objects."},
    {Py_tp_init, Tracer_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Tracer_dealloc},
    {Py_tp_traverse, Tracer_traverse},
    {Py_tp_methods, Tracer_methods},
    {Py_tp_getset, Tracer_getset},
    {Py_tp_members, Tracer_members},
    {0, NULL},
};

static PyType_Spec Tracer_spec = {
    .name = "pytorch_memlab._tracer.Tracer",
    .basicsize = sizeof(TracerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Tracer_slots,
};

int
tracer_type_init(PyObject *module)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &Tracer_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    int rc = PyModule_AddObject(module, "Tracer", type);
    if (rc < 0) {
        Py_DECREF(type);
        return rc;
    }
    return PyModule_AddIntConstant(module, "CURVE_MAX_POINTS", MEMLAB_CURVE_MAX_POINTS);
}
