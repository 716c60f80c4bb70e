/* The kinds of the followed blocks, from Python (kinds.h): tag blocks, and
 * read each function's peak with the tagged bytes of each of its places. */
#include "kinds.h"
#include "tracer.h"
#include "tracer_methods.h"

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

/* {module: bytes} of a peak's non-zero modules; NULL with an exception. */
static PyObject *
peak_modules(const AttribPeak *p)
{
    PyObject *modules = PyDict_New();
    for (int m = 1; modules != NULL && m < p->n_mods; m++) {
        if (p->mheld[m] == 0) {
            continue;
        }
        PyObject *k = PyLong_FromLong(m);
        PyObject *v = PyLong_FromLongLong(p->mheld[m]);
        if (k == NULL || v == NULL || PyDict_SetItem(modules, k, v) < 0) {
            Py_CLEAR(modules);
        }
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return modules;
}

/* {module: tagged kinds} of a peak's modules holding tagged bytes; NULL
 * with an exception. */
static PyObject *
peak_module_kinds(const AttribPeak *p)
{
    PyObject *modules = PyDict_New();
    for (int m = 1; modules != NULL && m < p->n_mods; m++) {
        const int64_t *k = p->mkheld + (size_t)m * ATTRIB_TAGGED;
        int tagged = 0;
        for (int i = 0; i < ATTRIB_TAGGED; i++) {
            tagged |= k[i] != 0;
        }
        if (!tagged) {
            continue;
        }
        PyObject *key = PyLong_FromLong(m);
        PyObject *v = kinds_tuple(k);
        if (key == NULL || v == NULL || PyDict_SetItem(modules, key, v) < 0) {
            Py_CLEAR(modules);
        }
        Py_XDECREF(key);
        Py_XDECREF(v);
    }
    return modules;
}

/* (bytes, lineno, call, before, other, {lineno: held}, before's tagged kinds,
 * other's, {lineno: tagged kinds}, {module: bytes}, {module: tagged kinds});
 * NULL with an exception. */
static PyObject *
peak_row(const AttribPeak *p)
{
    PyObject *row = NULL;
    PyObject *held = PyDict_New();
    PyObject *kinds = PyDict_New();
    PyObject *before = kinds_tuple(p->kbefore);
    PyObject *other = kinds_tuple(p->kother);
    PyObject *modules = peak_modules(p);
    PyObject *mkinds = modules ? peak_module_kinds(p) : NULL;
    if (held && kinds && before && other && mkinds && peak_lines(p, held, kinds) == 0) {
        row = Py_BuildValue("(LiLLLOOOOOO)", (long long)p->bytes, p->line,
                            (long long)p->call, (long long)p->before, (long long)p->other,
                            held, before, other, kinds, modules, mkinds);
    }
    Py_XDECREF(held);
    Py_XDECREF(kinds);
    Py_XDECREF(before);
    Py_XDECREF(other);
    Py_XDECREF(modules);
    Py_XDECREF(mkinds);
    return row;
}

PyObject *
memlab_set_module(PyObject *module, PyObject *arg)
{
    long m = PyLong_AsLong(arg);
    if (m == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (m < 0 || m > INT32_MAX) {
        return PyErr_Format(PyExc_ValueError, "set_module(%ld): expected a module number "
                            "from 0 (none) to %d", m, INT32_MAX);
    }
    attrib_set_module((int)m);
    Py_RETURN_NONE;
}

PyObject *
memlab_peaks_by_kind(PyObject *module, PyObject *obj)
{
    TracerObject *t = as_tracer(module, obj, "peaks_by_kind");
    if (t == NULL) {
        return NULL;
    }
    PyObject *peaks = tracer_peak_rows(t, peak_row);
    if (peaks == NULL) {
        return NULL;
    }
    const char *why = attrib_kinds_missing(&t->attrib);
    const char *mods = attrib_modules_missing(&t->attrib);
    return Py_BuildValue("(NNN)", peaks, why ? PyUnicode_FromString(why) : Py_NewRef(Py_None),
                         mods ? PyUnicode_FromString(mods) : Py_NewRef(Py_None));
}

PyObject *
memlab_live_kinds(PyObject *module, PyObject *args)
{
    PyObject *obj, *code, *ret = NULL, *places = NULL, *mods = NULL;
    if (!PyArg_ParseTuple(args, "OO:live_kinds", &obj, &code)) {
        return NULL;
    }
    TracerObject *t = as_tracer(module, obj, "live_kinds");
    if (t == NULL) {
        return NULL;
    }
    LineTable *table = PyCode_Check(code) ? codemap_get(&t->codes, code) : NULL;
    if (table == NULL) {
        return PyErr_Format(PyExc_ValueError, "live_kinds(): %R is not a code object "
                            "registered with this tracer", code);
    }
    AttribLiveKinds live;
    if (attrib_live_kinds(&t->attrib, table, &live) < 0) {
        return PyErr_NoMemory();
    }
    if (!live.known || t->attrib_moved) {
        free(live.mods);
        Py_RETURN_NONE;
    }
    places = PyTuple_New(ATTRIB_LIVE_PLACES);
    for (int i = 0; places != NULL && i < ATTRIB_LIVE_PLACES; i++) {
        PyObject *k = kinds_tuple(live.kinds[i]);
        if (k == NULL) {
            Py_CLEAR(places);
            break;
        }
        PyTuple_SET_ITEM(places, i, k);
    }
    AttribPeak modules_only = {.mheld = live.mods, .n_mods = live.n_mods};
    mods = places ? peak_modules(&modules_only) : NULL;
    if (mods != NULL) {
        ret = PyTuple_Pack(2, places, mods);
    }
    Py_XDECREF(places);
    Py_XDECREF(mods);
    free(live.mods);
    return ret;
}
