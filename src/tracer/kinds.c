/* The kinds of the followed blocks, from Python (kinds.h): tag blocks, and
 * read each function's peak with the tagged bytes of each of its places. */
#include "kinds.h"
#include "tracer.h"

#include <stdlib.h>

/* `obj` as an initialised Tracer of `module`, or NULL with an exception. */
static TracerObject *
as_tracer(PyObject *module, PyObject *obj, const char *fn)
{
    PyObject *type = PyObject_GetAttrString(module, "Tracer");
    if (type == NULL) {
        return NULL;
    }
    int ok = PyType_Check(type) && PyObject_TypeCheck(obj, (PyTypeObject *)type);
    Py_DECREF(type);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s() takes a Tracer, not %.100s", fn,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    TracerObject *t = (TracerObject *)obj;
    if (t->interval == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Tracer.__init__ was not called");
        return NULL;
    }
    return t;
}

/* Item i of a fast sequence as an address or a size; -1 with an exception. */
static int
read_int(PyObject *seq, Py_ssize_t i, int as_ptr, uintptr_t *ptr, int64_t *size)
{
    PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "tag_blocks(): %s[%zd] is %.100s; expected an int",
                     as_ptr ? "ptrs" : "sizes", i, Py_TYPE(v)->tp_name);
        return -1;
    }
    if (as_ptr) {
        unsigned long long x = PyLong_AsUnsignedLongLong(v);
        if ((x == (unsigned long long)-1 && PyErr_Occurred()) || x > UINTPTR_MAX) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "tag_blocks(): ptrs[%zd] is %R; expected an "
                         "address from 0 to %llu", i, v, (unsigned long long)UINTPTR_MAX);
            return -1;
        }
        *ptr = (uintptr_t)x;
        return 0;
    }
    long long x = PyLong_AsLongLong(v);
    if ((x == -1 && PyErr_Occurred()) || x < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "tag_blocks(): sizes[%zd] is %R; expected bytes >= 0",
                     i, v);
        return -1;
    }
    *size = (int64_t)x;
    return 0;
}

PyObject *
memlab_tag_blocks(PyObject *module, PyObject *args)
{
    PyObject *obj, *ptrs_in, *sizes_in, *ptrs = NULL, *sizes = NULL, *ret = NULL;
    int kind, only_from = -1, back = 1;
    uintptr_t *p = NULL;
    int64_t *s = NULL;
    if (!PyArg_ParseTuple(args, "OiOO|ip:tag_blocks", &obj, &kind, &ptrs_in, &sizes_in,
                          &only_from, &back)) {
        return NULL;
    }
    TracerObject *t = as_tracer(module, obj, "tag_blocks");
    if (t == NULL) {
        return NULL;
    }
    if (kind < ATTRIB_UNTAGGED || kind >= ATTRIB_N_KINDS || only_from >= ATTRIB_N_KINDS) {
        return PyErr_Format(PyExc_ValueError, "tag_blocks(kind=%d, only_from=%d): expected "
                            "kinds 0 (untagged) to %d, only_from -1 (any) too", kind,
                            only_from, ATTRIB_N_KINDS - 1);
    }
    ptrs = PySequence_Fast(ptrs_in, "tag_blocks(): ptrs must be a sequence of ints");
    sizes = ptrs ? PySequence_Fast(sizes_in, "tag_blocks(): sizes must be a sequence of ints")
                 : NULL;
    if (sizes == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ptrs);
    if (PySequence_Fast_GET_SIZE(sizes) != n) {
        PyErr_Format(PyExc_ValueError, "tag_blocks(): %zd ptrs but %zd sizes", n,
                     PySequence_Fast_GET_SIZE(sizes));
        goto done;
    }
    p = malloc(sizeof(uintptr_t) * (size_t)(n + 1));
    s = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (p == NULL || s == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (read_int(ptrs, i, 1, &p[i], NULL) < 0 || read_int(sizes, i, 0, NULL, &s[i]) < 0) {
            goto done;
        }
    }
    /* A tracer whose peaks mix devices keeps no breakdown to tag. */
    Py_ssize_t tagged = t->attrib_moved ? 0 : attrib_tag(&t->attrib, kind, only_from, back, p, s, n);
    ret = PyLong_FromSsize_t(tagged);
done:
    free(p);
    free(s);
    Py_XDECREF(ptrs);
    Py_XDECREF(sizes);
    return ret;
}

