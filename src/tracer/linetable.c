#include "linetable.h"
#include "attrib.h"
#include "callfigures.h"

#include <stdlib.h>
#include <string.h>

/* Line span of a code object from co_lines(), so the common case never grows.
 * Falls back to co_firstlineno alone if co_lines() is unavailable. */
static void
code_line_span(PyObject *code, int *first, int *last)
{
    int lo = ((PyCodeObject *)code)->co_firstlineno, hi = lo;
    PyObject *it = PyObject_CallMethod(code, "co_lines", NULL);
    PyObject *row;
    if (it == NULL) {
        PyErr_Clear();
#if PY_VERSION_HEX < 0x030A0000
        /* 3.9 has no co_lines: walk co_lnotab's (offset, signed line) steps. */
        PyObject *tab = ((PyCodeObject *)code)->co_lnotab;
        if (tab != NULL && PyBytes_Check(tab)) {
            const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(tab);
            Py_ssize_t n = PyBytes_GET_SIZE(tab);
            long line = lo;
            for (Py_ssize_t i = 0; i + 1 < n; i += 2) {
                line += (signed char)b[i + 1];
                if (line > 0 && line < INT32_MAX) {
                    if (line < lo) lo = (int)line;
                    if (line > hi) hi = (int)line;
                }
            }
        }
#endif
        *first = lo; *last = hi;
        return;
    }
    PyObject *iter = PyObject_GetIter(it);
    Py_DECREF(it);
    if (iter == NULL) {
        PyErr_Clear();
        *first = lo; *last = hi;
        return;
    }
    while ((row = PyIter_Next(iter)) != NULL) {
        PyObject *line = PyTuple_Check(row) && PyTuple_GET_SIZE(row) == 3
                         ? PyTuple_GET_ITEM(row, 2) : NULL;
        if (line != NULL && line != Py_None) {
            long n = PyLong_AsLong(line);
            if (n > 0 && n < INT32_MAX) {
                if (n < lo) lo = (int)n;
                if (n > hi) hi = (int)n;
            }
        }
        Py_DECREF(row);
    }
    Py_DECREF(iter);
    PyErr_Clear();
    *first = lo; *last = hi;
}

static int
linetable_alloc(LineTable *t, int first_line, int n_slots)
{
    size_t n = (size_t)n_slots, c = (size_t)t->n_columns;
    t->hits = calloc(n, sizeof(int64_t));
    t->growth = calloc(n, sizeof(int64_t));
    t->values = calloc(n * (c ? c : 1), sizeof(int64_t));
    t->seen = calloc(n, 1);
    if (!t->hits || !t->growth || !t->values || !t->seen) {
        return -1;
    }
    t->first_line = first_line;
    t->n_slots = n_slots;
    return 0;
}

static void
linetable_release_arrays(LineTable *t)
{
    free(t->hits); free(t->growth); free(t->values); free(t->seen);
    t->hits = t->growth = t->values = NULL;
    t->seen = NULL;
}

