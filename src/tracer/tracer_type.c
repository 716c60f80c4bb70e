/* The Python face of a Tracer: construction, registration, control, stats. */
#include "tracer.h"

#include <limits.h>
#include <stdlib.h>

/* Tracer(curve_columns=(reserved, peak)): which columns a curve point reads
 * for the reserved level and the line's peak; None (or a None item): the
 * growth field's level. */
static int
curve_columns_init(TracerObject *self, PyObject *names)
{
    int ret = -1;
    PyObject *items = NULL, *columns = NULL;
    int *targets[2] = {&self->curves.reserved_column, &self->curves.peak_column};
    if (names == Py_None) {
        return 0;
    }
    items = PySequence_Tuple(names);
    if (items == NULL) {
        goto error;
    }
    if (PyTuple_GET_SIZE(items) != 2) {
        PyErr_SetString(PyExc_ValueError, "curve_columns must be (reserved level column, "
                        "peak column), each a column name or None");
        goto error;
    }
    columns = sampler_columns(&self->sampler);
    if (columns == NULL) {
        goto error;
    }
    for (int k = 0; k < 2; k++) {
        PyObject *name = PyTuple_GET_ITEM(items, k);
        if (name == Py_None) {
            continue;
        }
        Py_ssize_t at = PySequence_Index(columns, name);
        if (at < 0) {
            PyErr_Format(PyExc_ValueError, "curve_columns: %R is not one of the columns %R",
                         name, columns);
            goto error;
        }
        *targets[k] = (int)at;
    }
    ret = 0;
error:
    Py_XDECREF(items);
    Py_XDECREF(columns);
    return ret;
}

static int
Tracer_init(TracerObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"source", "device", "columns", "growth_field", "curve",
                             "curve_columns", "follow_blocks", NULL};
    PyObject *source, *columns, *growth = Py_None, *curve = Py_None, *curve_columns = Py_None;
    int device;
    int follow_blocks = 1;
    if (self->interval != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Tracer is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OiO|OOOp:Tracer", kwlist,
                                     &source, &device, &columns, &growth, &curve,
                                     &curve_columns, &follow_blocks)) {
        return -1;
    }
    self->follow_blocks = follow_blocks;
    curveset_init(&self->curves);
    if (curveset_parse_choice(&self->curves, curve) < 0) {
        return -1;
    }
    if (PyUnicode_Check(columns)) {
        PyErr_SetString(PyExc_TypeError, "columns must be a sequence of str, not one str");
        return -1;
    }
    if (sampler_init(&self->sampler, source, device, columns, growth) < 0) {
        sampler_dealloc(&self->sampler);    /* a failed init may be retried */
        return -1;
    }
    int n = self->sampler.n_columns;
    self->interval = calloc((size_t)n + 1, sizeof(int64_t));
    if (self->interval == NULL) {
        sampler_dealloc(&self->sampler);
        PyErr_NoMemory();
        return -1;
    }
    if (curve_columns_init(self, curve_columns) < 0) {
        free(self->interval);
        self->interval = NULL;
        sampler_dealloc(&self->sampler);
        return -1;
    }
    codemap_init(&self->codes);
    threadstacks_init(&self->threads);
    self->tool_id = -1;
    return 0;
}

static int
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
    TracerObject **link = &memlab_enabled_tracers;
    while (*link != NULL && *link != t) {
        link = &(*link)->next_enabled;
    }
    if (*link == t) {
        *link = t->next_enabled;
    }
    t->next_enabled = NULL;
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
warn_lost(TracerObject *self)
{
    Py_ssize_t lost = self->memory_errors + self->curves.memory_errors;
    if (self->sample_errors == 0 && lost == 0) {
        return 0;
    }
    return PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                            "pytorch_memlab: %zd readings of the memory source failed and "
                            "%zd line records were lost to memory errors; figures are partial",
                            self->sample_errors, lost);
}

static PyObject *
Tracer_stats(TracerObject *self, PyObject *unused)
{
    if (!tracer_ready(self) || warn_lost(self) < 0) {
        return NULL;
    }
    /* A list, not a dict keyed by code: code objects compiled from the same
     * source in two files compare equal, and each has its own figures.
     * Appended, not sized up front: an allocation may run a finalizer that
     * registers more code. */
    PyObject *result = PyList_New(0);
    for (int i = 0; result != NULL && i < self->codes.n_tables; i++) {
        LineTable *table = self->codes.tables[i];
        PyObject *lines = callfigures_all_to_dict(table, self->sampler.folds);
        PyObject *pair = lines ? PyTuple_Pack(2, table->code, lines) : NULL;
        if (pair == NULL || PyList_Append(result, pair) < 0) {
            Py_CLEAR(result);
        }
        Py_XDECREF(pair);
        Py_XDECREF(lines);
    }
    return result;
}

static PyObject *
Tracer_call_stats(TracerObject *self, PyObject *unused)
{
    if (!tracer_ready(self) || warn_lost(self) < 0) {
        return NULL;
    }
    PyObject *result = PyList_New(0);
    for (int i = 0; result != NULL && i < self->codes.n_tables; i++) {
        LineTable *table = self->codes.tables[i];
        PyObject *calls = callfigures_to_tuple(
            table, self->attrib.attached && !self->attrib_moved ? &self->attrib : NULL);
        PyObject *row = calls ? Py_BuildValue("(OO)", table->code, calls) : NULL;
        if (row == NULL || PyList_Append(result, row) < 0) {
            Py_CLEAR(result);
        }
        Py_XDECREF(row);
        Py_XDECREF(calls);
    }
    return result;
}

