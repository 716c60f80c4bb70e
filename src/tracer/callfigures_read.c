/* The per-call figures read back (callfigures.h): over all calls, and the
 * first call against the later ones with each line's least growth. */
#include "callfigures.h"

#include <stdlib.h>
#include <string.h>

/* Is `line` a line that ran in table `t` (NULL: none)?  Its slot in *slot. */
static int
ran(const LineTable *t, int line, int *slot)
{
    if (t == NULL || line < t->first_line || line >= t->first_line + t->n_slots) {
        return 0;
    }
    *slot = line - t->first_line;
    return t->seen[*slot];
}

static const int64_t *
row_of(const LineTable *t, int slot)
{
    return t->values + (size_t)slot * (size_t)t->n_columns;
}

/* The span of lines the two tables cover. */
static void
span(const LineTable *a, const LineTable *b, int *lo, int *hi)
{
    *lo = a->first_line;
    *hi = a->first_line + a->n_slots - 1;
    if (b != NULL) {
        if (b->first_line < *lo) *lo = b->first_line;
        if (b->first_line + b->n_slots - 1 > *hi) *hi = b->first_line + b->n_slots - 1;
    }
}

/* first and later folded together as more executions of the same line. */
static PyObject *
folded_row(const LineTable *first, int fs, const LineTable *later, int ls,
           const memlab_fold *folds, int64_t *scratch)
{
    int n = later->n_columns;
    const int64_t *a = row_of(first, fs), *b = row_of(later, ls);
    for (int c = 0; c < n; c++) {
        scratch[c] = folds[c] == FOLD_SUM ? memlab_add_sat(a[c], b[c])
                                          : (a[c] > b[c] ? a[c] : b[c]);
    }
    return linetable_figures(first->hits[fs] + later->hits[ls],
                             memlab_add_sat(first->growth[fs], later->growth[ls]),
                             scratch, n);
}

