// Module init only: exports the sources as capsules for the tracer, plus a
// few control-path helpers (prepare / sample / reset_peaks / fields by kind)
// for Python and the tests.  Import torch before this module: libc10 must be
// loaded and its allocators registered.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "shim.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

// The torch this shim was compiled against (setup.py defines both); the
// loader (pytorch_memlab/sources/native.py) refuses the shim under any other torch,
// whose allocator layout may differ.
#ifndef MEMLAB_TORCH_VERSION
#define MEMLAB_TORCH_VERSION "unknown"
#endif
#ifndef MEMLAB_TORCH_CXX11_ABI
#define MEMLAB_TORCH_CXX11_ABI -1
#endif

namespace memlab {

void copy_error(char *err, int err_len, const char *msg) noexcept {
    if (err == nullptr || err_len <= 0)
        return;
    std::snprintf(err, static_cast<std::size_t>(err_len), "%s",
                  msg != nullptr ? msg : "unknown error");
}

}  // namespace memlab

namespace {

const char *cuda_too_old() noexcept {
    return "this torch is too old for the shim's CUDA source "
           "(needs c10::DeviceAllocator, torch >= 2.9)";
}

// The sources by kind: where each comes from, and why it may be missing
// (prefixed by `missing`).
struct Kind {
    const char *name;
    const memlab_source *(*get)();
    const char *missing;
    const char *(*why)() noexcept;
};

const Kind kKinds[] = {
    {"cuda", memlab::cuda_source, "", cuda_too_old},
    {"cuda_push", memlab::cuda_push_source, "no CUDA push source: ",
     memlab::cuda_push_unavailable},
    {"cuda_push_counted", memlab::cuda_push_counted_source, "no CUDA push source: ",
     memlab::cuda_push_unavailable},
    {"cpu", memlab::cpu_source, "", nullptr},
};

// "cuda" / "cpu" -> its source; ValueError (and nullptr) for anything else,
// RuntimeError if this torch build has no such source.
const memlab_source *source_by_kind(const char *kind) {
    for (const Kind &row : kKinds) {
        if (std::strcmp(kind, row.name) != 0)
            continue;
        const memlab_source *source = row.get();
        if (source == nullptr)
            PyErr_Format(PyExc_RuntimeError, "%s%s", row.missing,
                         row.why != nullptr ? row.why() : "not built");
        return source;
    }
    PyErr_Format(PyExc_ValueError,
                 "unknown source kind '%s' (expected 'cuda', 'cuda_push', "
                 "'cuda_push_counted' or 'cpu')", kind);
    return nullptr;
}

const memlab_source *parse_kind_device(PyObject *args, int *device) {
    const char *kind = nullptr;
    if (!PyArg_ParseTuple(args, "si", &kind, device))
        return nullptr;
    return source_by_kind(kind);
}

PyObject *shim_prepare(PyObject *self, PyObject *args) {
    int device = 0;
    const memlab_source *source = parse_kind_device(args, &device);
    if (source == nullptr)
        return nullptr;
    char err[512] = "";
    if (source->prepare(device, err, static_cast<int>(sizeof err)) != 0) {
        PyErr_Format(PyExc_RuntimeError, "%s source, device %d: %s",
                     source->name, device, err);
        return nullptr;
    }
    Py_RETURN_NONE;
}

// Values of one reading as a tuple of ints.
PyObject *values_tuple(const std::vector<int64_t> &values) {
    PyObject *result = PyTuple_New(static_cast<Py_ssize_t>(values.size()));
    if (result == nullptr)
        return nullptr;
    for (std::size_t i = 0; i < values.size(); ++i) {
        PyObject *item = PyLong_FromLongLong(values[i]);
        if (item == nullptr) {
            Py_DECREF(result);
            return nullptr;
        }
        PyTuple_SET_ITEM(result, static_cast<Py_ssize_t>(i), item);
    }
    return result;
}

// One reading of `source` by `read` (n_fields values into its argument; 0,
// or non-zero when it failed, and then `fail` sets the error) as a tuple.
template <typename Read, typename Fail>
PyObject *reading(const memlab_source *source, Read read, Fail fail) {
    std::vector<int64_t> values;
    try {
        values.resize(static_cast<std::size_t>(source->n_fields));
    } catch (const std::bad_alloc &) {
        return PyErr_NoMemory();
    }
    if (read(values.data()) != 0) {
        fail();
        return nullptr;
    }
    return values_tuple(values);
}

PyObject *shim_sample(PyObject *self, PyObject *args) {
    int device = 0;
    const memlab_source *source = parse_kind_device(args, &device);
    if (source == nullptr)
        return nullptr;
    return reading(
        source, [&](int64_t *out) { return source->sample(device, out); },
        [&] {
            PyErr_Format(PyExc_RuntimeError, "%s source cannot read device %d (not prepared?)",
                         source->name, device);
        });
}

const memlab_source *push_source(PyObject *args, int *device, int *reader,
                                 const char *format) {
    const char *kind = nullptr;
    if (!PyArg_ParseTuple(args, format, &kind, device, reader))
        return nullptr;
    const memlab_source *source = source_by_kind(kind);
    if (source != nullptr && source->read == nullptr) {
        PyErr_Format(PyExc_RuntimeError, "the %s source has no push path", kind);
        return nullptr;
    }
    return source;
}

PyObject *shim_open_reader(PyObject *self, PyObject *args) {
    int device = 0;
    const memlab_source *source = push_source(args, &device, nullptr, "si");
    if (source == nullptr)
        return nullptr;
    return PyLong_FromLong(source->open_reader(device));
}

PyObject *shim_close_reader(PyObject *self, PyObject *args) {
    int device = 0, reader = 0;
    const memlab_source *source = push_source(args, &device, &reader, "sii");
    if (source == nullptr)
        return nullptr;
    source->close_reader(device, reader);
    Py_RETURN_NONE;
}

PyObject *shim_read(PyObject *self, PyObject *args) {
    int device = 0, reader = 0;
    const memlab_source *source = push_source(args, &device, &reader, "sii");
    if (source == nullptr)
        return nullptr;
    return reading(
        source, [&](int64_t *out) { return source->read(device, reader, out); },
        [&] {
            PyErr_Format(PyExc_RuntimeError, "%s source cannot read device %d, reader %d",
                         source->name, device, reader);
        });
}

PyObject *shim_cuda_push_unavailable(PyObject *self, PyObject *noargs) {
    const char *why = memlab::cuda_push_unavailable();
    if (why == nullptr)
        Py_RETURN_NONE;
    return PyUnicode_FromString(why);
}

PyObject *shim_reset_peaks(PyObject *self, PyObject *args) {
    int device = 0;
    const memlab_source *source = parse_kind_device(args, &device);
    if (source == nullptr)
        return nullptr;
    if (source->reset_peaks(device) != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "%s source cannot reset peaks of device %d (not prepared?)",
                     source->name, device);
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyObject *shim_fields(PyObject *self, PyObject *args) {
    const char *kind = nullptr;
    if (!PyArg_ParseTuple(args, "s", &kind))
        return nullptr;
    const memlab_source *source = source_by_kind(kind);
    if (source == nullptr)
        return nullptr;
    PyObject *result = PyTuple_New(source->n_fields);
    if (result == nullptr)
        return nullptr;
    for (int i = 0; i < source->n_fields; ++i) {
        PyObject *name = PyUnicode_FromString(source->fields[i].name);
        if (name == nullptr) {
            Py_DECREF(result);
            return nullptr;
        }
        PyTuple_SET_ITEM(result, i, name);
    }
    return result;
}

PyObject *shim_path(PyObject *self, PyObject *args) {
    const char *kind = nullptr;
    if (!PyArg_ParseTuple(args, "s", &kind))
        return nullptr;
    const memlab_source *source = source_by_kind(kind);
    if (source == nullptr)
        return nullptr;
    return PyUnicode_FromString(source->read != nullptr ? "push" : "poll");
}

// seed_cpu(storages): storages is a sequence of c10::StorageImpl addresses
// (UntypedStorage._cdata) that the caller keeps alive during the call.
PyObject *shim_seed_cpu(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "seed_cpu() takes a sequence of storage addresses");
    if (seq == nullptr)
        return nullptr;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    std::vector<std::uintptr_t> storages;
    try {
        storages.resize(static_cast<std::size_t>(n));
    } catch (const std::bad_alloc &) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
        void *address = PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(seq, i));
        if (address == nullptr) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "seed_cpu(): a storage address is 0");
            Py_DECREF(seq);
            return nullptr;
        }
        storages[static_cast<std::size_t>(i)] = reinterpret_cast<std::uintptr_t>(address);
    }
    Py_DECREF(seq);
    int64_t seeded = 0, bytes = 0;
    const int rc = memlab::cpu_seed(storages.data(), storages.size(), &seeded, &bytes);
    if (rc < 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "seed_cpu(): the CPU source is not prepared (prepare('cpu', 0) first)");
        return nullptr;
    }
    if (rc > 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(LL)", static_cast<long long>(seeded), static_cast<long long>(bytes));
}

