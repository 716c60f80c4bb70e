/* pytorch_memlab._testsource: a memory source in C whose readings Python
 * sets, for the tracer's own tests and benchmark (the real sources live in the
 * torch shim).  A separate extension, built for checkouts (in place or
 * editable) and MEMLAB_TEST_SOURCE=1 only: the wheel does not ship it. */
#include "compat.h"
#include "memlab/source.h"

#include <errno.h>
#include <pthread.h>
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

static PyObject *manual_alloc(PyObject *module, PyObject *arg);

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

/* "deferred": the manual readings, with each block pushed the way the CUDA
 * source pushes it (cuda_push_source.cpp): at its event with no size, its
 * size at the next event or reading.  Lets CI test that protocol. */
static memlab_alloc_listener deferred_listener;
static int deferred_unsized = -1;   /* MEMLAB_ALLOC, MEMLAB_FREE, or -1 */
static uintptr_t deferred_ptr;
static int64_t deferred_size;

static void
deferred_settle(void)
{
    /* A block that moved no bytes gets no size, as in the CUDA source. */
    if (deferred_unsized >= 0 && deferred_listener != NULL && deferred_size != 0) {
        (void)deferred_listener("deferred", 0, deferred_ptr, deferred_size, MEMLAB_SIZED);
    }
    deferred_unsized = -1;
}

static int
deferred_sample(int device, int64_t *out)
{
    deferred_settle();
    return manual_sample(device, out);
}

static int
deferred_listen(int device, memlab_alloc_listener listener, int64_t *level)
{
    __atomic_store_n(&deferred_listener, listener, __ATOMIC_RELEASE);
    deferred_unsized = -1;
    *level = manual_state[0];
    return 0;
}

/* Devices 0 and 1, which read the same: a tracer can be moved between them
 * (Tracer.set_device) while other threads push. */
static int
deferred_prepare(int device, char *err, int err_len)
{
    if (device != 0 && device != 1) {
        snprintf(err, (size_t)err_len, "the deferred source has devices 0 and 1 only");
        return -1;
    }
    return 0;
}

static const memlab_source deferred_source = {
    MEMLAB_SOURCE_ABI_VERSION, "deferred", N_MANUAL, manual_fields,
    deferred_prepare, deferred_sample, manual_reset_peaks, NULL, NULL, NULL,
    deferred_listen,
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
    deferred_unsized = -1;
    Py_RETURN_NONE;
}

/* deferred_block(ptr, n): n > 0 allocates block ptr of n bytes, n < 0 frees
 * it, n == 0 allocates a block whose size comes as 0 (an allocator event
 * that moved no active bytes); the readings move as manual_alloc(n) moves
 * them. */
static PyObject *
deferred_block(PyObject *module, PyObject *args)
{
    unsigned long long ptr;
    long long n;
    if (!PyArg_ParseTuple(args, "KL:deferred_block", &ptr, &n)) {
        return NULL;
    }
    if (ptr == 0) {
        PyErr_SetString(PyExc_ValueError, "deferred_block: ptr must be non-zero");
        return NULL;
    }
    deferred_settle();
    int unsized = -1;
    if (deferred_listener != NULL) {
        if (n >= 0) {
            (void)deferred_listener("deferred", 0, (uintptr_t)ptr, 0, MEMLAB_ALLOC);
            unsized = MEMLAB_ALLOC;
        }
        else if (deferred_listener("deferred", 0, (uintptr_t)ptr, -1, MEMLAB_FREE) == 0) {
            unsized = MEMLAB_FREE;
        }
    }
    PyObject *moved = PyLong_FromLongLong(n);
    if (moved == NULL) {
        return NULL;
    }
    PyObject *rc = manual_alloc(module, moved);
    Py_DECREF(moved);
    deferred_unsized = unsized;
    deferred_ptr = (uintptr_t)ptr;
    deferred_size = n > 0 ? n : -n;
    return rc;
}

/* deferred_churn(ptr, size, n): n times, block ptr of `size` bytes made and
 * freed on device 0, sizes known, pushed with the GIL released (as torch
 * pushes from TorchScript or autograd's threads).  The readings stay. */
static PyObject *
deferred_churn(PyObject *module, PyObject *args)
{
    unsigned long long ptr;
    long long size, n;
    if (!PyArg_ParseTuple(args, "KLL:deferred_churn", &ptr, &size, &n)) {
        return NULL;
    }
    if (ptr == 0 || size <= 0) {
        PyErr_SetString(PyExc_ValueError, "deferred_churn: ptr and size must be positive");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (long long i = 0; i < n; i++) {
        memlab_alloc_listener fn = __atomic_load_n(&deferred_listener, __ATOMIC_ACQUIRE);
        if (fn != NULL) {
            (void)fn("deferred", 0, (uintptr_t)ptr, size, MEMLAB_ALLOC);
            (void)fn("deferred", 0, (uintptr_t)ptr, size, MEMLAB_FREE);
        }
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

struct native_push {
    uintptr_t ptr;
    int64_t size;
};

static void *
native_push_run(void *arg)
{
    const struct native_push *push = arg;
    memlab_alloc_listener fn = __atomic_load_n(&deferred_listener, __ATOMIC_ACQUIRE);
    if (fn != NULL) {
        (void)fn("deferred", 0, push->ptr, push->size, MEMLAB_ALLOC);
    }
    return NULL;
}

/* deferred_native_block(ptr, size): block ptr of `size` bytes made, sized,
 * on a thread Python never ran on (as autograd's device threads push during
 * backward()); it stays alive.  The readings stay. */
static PyObject *
deferred_native_block(PyObject *module, PyObject *args)
{
    struct native_push push;
    unsigned long long ptr;
    long long size;
    if (!PyArg_ParseTuple(args, "KL:deferred_native_block", &ptr, &size)) {
        return NULL;
    }
    if (ptr == 0 || size <= 0) {
        PyErr_SetString(PyExc_ValueError,
                        "deferred_native_block: ptr and size must be positive");
        return NULL;
    }
    push.ptr = (uintptr_t)ptr;
    push.size = size;
    pthread_t thread;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pthread_create(&thread, NULL, native_push_run, &push);
    if (rc == 0) {
        rc = pthread_join(thread, NULL);
    }
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *
deferred_listening(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(deferred_listener != NULL);
}

static PyMethodDef manual_methods[] = {
    {"manual_alloc", manual_alloc, METH_O,
     "Manual source: n > 0 allocates n bytes, n < 0 frees -n."},
    {"manual_reset", manual_reset, METH_NOARGS, "Manual source: all readings to 0."},
    {"deferred_block", deferred_block, METH_VARARGS,
     "Deferred source: block ptr of n > 0 bytes made, or n < 0 freed; sized later."},
    {"deferred_churn", deferred_churn, METH_VARARGS,
     "Deferred source: n blocks made and freed, sized, pushed without the GIL."},
    {"deferred_native_block", deferred_native_block, METH_VARARGS,
     "Deferred source: a block made, sized, on a thread without Python."},
    {"deferred_listening", deferred_listening, METH_NOARGS,
     "Deferred source: whether a listener is set."},
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
    if (rc < 0) {
        return -1;
    }
    capsule = PyCapsule_New((void *)&deferred_source, MEMLAB_SOURCE_CAPSULE, NULL);
    if (capsule == NULL) {
        return -1;
    }
    rc = PyModule_AddObjectRef(module, "deferred_source", capsule);
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
