/* instances_of(cls): what `[o for o in gc.get_objects() if issubclass(type(o),
 * cls)]` finds, without a Python call per object.  A program holds hundreds
 * of thousands of objects and a few hundred tensors: the test per object is
 * what costs.  From 3.12 the collector's lists are walked in place
 * (PyUnstable_GC_VisitObjects); before, gc.get_objects() lists them first. */
#include "instances.h"

/* The objects found so far. */
typedef struct {
    PyTypeObject *cls;  /* Borrowed. */
    PyObject **found;   /* Owned (PyMem), and a reference to each object in it. */
    Py_ssize_t len, cap;
    int failed;         /* out of memory: the walk stops */
} Found;

/* Keeps op; 0 when out of memory.  Allocates raw memory only, never an
 * object, and runs no Python code: what a walk of the collector's lists allows. */
static int
found_add(Found *f, PyObject *op)
{
    if (!PyObject_TypeCheck(op, f->cls)) {
        return 1;
    }
    if (f->len == f->cap) {
        Py_ssize_t cap = f->cap ? f->cap * 2 : 64;
        PyObject **grown = PyMem_Realloc(f->found, (size_t)cap * sizeof(PyObject *));
        if (grown == NULL) {
            f->failed = 1;
            return 0;
        }
        f->found = grown;
        f->cap = cap;
    }
    f->found[f->len++] = Py_NewRef(op);
    return 1;
}

#if PY_VERSION_HEX >= 0x030C0000
static int
visit(PyObject *op, void *arg)
{
    return found_add((Found *)arg, op);
}

static int
collect(Found *f)
{
    PyUnstable_GC_VisitObjects(visit, f);
    return 0;
}
#else
static int
collect(Found *f)
{
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *all = gc ? PyObject_CallMethod(gc, "get_objects", NULL) : NULL;
    Py_XDECREF(gc);
    if (all == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        if (!found_add(f, PyList_GET_ITEM(all, i))) {
            break;
        }
    }
    Py_DECREF(all);
    return 0;
}
#endif

PyObject *
memlab_instances_of(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_Format(PyExc_TypeError, "instances_of(cls): cls must be a type, not %.100s",
                     Py_TYPE(cls)->tp_name);
        return NULL;
    }
    Found f = {(PyTypeObject *)cls, NULL, 0, 0, 0};
    PyObject *out = NULL;
    if (collect(&f) == 0) {
        if (f.failed) {
            PyErr_NoMemory();
        }
        else {
            out = PyList_New(f.len);
        }
    }
    if (out == NULL) {
        for (Py_ssize_t i = 0; i < f.len; i++) {
            Py_DECREF(f.found[i]);
        }
    }
    else {
        for (Py_ssize_t i = 0; i < f.len; i++) {
            PyList_SET_ITEM(out, i, f.found[i]);   /* steals the reference */
        }
    }
    PyMem_Free(f.found);
    return out;
}
