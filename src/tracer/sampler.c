/* A sampler's source, its columns and their kinds: what it reads, chosen
 * once (sampler.h); the readings themselves are sampler_read.c's. */
#include "sampler.h"

#include <stdlib.h>
#include <string.h>

/* ---- the source's identity -------------------------------------------- */

/* (name, fields) as Python objects; NULL with an exception set. */
PyObject *
sampler_source_info(PyObject *source)
{
    Source src;
    PyObject *info = NULL;
    if (source_open(&src, source) == 0) {
        info = PyTuple_Pack(2, src.name, src.field_names);
    }
    source_close(&src);
    return info;
}

PyObject *
sampler_field_table(PyObject *source)
{
    Source src;
    PyObject *table = NULL;
    int *kinds = NULL, *units = NULL;
    if (source_open(&src, source) < 0) {
        goto error;
    }
    int n = src.n_fields;
    kinds = calloc((size_t)n + 1, sizeof(int));
    units = calloc((size_t)n + 1, sizeof(int));
    if (kinds == NULL || units == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    if (src.ops->field_codes(&src, kinds, units) < 0) {
        goto error;
    }
    table = PyTuple_New(n);
    for (int f = 0; table != NULL && f < n; f++) {
        PyObject *row = Py_BuildValue("(Oss)", PyTuple_GET_ITEM(src.field_names, f),
                                      memlab_kind_names[kinds[f]], memlab_unit_names[units[f]]);
        if (row == NULL) {
            Py_CLEAR(table);
            break;
        }
        PyTuple_SET_ITEM(table, f, row);
    }
error:
    free(kinds);
    free(units);
    source_close(&src);
    return table;
}

/* ---- columns ----------------------------------------------------------- */

static int
field_index(PyObject *fields, PyObject *name)
{
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    for (Py_ssize_t i = 0; i < n; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(fields, i), name, Py_EQ);
        if (eq < 0) {
            return -2;
        }
        if (eq) {
            return (int)i;
        }
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *valid = sep ? PyUnicode_Join(sep, fields) : NULL;
    Py_XDECREF(sep);
    if (valid == NULL) {
        return -2;
    }
    PyErr_Format(PyExc_ValueError, "unknown column %R; valid columns: %U", name, valid);
    Py_DECREF(valid);
    return -2;
}

static int
sampler_pick_columns(Sampler *s, PyObject *fields, PyObject *columns)
{
    PyObject *seq = PySequence_Tuple(columns);
    if (seq == NULL) {
        return -1;
    }
    int n = (int)PyTuple_GET_SIZE(seq), ret = -1;
    s->n_columns = n;
    s->field_of = calloc((size_t)n + 1, sizeof(int));
    s->kinds = calloc((size_t)n + 1, sizeof(int));
    s->folds = calloc((size_t)n + 1, sizeof(memlab_fold));
    s->last_counter = calloc((size_t)n + 1, sizeof(int64_t));
    s->polled = calloc((size_t)n + 1, sizeof(int64_t));
    if (!s->field_of || !s->kinds || !s->folds || !s->last_counter || !s->polled) {
        PyErr_NoMemory();
        goto error;
    }
    for (int c = 0; c < n; c++) {
        PyObject *name = PyTuple_GET_ITEM(seq, c);
        int f = field_index(fields, name);
        if (f < 0) {
            goto error;
        }
        s->field_of[c] = f;
        s->kinds[c] = s->field_kinds[f];
        s->folds[c] = s->kinds[c] == MEMLAB_COUNTER ? FOLD_SUM : FOLD_MAX;
        s->has_peaks |= s->kinds[c] == MEMLAB_PEAK;
    }
    ret = 0;
error:
    Py_DECREF(seq);
    return ret;
}

static int
reader_idle(const void *record)
{
    return ((const SamplerReader *)record)->reader == READER_IDLE;
}

int
sampler_init(Sampler *s, PyObject *source, int device, PyObject *columns,
             PyObject *growth_field)
{
    if (source_open(&s->source, source) < 0) {
        return -1;
    }
    PyObject *fields = s->source.field_names;
    int n_fields = s->source.n_fields;
    s->device = device;
    s->growth_field = -1;
    for (int f = 0; f < n_fields; f++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(fields, f))) {
            PyErr_SetString(PyExc_TypeError, "source field names must be str");
            return -1;
        }
    }
    s->reading = calloc((size_t)n_fields + 1, sizeof(int64_t));
    s->carried = calloc((size_t)n_fields + 1, sizeof(int64_t));
    s->field_kinds = calloc((size_t)n_fields + 1, sizeof(int));
    if (s->reading == NULL || s->carried == NULL || s->field_kinds == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (s->source.ops->field_codes(&s->source, s->field_kinds, NULL) < 0) {
        return -1;
    }
    if (sampler_pick_columns(s, fields, columns) < 0) {
        return -1;
    }
    if (growth_field != NULL && growth_field != Py_None) {
        s->growth_field = field_index(fields, growth_field);
        if (s->growth_field < 0) {
            return -1;
        }
    }
    sampler_choose_take(s);
    threadtable_init(&s->readers,
                     sizeof(SamplerReader) + sizeof(int64_t) * (size_t)s->n_columns,
                     reader_idle);
    return 0;
}

void
sampler_dealloc(Sampler *s)
{
    if (s->source.ops != NULL) {
        sampler_stop(s);
    }
    threadtable_clear(&s->readers, NULL);
    source_close(&s->source);
    free(s->carried); free(s->field_kinds);
    s->carried = NULL; s->field_kinds = NULL;
    free(s->field_of); free(s->kinds); free(s->folds);
    free(s->reading); free(s->last_counter); free(s->polled);
    s->field_of = NULL; s->kinds = NULL; s->folds = NULL;
    s->reading = NULL; s->last_counter = NULL; s->polled = NULL;
}

static PyObject *
sampler_field_name(const Sampler *s, int field)
{
    return Py_NewRef(PyTuple_GET_ITEM(s->source.field_names, field));
}

PyObject *
sampler_columns(const Sampler *s)
{
    PyObject *names = PyTuple_New(s->n_columns);
    for (int c = 0; names != NULL && c < s->n_columns; c++) {
        PyObject *name = sampler_field_name(s, s->field_of[c]);
        if (name == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, c, name);
    }
    return names;
}

PyObject *
sampler_growth_name(const Sampler *s)
{
    if (s->growth_field < 0) {
        Py_RETURN_NONE;
    }
    return sampler_field_name(s, s->growth_field);
}