PyObject *shim_cpu_seeded(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(memlab::cpu_seeded());
}

PyObject *shim_cpu_counts(PyObject *self, PyObject *arg) {
    void *address = PyLong_AsVoidPtr(arg);
    if (address == nullptr) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "cpu_counts(): the storage address is 0");
        return nullptr;
    }
    return PyBool_FromLong(memlab::cpu_counts(reinterpret_cast<std::uintptr_t>(address)));
}

PyObject *shim_pause_next_cpu_block(PyObject *self, PyObject *arg) {
    const long long ns = PyLong_AsLongLong(arg);
    if (ns == -1 && PyErr_Occurred())
        return nullptr;
    memlab::cpu_pause_next_block(static_cast<int64_t>(ns));
    Py_RETURN_NONE;
}

PyObject *shim_cpu_block_paused(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(memlab::cpu_block_paused());
}

// Adds `source` as attribute `name`.  A nullptr source (not built for this
// torch) leaves the attribute absent.
int add_capsule(PyObject *module, const char *name, const memlab_source *source) {
    if (source == nullptr)
        return 0;
    // The capsule API wants a non-const pointer; the tracer treats it as const.
    PyObject *capsule = PyCapsule_New(const_cast<memlab_source *>(source),
                                      MEMLAB_SOURCE_CAPSULE, nullptr);
    if (capsule == nullptr)
        return -1;
    if (PyModule_AddObject(module, name, capsule) < 0) {
        Py_DECREF(capsule);
        return -1;
    }
    return 0;
}