/* {lineno: bytes} of the non-zero slots; NULL with an exception. */
static PyObject *
bytes_by_line(int first_line, int n_slots, const int64_t *bytes)
{
    PyObject *by_line = PyDict_New();
    if (by_line == NULL) {
        return NULL;
    }
    for (int s = 0; s < n_slots; s++) {
        if (bytes[s] == 0) {
            continue;
        }
        PyObject *k = PyLong_FromLong(first_line + s);
        PyObject *v = PyLong_FromLongLong(bytes[s]);
        int rc = (k && v) ? PyDict_SetItem(by_line, k, v) : -1;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (rc < 0) {
            Py_DECREF(by_line);
            return NULL;
        }
    }
    return by_line;
}

/* One function's peak as a tuple (see Tracer.peaks); NULL with an exception. */
static PyObject *
peak_to_tuple(const AttribPeak *p)
{
    PyObject *held = bytes_by_line(p->first_line, p->n_slots, p->held);
    if (held == NULL) {
        return NULL;
    }
    PyObject *row = Py_BuildValue("(LiLLLO)", (long long)p->bytes, p->line, (long long)p->call,
                                  (long long)p->before, (long long)p->other, held);
    Py_DECREF(held);
    return row;
}

static PyObject *
Tracer_peaks(TracerObject *self, PyObject *unused)
{
    if (!tracer_ready(self)) {
        return NULL;
    }
    PyObject *result = PyList_New(0);
    for (int i = 0; result != NULL && i < self->codes.n_tables; i++) {
        LineTable *table = self->codes.tables[i];
        AttribPeak *p = attrib_peak_copy(table);
        PyObject *peak = p != NULL ? peak_to_tuple(p) : Py_NewRef(Py_None);
        free(p);
        PyObject *row = peak ? PyTuple_Pack(2, table->code, peak) : NULL;
        if (row == NULL || PyList_Append(result, row) < 0) {
            Py_CLEAR(result);
        }
        Py_XDECREF(row);
        Py_XDECREF(peak);
    }
    return result;
}

/* What is alive now around the latest call of `code` (Tracer.live_by_line). */
static PyObject *
Tracer_live_by_line(TracerObject *self, PyObject *code)
{
    PyObject *result = NULL;
    PyObject *lines = NULL;      /* Owned. */
    AttribLive *live = NULL;     /* Owned. */
    if (!tracer_ready(self)) {
        return NULL;
    }
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "live_by_line() takes a code object, not %.100s "
                     "(pass func.__code__)", Py_TYPE(code)->tp_name);
        return NULL;
    }
    LineTable *table = codemap_get(&self->codes, code);
    if (table == NULL) {
        PyErr_SetString(PyExc_ValueError, "live_by_line(): the code object is not registered "
                        "with this tracer (add_code() it first)");
        return NULL;
    }
    if (attrib_live_now(&self->attrib, table, &live) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (live == NULL) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    lines = bytes_by_line(live->first_line, live->n_slots, live->live);
    if (lines == NULL) {
        goto done;
    }
    result = Py_BuildValue("(LLLLLO)", (long long)live->bytes, (long long)live->call,
                           (long long)live->before, (long long)live->other,
                           (long long)live->after, lines);
done:
    Py_XDECREF(lines);
    free(live);
    return result;
}

/* Why there is no breakdown at the peak, or None. */
static PyObject *
Tracer_get_peak_unavailable(TracerObject *self, void *closure)
{
    if (!tracer_ready(self)) {
        return NULL;
    }
    if (!self->follow_blocks) {
        return PyUnicode_FromString("following allocations is off (follow_blocks=False)");
    }
    if (!attrib_offered(self->sampler.source.compiled)) {
        return PyUnicode_FromString("its memory source does not report allocations one "
                                    "by one (a polled source: CUDA columns beyond the "
                                    "pushed ones, cudaMallocAsync, no compiled shim)");
    }
    if (self->attrib.failed) {
        return PyUnicode_FromString("memory ran out while following allocations");
    }
    if (self->attrib_moved) {
        return PyUnicode_FromString("the device changed while profiling");
    }
    Py_RETURN_NONE;
}

static PyObject *
Tracer_curves(TracerObject *self, PyObject *unused)
{
    if (!tracer_ready(self)) {
        return NULL;
    }
    return curveset_to_list(&self->curves);
}

static PyObject *
Tracer_get_columns(TracerObject *self, void *closure)
{
    return tracer_ready(self) ? sampler_columns(&self->sampler) : NULL;
}

static PyObject *
Tracer_get_growth_field(TracerObject *self, void *closure)
{
    return tracer_ready(self) ? sampler_growth_name(&self->sampler) : NULL;
}

static PyObject *
Tracer_get_enabled(TracerObject *self, void *closure)
{
    return PyBool_FromLong(self->enabled);
}

static PyObject *
Tracer_get_device(TracerObject *self, void *closure)
{
    return PyLong_FromLong(self->sampler.device);
}

static PyObject *
Tracer_get_sample_errors(TracerObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->sample_errors);
}

static PyObject *
Tracer_get_followed_level(TracerObject *self, void *closure)
{
    if (!self->attrib.attached) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(attrib_level(&self->attrib));
}

static PyObject *
Tracer_get_followed_blocks(TracerObject *self, void *closure)
{
    size_t used, capacity;
    attrib_table_size(&self->attrib, &used, &capacity);
    return Py_BuildValue("(nn)", (Py_ssize_t)used, (Py_ssize_t)capacity);
}

static PyObject *
Tracer_get_tool_id(TracerObject *self, void *closure)
{
    return PyLong_FromLong(self->tool_id);
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
