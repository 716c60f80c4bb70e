/* pytorch_memlab._testsource: a memory source in C whose readings Python
 * sets, for the tracer's own tests and benchmark (the real sources live in the
 * torch shim).  A separate extension, built for checkouts (in place or
 * editable) and MEMLAB_TEST_SOURCE=1 only: the wheel does not ship it. */
#include "compat.h"
#include "memlab/source.h"

#include <string.h>

static const memlab_field manual_fields[] = {
    {"bytes.current", MEMLAB_LEVEL, MEMLAB_BYTES},
    {"bytes.peak", MEMLAB_PEAK, MEMLAB_BYTES},
    {"bytes.allocated", MEMLAB_COUNTER, MEMLAB_BYTES},
    {"bytes.freed", MEMLAB_COUNTER, MEMLAB_BYTES},
};
#define N_MANUAL 4

/* current, peak, allocated, freed: one device only. */
static int64_t manual_state[N_MANUAL];

static int
manual_prepare(int device, char *err, int err_len)
{
    if (device != 0) {
        snprintf(err, (size_t)err_len, "the manual source has only device 0");
        return -1;
    }
    return 0;
}

static int
manual_sample(int device, int64_t *out)
{
    memcpy(out, manual_state, sizeof(manual_state));
    return 0;
}

static int
manual_reset_peaks(int device)
{
    manual_state[1] = manual_state[0];
    return 0;
}

static const memlab_source manual_source = {
    MEMLAB_SOURCE_ABI_VERSION, "manual", N_MANUAL, manual_fields,
    manual_prepare, manual_sample, manual_reset_peaks,
};

/* manual_alloc(n): n > 0 allocates n bytes, n < 0 frees -n bytes. */
static PyObject *
manual_alloc(PyObject *module, PyObject *arg)
{
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    manual_state[0] += n;
    if (n > 0) {
        manual_state[2] += n;
    }
    else {
        manual_state[3] -= n;
    }
    if (manual_state[0] > manual_state[1]) {
        manual_state[1] = manual_state[0];
    }
    Py_RETURN_NONE;
}

static PyObject *
manual_reset(PyObject *module, PyObject *unused)
{
    memset(manual_state, 0, sizeof(manual_state));
    Py_RETURN_NONE;
}

static PyMethodDef manual_methods[] = {
    {"manual_alloc", manual_alloc, METH_O,
     "Manual source: n > 0 allocates n bytes, n < 0 frees -n."},
    {"manual_reset", manual_reset, METH_NOARGS, "Manual source: all readings to 0."},
    {NULL, NULL, 0, NULL},
};

static int
testsource_exec(PyObject *module)
{
    PyObject *capsule = PyCapsule_New((void *)&manual_source, MEMLAB_SOURCE_CAPSULE, NULL);
    if (capsule == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, "manual_source", capsule);
    Py_DECREF(capsule);
    return rc;
}

static PyModuleDef_Slot testsource_slots[] = {
    {Py_mod_exec, testsource_exec},
    {0, NULL},
};

static struct PyModuleDef testsource_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pytorch_memlab._testsource",
    .m_doc = "A memory source whose readings Python sets (tests and benchmarks only).",
    .m_size = 0,
    .m_methods = manual_methods,
    .m_slots = testsource_slots,
};

PyMODINIT_FUNC
PyInit__testsource(void)
{
    return PyModuleDef_Init(&testsource_module);
}