int shim_exec(PyObject *module) {
    try {
        if (add_capsule(module, "cuda_source", memlab::cuda_source()) < 0)
            return -1;
        if (add_capsule(module, "cuda_push_source", memlab::cuda_push_source()) < 0)
            return -1;
        if (add_capsule(module, "cuda_push_counted_source",
                        memlab::cuda_push_counted_source()) < 0)
            return -1;
    } catch (const std::exception &e) {  // building the field table allocates
        PyErr_Format(PyExc_ImportError, "_torchshim: %s", e.what());
        return -1;
    }
    if (add_capsule(module, "cpu_source", memlab::cpu_source()) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "ABI_VERSION", MEMLAB_SOURCE_ABI_VERSION) < 0)
        return -1;
    if (PyModule_AddStringConstant(module, "TORCH_VERSION", MEMLAB_TORCH_VERSION) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "TORCH_CXX11_ABI", MEMLAB_TORCH_CXX11_ABI) < 0)
        return -1;
    return 0;
}

PyMethodDef shim_methods[] = {
    {"prepare", shim_prepare, METH_VARARGS,
     "prepare(kind, device) -> None\n\nMake the 'cuda' or 'cpu' source ready "
     "(for 'cpu': install the counting allocator).  RuntimeError says why not."},
    {"sample", shim_sample, METH_VARARGS,
     "sample(kind, device) -> tuple[int, ...]\n\nOne reading, in fields(kind) order."},
    {"reset_peaks", shim_reset_peaks, METH_VARARGS,
     "reset_peaks(kind, device) -> None\n\nSet every peak field to its current level."},
    {"path", shim_path, METH_VARARGS,
     "path(kind) -> 'push' | 'poll'\n\nHow the tracer reads the source: per-thread "
     "readers that never reset anything ('push'), or sample and reset peaks ('poll')."},
    {"open_reader", shim_open_reader, METH_VARARGS,
     "open_reader(kind, device) -> int\n\nA push source's reader register, or -1."},
    {"close_reader", shim_close_reader, METH_VARARGS,
     "close_reader(kind, device, reader) -> None\n\nGive the register back."},
    {"read", shim_read, METH_VARARGS,
     "read(kind, device, reader) -> tuple[int, ...]\n\nThe reader's reading, in "
     "fields(kind) order: peaks since its last read, counters of this thread."},
    {"cuda_push_unavailable", shim_cuda_push_unavailable, METH_NOARGS,
     "cuda_push_unavailable() -> str | None\n\nWhy the CUDA trace tracker cannot "
     "serve (build, backend), or None."},
    {"seed_cpu", shim_seed_cpu, METH_O,
     "seed_cpu(storages) -> tuple[int, int] | None\n\nCount the CPU storages made "
     "before the counting wrapper (UntypedStorage._cdata of each; keep them alive "
     "during the call) as live, and their later frees exactly.  Only the first call "
     "after prepare('cpu', 0) counts: (storages, bytes) counted; later calls: None."},
    {"cpu_counts", shim_cpu_counts, METH_O,
     "cpu_counts(storage) -> bool\n\nDoes the CPU source count this storage's block "
     "(an UntypedStorage._cdata the caller keeps alive)?"},
    {"cpu_seeded", shim_cpu_seeded, METH_NOARGS,
     "cpu_seeded() -> bool\n\nseed_cpu() has run since the wrapper was installed."},
    {"_pause_next_cpu_block", shim_pause_next_cpu_block, METH_O,
     "_pause_next_cpu_block(ns) -> None\n\nTests only: the next CPU block counted waits "
     "ns nanoseconds between its count and its push to the tracer."},
    {"_cpu_block_paused", shim_cpu_block_paused, METH_NOARGS,
     "_cpu_block_paused() -> bool\n\nTests only: a block is waiting (see above)."},
    {"fields", shim_fields, METH_VARARGS,
     "fields(kind) -> tuple[str, ...]\n\nField names of the 'cuda' or 'cpu' source."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef_Slot shim_slots[] = {
    {Py_mod_exec, reinterpret_cast<void *>(shim_exec)},
#ifdef Py_mod_gil
    // No Python state is shared: the sources synchronise themselves.
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, nullptr},
};

PyModuleDef shim_module = {
    PyModuleDef_HEAD_INIT,
    "pytorch_memlab._torchshim",
    "Allocator statistics sources (PyCapsules) for the pytorch_memlab tracer.\n"
    "Attributes cuda_source / cpu_source hold `const memlab_source *` "
    "(include/memlab/source.h).",
    0,
    shim_methods,
    shim_slots,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__torchshim(void) { return PyModuleDef_Init(&shim_module); }
