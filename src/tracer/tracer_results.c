/* A Tracer's figures read back (stats, per-call figures, peaks, what is
 * live by line, curves): the methods tracer_type.c lists. */
#include "tracer_methods.h"

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

PyObject *
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

PyObject *
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

PyObject *
tracer_peak_rows(TracerObject *t, PyObject *(*peak_of)(const AttribPeak *))
{
    PyObject *result = PyList_New(0);
    for (int i = 0; result != NULL && i < t->codes.n_tables; i++) {
        LineTable *table = t->codes.tables[i];
        AttribPeak *p = attrib_peak_copy(table);
        PyObject *peak = p != NULL ? peak_of(p) : Py_NewRef(Py_None);
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

PyObject *
Tracer_peaks(TracerObject *self, PyObject *unused)
{
    if (!tracer_ready(self)) {
        return NULL;
    }
    return tracer_peak_rows(self, peak_to_tuple);
}

/* What is alive now around the latest call of `code` (Tracer.live_by_line). */
PyObject *
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
PyObject *
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

PyObject *
Tracer_curves(TracerObject *self, PyObject *unused)
{
    if (!tracer_ready(self)) {
        return NULL;
    }
    return curveset_to_list(&self->curves);
}

PyObject *
Tracer_get_columns(TracerObject *self, void *closure)
{
    return tracer_ready(self) ? sampler_columns(&self->sampler) : NULL;
}

PyObject *
Tracer_get_growth_field(TracerObject *self, void *closure)
{
    return tracer_ready(self) ? sampler_growth_name(&self->sampler) : NULL;
}

PyObject *
Tracer_get_enabled(TracerObject *self, void *closure)
{
    return PyBool_FromLong(self->enabled);
}

PyObject *
Tracer_get_device(TracerObject *self, void *closure)
{
    return PyLong_FromLong(self->sampler.device);
}

PyObject *
Tracer_get_sample_errors(TracerObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->sample_errors);
}

PyObject *
Tracer_get_followed_level(TracerObject *self, void *closure)
{
    if (!self->attrib.attached) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(attrib_level(&self->attrib));
}

PyObject *
Tracer_get_followed_blocks(TracerObject *self, void *closure)
{
    size_t used, capacity;
    attrib_table_size(&self->attrib, &used, &capacity);
    return Py_BuildValue("(nn)", (Py_ssize_t)used, (Py_ssize_t)capacity);
}

PyObject *
Tracer_get_tool_id(TracerObject *self, void *closure)
{
    return PyLong_FromLong(self->tool_id);
}