LineTable *
linetable_new(PyObject *code, int n_columns)
{
    int first, last;
    LineTable *t = calloc(1, sizeof(LineTable));
    if (t == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    t->n_columns = n_columns;
    code_line_span(code, &first, &last);
    if (linetable_alloc(t, first, last - first + 1) < 0) {
        linetable_release_arrays(t);
        free(t);
        PyErr_NoMemory();
        return NULL;
    }
    t->code = Py_NewRef(code);
    return t;
}

void
linetable_free(LineTable *t)
{
    if (t == NULL) {
        return;
    }
    Py_CLEAR(t->code);
    callfigures_free(t->calls);
    attrib_peak_free(t->peak);
    linetable_release_arrays(t);
    free(t);
}

void
linetable_clear(LineTable *t)
{
    size_t n = (size_t)t->n_slots, c = (size_t)t->n_columns;
    memset(t->hits, 0, n * sizeof(int64_t));
    memset(t->growth, 0, n * sizeof(int64_t));
    memset(t->values, 0, n * (c ? c : 1) * sizeof(int64_t));
    memset(t->seen, 0, n);
}

/* Widen the table so `line` has a slot; existing records keep their lines. */
static int
linetable_cover(LineTable *t, int line)
{
    LineTable wider = *t;
    int lo = line < t->first_line ? line : t->first_line;
    int hi_old = t->first_line + t->n_slots - 1;
    int hi = line > hi_old ? line : hi_old;
    size_t c = (size_t)(t->n_columns ? t->n_columns : 1);
    if (linetable_alloc(&wider, lo, hi - lo + 1) < 0) {
        linetable_release_arrays(&wider);
        return -1;
    }
    size_t shift = (size_t)(t->first_line - lo), n = (size_t)t->n_slots;
    memcpy(wider.hits + shift, t->hits, n * sizeof(int64_t));
    memcpy(wider.growth + shift, t->growth, n * sizeof(int64_t));
    memcpy(wider.values + shift * c, t->values, n * c * sizeof(int64_t));
    memcpy(wider.seen + shift, t->seen, n);
    linetable_release_arrays(t);
    *t = wider;
    return 0;
}

int
linetable_commit(LineTable *t, int line, int counted, int64_t growth,
                 const int64_t *values, const memlab_fold *folds)
{
    if (line < t->first_line || line >= t->first_line + t->n_slots) {
        if (line <= 0 || linetable_cover(t, line) < 0) {
            return -1;
        }
    }
    int slot = line - t->first_line;
    int64_t *row = t->values + (size_t)slot * (size_t)t->n_columns;
    int first_time = !t->seen[slot];
    for (int c = 0; c < t->n_columns; c++) {
        if (folds[c] == FOLD_SUM) {
            row[c] = memlab_add_sat(row[c], values[c]);
        }
        else if (first_time || values[c] > row[c]) {
            row[c] = values[c];
        }
    }
    t->hits[slot] += counted ? 1 : 0;
    t->growth[slot] = memlab_add_sat(t->growth[slot], growth);
    t->seen[slot] = 1;
    t->commits++;
    return 0;
}

PyObject *
linetable_figures(int64_t hits, int64_t growth, const int64_t *values, int n_columns)
{
    PyObject *tuple = PyTuple_New(n_columns);
    if (tuple == NULL) {
        return NULL;
    }
    for (int c = 0; c < n_columns; c++) {
        PyObject *v = PyLong_FromLongLong(values[c]);
        if (v == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, c, v);
    }
    return Py_BuildValue("(LLN)", (long long)hits, (long long)growth, tuple);
}

static PyObject *
linetable_row(const LineTable *t, int slot)
{
    return linetable_figures(t->hits[slot], t->growth[slot],
                             t->values + (size_t)slot * (size_t)t->n_columns, t->n_columns);
}

LineTable *
linetable_take(LineTable *t)
{
    LineTable *moved = calloc(1, sizeof(LineTable));
    if (moved == NULL) {
        return NULL;
    }
    *moved = *t;
    moved->code = NULL;
    moved->calls = NULL;
    moved->peak = NULL;     /* the peak stays with its function */
    if (linetable_alloc(t, t->first_line, t->n_slots) < 0) {
        linetable_release_arrays(t);
        t->hits = moved->hits; t->growth = moved->growth;
        t->values = moved->values; t->seen = moved->seen;
        free(moved);
        return NULL;
    }
    return moved;
}

PyObject *
linetable_to_dict(const LineTable *t)
{
    PyObject *result = PyDict_New();
    if (result == NULL) {
        return NULL;
    }
    for (int slot = 0; slot < t->n_slots; slot++) {
        if (!t->seen[slot]) {
            continue;
        }
        PyObject *key = PyLong_FromLong(t->first_line + slot);
        PyObject *row = key ? linetable_row(t, slot) : NULL;
        int rc = row ? PyDict_SetItem(result, key, row) : -1;
        Py_XDECREF(key);
        Py_XDECREF(row);
        if (rc < 0) {
            Py_DECREF(result);
            return NULL;
        }
    }
    return result;
}
