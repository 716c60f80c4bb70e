/* The kinds of the followed blocks, as the module's functions (kinds.c). */
#ifndef MEMLAB_KINDS_H
#define MEMLAB_KINDS_H

#include "compat.h"

/* tag_blocks(tracer, kind, ptrs, sizes, only_from=-1, back=True): see _tracer.pyi. */
PyObject *memlab_tag_blocks(PyObject *module, PyObject *args);
/* peaks_by_kind(tracer): see _tracer.pyi. */
PyObject *memlab_peaks_by_kind(PyObject *module, PyObject *tracer);
/* live_kinds(tracer, code): see _tracer.pyi. */
PyObject *memlab_live_kinds(PyObject *module, PyObject *args);
/* set_module(n): see _tracer.pyi. */
PyObject *memlab_set_module(PyObject *module, PyObject *arg);

#endif /* MEMLAB_KINDS_H */
