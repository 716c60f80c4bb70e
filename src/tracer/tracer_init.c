/* Tracer.__init__: the source and columns read, the curve chosen. */
#include "tracer_methods.h"

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

int
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
