/* The _tracer module's own state: what must die with the module object.
 * (The tracers' runtime -- enabled tracers, hooks, tool id -- is process-wide
 * by design and lives in each concern's file.) */
#ifndef MEMLAB_MODULE_STATE_H
#define MEMLAB_MODULE_STATE_H

#include "compat.h"

typedef struct {
    /* Owned. the type of the sys.monitoring callbacks (3.12+), or NULL.  It
     * refers to its module, so the module's traverse reports it: a dropped
     * module (del sys.modules[...]) is collected, not kept by a static. */
    PyTypeObject *callback_type;
} TracerModuleState;

extern struct PyModuleDef memlab_tracer_module;

static inline TracerModuleState *
memlab_module_state(PyObject *module)
{
    return (TracerModuleState *)PyModule_GetState(module);
}

#endif /* MEMLAB_MODULE_STATE_H */
