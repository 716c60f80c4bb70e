/* Objects of one type among those the garbage collector tracks. */
#ifndef MEMLAB_INSTANCES_H
#define MEMLAB_INSTANCES_H

#include "compat.h"

/* instances_of(cls): a new list of the gc-tracked objects whose type is cls
 * or a subclass of it; only type slots are read, no Python code runs. */
PyObject *memlab_instances_of(PyObject *module, PyObject *cls);

#endif /* MEMLAB_INSTANCES_H */
