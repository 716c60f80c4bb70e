/* ProfiledCall(func, enter, leave): calling it runs enter(), then func with
 * the arguments given, then leave(exc) with the exception that escaped func
 * (None if none), and returns func's result or raises its exception.
 *
 * A C callable, so that a profiled function costs no Python frame of ours
 * per call: recursion reaches the depth it reaches unprofiled, and no frame
 * of ours joins a traceback.  enter and leave are Python callables that
 * return before func runs or after it returned.  The instance has a
 * __dict__ (functools.wraps fills it; __code__ may be set there), binds as
 * a method like a function does, takes weak references and pickles by its
 * qualified name. */
#include "profiledcall.h"

typedef struct {
    PyObject_HEAD
    PyObject *func;   /* Owned. */
    PyObject *enter;  /* Owned. */
    PyObject *leave;  /* Owned. */
    PyObject *dict;   /* Owned; the instance's __dict__. */
    PyObject *weakrefs;
    vectorcallfunc vectorcall;
} ProfiledCallObject;

/* The exception in flight, normalized, its traceback attached; clears it. */
static PyObject *
take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) {
        PyException_SetTraceback(value, tb);
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

static void
raise_exception(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyObject *tb = PyException_GetTraceback(exc);
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, tb);
#endif
}

static PyObject *
ProfiledCall_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    ProfiledCallObject *self = (ProfiledCallObject *)op;
    PyObject *entered = PyObject_CallNoArgs(self->enter);
    if (entered == NULL) {
        return NULL;
    }
    Py_DECREF(entered);
    /* No Py_EnterRecursiveCall of its own: entering func's frame checks the
     * depth (and, from 3.12, the C stack) already, and a second count per
     * level would halve the depth reachable. */
    PyObject *result = PyObject_Vectorcall(self->func, args, nargsf, kwnames);
    if (result != NULL) {
        PyObject *left = PyObject_CallOneArg(self->leave, Py_None);
        if (left == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(left);
        return result;
    }
    PyObject *exc = take_exception();
    if (exc == NULL) {   /* NULL without an exception: let Python say so */
        PyErr_SetString(PyExc_SystemError, "a profiled function failed without an exception");
        exc = take_exception();
    }
    PyObject *left = PyObject_CallOneArg(self->leave, exc);
    if (left == NULL) {
        /* as a `with` block's __exit__ raising: the new error, in the
         * context of the one func raised */
        PyObject *raised = take_exception();
        PyException_SetContext(raised, exc);   /* steals exc */
        raise_exception(raised);
        return NULL;
    }
    Py_DECREF(left);
    raise_exception(exc);
    return NULL;
}

static PyObject *
ProfiledCall_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *func, *enter, *leave;
    static char *names[] = {"func", "enter", "leave", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:ProfiledCall", names, &func, &enter,
                                     &leave)) {
        return NULL;
    }
    if (!PyCallable_Check(func) || !PyCallable_Check(enter) || !PyCallable_Check(leave)) {
        PyErr_SetString(PyExc_TypeError,
                        "ProfiledCall(func, enter, leave): all three must be callable");
        return NULL;
    }
    ProfiledCallObject *self = (ProfiledCallObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->func = Py_NewRef(func);
    self->enter = Py_NewRef(enter);
    self->leave = Py_NewRef(leave);
    self->dict = NULL;
    self->weakrefs = NULL;
    self->vectorcall = ProfiledCall_vectorcall;
    return (PyObject *)self;
}

static int
ProfiledCall_traverse(PyObject *op, visitproc visit, void *arg)
{
    ProfiledCallObject *self = (ProfiledCallObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->func);
    Py_VISIT(self->enter);
    Py_VISIT(self->leave);
    Py_VISIT(self->dict);
    return 0;
}

static int
ProfiledCall_clear(PyObject *op)
{
    ProfiledCallObject *self = (ProfiledCallObject *)op;
    Py_CLEAR(self->func);
    Py_CLEAR(self->enter);
    Py_CLEAR(self->leave);
    Py_CLEAR(self->dict);
    return 0;
}

static void
ProfiledCall_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((ProfiledCallObject *)op)->weakrefs != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    ProfiledCall_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

/* Bound to an instance, as a function is: a method of it. */
static PyObject *
ProfiledCall_get(PyObject *op, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(op);
    }
    return PyMethod_New(op, obj);
}

/* Pickled as a reference to the module attribute of its name, as a function is. */
static PyObject *
ProfiledCall_reduce(PyObject *op, PyObject *unused)
{
    return PyObject_GetAttrString(op, "__qualname__");
}

static PyObject *
ProfiledCall_repr(PyObject *op)
{
    ProfiledCallObject *self = (ProfiledCallObject *)op;
    return PyUnicode_FromFormat("<profiled %R>", self->func);
}

static PyMethodDef ProfiledCall_methods[] = {
    {"__reduce__", ProfiledCall_reduce, METH_NOARGS, "Pickled by its qualified name."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef ProfiledCall_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(ProfiledCallObject, vectorcall), READONLY},
    {"__dictoffset__", T_PYSSIZET, offsetof(ProfiledCallObject, dict), READONLY},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ProfiledCallObject, weakrefs), READONLY},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef ProfiledCall_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot ProfiledCall_slots[] = {
    {Py_tp_doc, "ProfiledCall(func, enter, leave): func, with enter() before each call "
                "and leave(exception or None) after it."},
    {Py_tp_new, ProfiledCall_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, ProfiledCall_get},
    {Py_tp_repr, ProfiledCall_repr},
    {Py_tp_traverse, ProfiledCall_traverse},
    {Py_tp_clear, ProfiledCall_clear},
    {Py_tp_dealloc, ProfiledCall_dealloc},
    {Py_tp_methods, ProfiledCall_methods},
    {Py_tp_members, ProfiledCall_members},
    {Py_tp_getset, ProfiledCall_getset},
    {0, NULL},
};

static PyType_Spec ProfiledCall_spec = {
    .name = "pytorch_memlab._tracer.ProfiledCall",
    .basicsize = sizeof(ProfiledCallObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
             | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = ProfiledCall_slots,
};

int
profiledcall_type_init(PyObject *module)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &ProfiledCall_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, "ProfiledCall", type);
    Py_DECREF(type);
    return rc;
}