static PyObject *
kinds_tuple(const int64_t *k)
{
    PyObject *tuple = PyTuple_New(ATTRIB_TAGGED);
    for (int i = 0; tuple != NULL && i < ATTRIB_TAGGED; i++) {
        PyObject *v = PyLong_FromLongLong(k[i]);
        if (v == NULL) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SET_ITEM(tuple, i, v);
    }
    return tuple;
}

/* {lineno: held} and {lineno: tagged kinds} of a peak's non-zero lines. */
static int
peak_lines(const AttribPeak *p, PyObject *held, PyObject *kinds)
{
    for (int s = 0; s < p->n_slots; s++) {
        const int64_t *k = p->klive + (size_t)s * ATTRIB_TAGGED;
        int tagged = 0;
        for (int i = 0; i < ATTRIB_TAGGED; i++) {
            tagged |= k[i] != 0;
        }
        if (p->held[s] == 0 && !tagged) {
            continue;
        }
        PyObject *line = PyLong_FromLong(p->first_line + s);
        PyObject *bytes = PyLong_FromLongLong(p->held[s]);
        PyObject *by_kind = tagged ? kinds_tuple(k) : NULL;
        int rc = line && bytes && (!tagged || by_kind) ? 0 : -1;
        if (rc == 0 && p->held[s] != 0) {
            rc = PyDict_SetItem(held, line, bytes);
        }
        if (rc == 0 && tagged) {
            rc = PyDict_SetItem(kinds, line, by_kind);
        }
        Py_XDECREF(line);
        Py_XDECREF(bytes);
        Py_XDECREF(by_kind);
        if (rc < 0) {
            return -1;
        }
    }
    return 0;
}

/* (bytes, lineno, call, before, other, {lineno: held}, before's tagged kinds,
 * other's, {lineno: tagged kinds}); NULL with an exception. */
static PyObject *
peak_row(const AttribPeak *p)
{
    PyObject *row = NULL;
    PyObject *held = PyDict_New();
    PyObject *kinds = PyDict_New();
    PyObject *before = kinds_tuple(p->kbefore);
    PyObject *other = kinds_tuple(p->kother);
    if (held && kinds && before && other && peak_lines(p, held, kinds) == 0) {
        row = Py_BuildValue("(LiLLLOOOO)", (long long)p->bytes, p->line, (long long)p->call,
                            (long long)p->before, (long long)p->other, held, before, other,
                            kinds);
    }
    Py_XDECREF(held);
    Py_XDECREF(kinds);
    Py_XDECREF(before);
    Py_XDECREF(other);
    return row;
}

PyObject *
memlab_peaks_by_kind(PyObject *module, PyObject *obj)
{
    TracerObject *t = as_tracer(module, obj, "peaks_by_kind");
    if (t == NULL) {
        return NULL;
    }
    PyObject *peaks = PyList_New(0);
    for (int i = 0; peaks != NULL && i < t->codes.n_tables; i++) {
        LineTable *table = t->codes.tables[i];
        AttribPeak *p = attrib_peak_copy(table);
        PyObject *peak = p != NULL ? peak_row(p) : Py_NewRef(Py_None);
        free(p);
        PyObject *row = peak ? PyTuple_Pack(2, table->code, peak) : NULL;
        if (row == NULL || PyList_Append(peaks, row) < 0) {
            Py_CLEAR(peaks);
        }
        Py_XDECREF(row);
        Py_XDECREF(peak);
    }
    if (peaks == NULL) {
        return NULL;
    }
    const char *why = attrib_kinds_missing(&t->attrib);
    PyObject *ret = why ? Py_BuildValue("(Ns)", peaks, why) : Py_BuildValue("(NO)", peaks, Py_None);
    return ret;
}