PyObject *
callfigures_all_to_dict(const LineTable *t, const memlab_fold *folds)
{
    const LineTable *first = t->calls != NULL ? t->calls->first : NULL;
    if (first == NULL) {
        return linetable_to_dict(t);
    }
    PyObject *result = NULL, *key = NULL, *row = NULL;
    int64_t *scratch = calloc((size_t)(t->n_columns ? t->n_columns : 1), sizeof(int64_t));
    int lo, hi;
    if (scratch == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    result = PyDict_New();
    if (result == NULL) {
        goto error;
    }
    span(t, first, &lo, &hi);
    for (int line = lo; line <= hi; line++) {
        int fs = 0, ls = 0;
        int in_first = ran(first, line, &fs), in_later = ran(t, line, &ls);
        if (in_first && in_later) {
            row = folded_row(first, fs, t, ls, folds, scratch);
        }
        else if (in_first || in_later) {
            const LineTable *only = in_first ? first : t;
            int s = in_first ? fs : ls;
            row = linetable_figures(only->hits[s], only->growth[s], row_of(only, s),
                                    only->n_columns);
        }
        else {
            continue;
        }
        key = PyLong_FromLong(line);
        if (row == NULL || key == NULL || PyDict_SetItem(result, key, row) < 0) {
            goto error;
        }
        Py_CLEAR(key);
        Py_CLEAR(row);
    }
    free(scratch);
    return result;
error:
    Py_XDECREF(key);
    Py_XDECREF(row);
    Py_XDECREF(result);
    free(scratch);
    return NULL;
}

/* A line's figures in table `t` as a tuple, or None where it did not run. */
static PyObject *
figures_or_none(const LineTable *t, int line)
{
    int s = 0;
    if (!ran(t, line, &s)) {
        Py_RETURN_NONE;
    }
    return linetable_figures(t->hits[s], t->growth[s], row_of(t, s), t->n_columns);
}

/* The least growth per line with the calls not folded yet (the deferred
 * one, the last one) taken as they stand now: exact while blocks are
 * followed.  A new array, or NULL with an exception set. */
static int64_t *
pending_least(const CallFigures *f, const LineTable *t, const Attrib *a)
{
    size_t n = (size_t)f->n_slots;
    int64_t *least = malloc(n * sizeof(int64_t)), *now = malloc(n * sizeof(int64_t));
    if (least == NULL || now == NULL) {
        free(least);
        free(now);
        PyErr_NoMemory();
        return NULL;
    }
    int any = f->folded > 0;
    if (any) {
        memcpy(least, f->least_growth, n * sizeof(int64_t));
    }
    for (int which = 0; which < 2; which++) {
        int64_t call = which == 0 ? f->deferred_call : (f->correct_last ? f->calls : 0);
        if (call == 0) {
            continue;
        }
        const int64_t *seen = which == 0 ? f->deferred_growth : f->last_growth;
        if ((which == 1 && f->last_exact) || a == NULL
            || !attrib_kept(a, t, call, f->first_line, f->n_slots, now)) {
            memcpy(now, seen, n * sizeof(int64_t));
        }
        for (size_t s = 0; s < n; s++) {
            if (!any || now[s] < least[s]) {
                least[s] = now[s];
            }
        }
        any = 1;
    }
    free(now);
    return least;
}

/* callfigures_bound_by_survivors on the least growth read back (*least:
 * pending_least's, made here from the folded figures when NULL).  0, or -1
 * with an exception set. */
static int
bound_least(const CallFigures *f, const LineTable *t, const Attrib *a, int64_t **least)
{
    if (!callfigures_survivors_known(f, a)) {
        return 0;
    }
    if (*least == NULL) {
        size_t n = (size_t)f->n_slots;
        *least = malloc(n * sizeof(int64_t));
        if (*least == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(*least, f->least_growth, n * sizeof(int64_t));
    }
    callfigures_bound_by_survivors(f, t, a, *least);
    return 0;
}

/* A line's least growth in one later call (`least`: pending_least's, or
 * NULL for the folded figures alone). */
static PyObject *
least_growth(const CallFigures *f, const int64_t *least, int line)
{
    if (f->calls < 3) {
        Py_RETURN_NONE;
    }
    int64_t value = 0;      /* a line outside the arrays never ran after the first call */
    if (f->growth_before != NULL && line >= f->first_line
        && line < f->first_line + f->n_slots) {
        int s = line - f->first_line;
        value = least != NULL ? least[s] : f->least_growth[s];
    }
    return PyLong_FromLongLong(value);
}

/* A level as Python reads it: None where it was not read (-1). */
static PyObject *
level_or_none(int64_t level)
{
    if (level < 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(level);
}

/* (first_start, (later_start per column...)); NULL with an exception set. */
static PyObject *
starts_tuple(const CallFigures *f, int first_kept)
{
    PyObject *later = PyTuple_New(f->n_tops);
    if (later == NULL) {
        return NULL;
    }
    for (int c = 0; c < f->n_tops; c++) {
        PyObject *v = level_or_none(f->later_start[c]);
        if (v == NULL) {
            Py_DECREF(later);
            return NULL;
        }
        PyTuple_SET_ITEM(later, c, v);
    }
    PyObject *first = level_or_none(first_kept ? f->first_start : -1);
    if (first == NULL) {
        Py_DECREF(later);
        return NULL;
    }
    return Py_BuildValue("(NN)", first, later);
}

PyObject *
callfigures_to_tuple(const LineTable *t, const Attrib *a)
{
    const CallFigures *f = t->calls;
    const LineTable *first = f != NULL ? f->first : NULL;
    PyObject *lines = NULL, *key = NULL, *row = NULL, *result = NULL;
    int64_t *last = NULL;      /* Owned. the last call's growth, not folded yet */
    int lo, hi;
    lines = PyDict_New();
    if (lines == NULL) {
        goto error;
    }
    if (f == NULL || f->calls == 0) {    /* no call ended yet */
        return Py_BuildValue("(LON(O()))", (long long)0, Py_False, lines, Py_None);
    }
    if ((f->correct_last || f->deferred_call != 0) && f->n_slots > 0) {
        last = pending_least(f, t, a);
        if (last == NULL) {
            goto error;
        }
    }
    if (bound_least(f, t, a, &last) < 0) {
        goto error;
    }
    span(t, first, &lo, &hi);
    for (int line = lo; line <= hi; line++) {
        int s = 0;
        if (!ran(first, line, &s) && !ran(t, line, &s)) {
            continue;
        }
        row = PyTuple_New(3);
        if (row == NULL) {
            goto error;
        }
        PyTuple_SET_ITEM(row, 0, figures_or_none(first, line));
        PyTuple_SET_ITEM(row, 1, figures_or_none(t, line));
        PyTuple_SET_ITEM(row, 2, least_growth(f, last, line));
        if (PyTuple_GET_ITEM(row, 0) == NULL || PyTuple_GET_ITEM(row, 1) == NULL
            || PyTuple_GET_ITEM(row, 2) == NULL) {
            goto error;
        }
        key = PyLong_FromLong(line);
        if (key == NULL || PyDict_SetItem(lines, key, row) < 0) {
            goto error;
        }
        Py_CLEAR(key);
        Py_CLEAR(row);
    }
    PyObject *starts = starts_tuple(f, first != NULL);
    if (starts == NULL) {
        goto error;
    }
    result = Py_BuildValue("(LONN)", (long long)f->calls, first != NULL ? Py_True : Py_False,
                           lines, starts);
    free(last);
    return result;
error:
    free(last);
    Py_XDECREF(key);
    Py_XDECREF(row);
    Py_XDECREF(lines);
    return NULL;
}
