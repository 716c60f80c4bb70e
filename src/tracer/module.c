/* pytorch_memlab._tracer: module init only. */
#include "tracer.h"
#include "instances.h"
#include "module_state.h"
#include "kinds.h"
#include "profiledcall.h"

static PyObject *
source_info(PyObject *module, PyObject *source)
{
    return sampler_source_info(source);
}

static PyObject *
field_table(PyObject *module, PyObject *source)
{
    return sampler_field_table(source);
}

/* allocated_at(source, device, ptr): see _tracer.pyi. */
static PyObject *
allocated_at(PyObject *module, PyObject *args)
{
    PyObject *ret = NULL, *code = NULL, *address;
    const char *source;
    int device, line = 0;
    if (!PyArg_ParseTuple(args, "siO!:allocated_at", &source, &device, &PyLong_Type,
                          &address)) {
        goto error;
    }
    unsigned long long ptr = PyLong_AsUnsignedLongLong(address);
    if ((ptr == (unsigned long long)-1 && PyErr_Occurred()) || ptr > UINTPTR_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "allocated_at(ptr=...) takes an address from 0 to "
                     "%llu, not %R", (unsigned long long)UINTPTR_MAX, address);
        goto error;
    }
    code = attrib_made_at(source, device, (uintptr_t)ptr, &line);
    ret = code != NULL ? Py_BuildValue("(Oi)", code, line) : Py_NewRef(Py_None);
error:
    Py_XDECREF(code);
    return ret;
}

/* atexit: disable every tracer so no hook or tool id outlives us.  Each
 * tracer enabled now is asked once, from a snapshot: a disable() that does
 * not unlink its tracer (one being enabled on another thread refuses), or a
 * source that enables tracers again, cannot keep this loop going. */
static PyObject *
shutdown(PyObject *module, PyObject *unused)
{
    PyObject *tracers = PyList_New(0);
    if (tracers == NULL) {
        return NULL;
    }
    for (TracerObject *t = memlab_enabled_tracers; t != NULL; t = t->next_enabled) {
        if (PyList_Append(tracers, (PyObject *)t) < 0) {
            Py_DECREF(tracers);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tracers); i++) {
        PyObject *t = PyList_GET_ITEM(tracers, i);
        PyObject *r = PyObject_CallMethod(t, "disable", NULL);
        if (r == NULL) {
            PyErr_WriteUnraisable(t);
        }
        Py_XDECREF(r);
    }
    Py_DECREF(tracers);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"source_info", source_info, METH_O, "(name, fields) of a memory source."},
    {"field_table", field_table, METH_O,
     "((name, kind, unit), ...) of a memory source's fields: kind 'level', 'peak' or "
     "'counter', unit 'count' or 'bytes'."},
    {"install_thread_hook", memlab_install_thread_hook, METH_NOARGS,
     "settrace mechanism: hook the calling thread if a tracer is enabled."},
    {"allocated_at", allocated_at, METH_VARARGS,
     "allocated_at(source, device, ptr): (code, lineno) of the profiled line that made "
     "the live block at ptr, or None."},
    {"instances_of", memlab_instances_of, METH_O,
     "instances_of(cls): the objects the garbage collector tracks whose type is cls or a "
     "subclass of it."},
    {"tag_blocks", memlab_tag_blocks, METH_VARARGS,
     "tag_blocks(tracer, kind, ptrs, sizes, only_from=-1, back=True): tag the live "
     "blocks at ptrs as kind (0..TAGGED_KINDS); how many changed kind."},
    {"peaks_by_kind", memlab_peaks_by_kind, METH_O,
     "peaks_by_kind(tracer): ([(code, peak with tagged kinds or None)], why the kinds are "
     "not exact or None)."},
    {"live_kinds", memlab_live_kinds, METH_VARARGS,
     "live_kinds(tracer, code): the tagged kinds and modules of what is alive now around "
     "code's latest call, or None."},
    {"set_module", memlab_set_module, METH_O,
     "set_module(n): the calling thread runs module n (0: none) from now on."},
    {"_shutdown", shutdown, METH_NOARGS, "Disable every tracer (atexit)."},
    {NULL, NULL, 0, NULL},
};

static int
register_atexit(PyObject *module)
{
    PyObject *atexit = PyImport_ImportModule("atexit");
    PyObject *func = atexit ? PyObject_GetAttrString(module, "_shutdown") : NULL;
    PyObject *r = func ? PyObject_CallMethod(atexit, "register", "O", func) : NULL;
    Py_XDECREF(atexit);
    Py_XDECREF(func);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static int
tracer_exec(PyObject *module)
{
    if (tracer_type_init(module) < 0 || hooks_init(module) < 0
        || profiledcall_type_init(module) < 0
        || PyModule_AddIntConstant(module, "TAGGED_KINDS", ATTRIB_TAGGED) < 0) {
        return -1;
    }
    return register_atexit(module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, tracer_exec},
#ifdef Py_mod_multiple_interpreters
    /* Not supported: the tracer's state is process-wide (the enabled tracers,
     * the sys.monitoring tool id and instrumented codes, the settrace hook),
     * while hooks and tool ids belong to one interpreter.  A second exec in
     * the same interpreter reuses that state (monitoring_init). */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    TracerModuleState *state = memlab_module_state(module);
    Py_VISIT(state->callback_type);
    return 0;
}

static int
module_clear(PyObject *module)
{
    TracerModuleState *state = memlab_module_state(module);
    Py_CLEAR(state->callback_type);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

struct PyModuleDef memlab_tracer_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pytorch_memlab._tracer",
    .m_doc = "Per-line memory tracer (C core; knows nothing about torch).",
    .m_size = sizeof(TracerModuleState),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__tracer(void)
{
    return PyModuleDef_Init(&memlab_tracer_module);
}
