/* Chooses the hook mechanism once and routes tracers to it. */
#include "tracer.h"

#include <stdlib.h>
#include <string.h>

/* The two globals every event reads stay plain (tracer.h); what only this
 * file changes is its runtime. */
TracerObject *memlab_enabled_tracers = NULL;
memlab_mechanism_kind memlab_mechanism = MECH_SETTRACE;

static struct {
    int mechanism_chosen;          /* PYTORCH_MEMLAB_TRACER read, at the first exec */
} runtime;

int settrace_init(PyObject *module);
int settrace_enable(TracerObject *t);
int settrace_disable(TracerObject *t);
#if MEMLAB_HAVE_MONITORING
int monitoring_init(PyObject *module);
int monitoring_enable(TracerObject *t);
int monitoring_disable(TracerObject *t);
int monitoring_add_code(TracerObject *t, PyObject *code);
#endif

#if MEMLAB_HAVE_MONITORING
static int
use_monitoring(void)
{
    return memlab_mechanism == MECH_MONITORING;
}
#endif

/* PYTORCH_MEMLAB_TRACER, read once: 0, or -1 with ImportError set. */
static int
choose_mechanism(void)
{
    const char *forced = getenv("PYTORCH_MEMLAB_TRACER");
    if (forced != NULL && forced[0] != '\0' && strcmp(forced, "settrace") != 0
            && strcmp(forced, "monitoring") != 0) {
        PyErr_Format(PyExc_ImportError, "PYTORCH_MEMLAB_TRACER=%s: use 'settrace' or "
                     "'monitoring' (or leave it unset)", forced);
        return -1;
    }
#if MEMLAB_HAVE_MONITORING
    memlab_mechanism = forced != NULL && strcmp(forced, "settrace") == 0
                       ? MECH_SETTRACE : MECH_MONITORING;
#else
    if (forced != NULL && strcmp(forced, "monitoring") == 0) {
        PyErr_SetString(PyExc_ImportError, "PYTORCH_MEMLAB_TRACER=monitoring needs "
                        "Python 3.12 or newer (sys.monitoring)");
        return -1;
    }
#endif
    runtime.mechanism_chosen = 1;
    return 0;
}

int
hooks_init(PyObject *module)
{
    if (!runtime.mechanism_chosen && choose_mechanism() < 0) {
        return -1;
    }
#if MEMLAB_HAVE_MONITORING
    if (monitoring_init(module) < 0) {
        return -1;
    }
#endif
    if (settrace_init(module) < 0) {
        return -1;
    }
    return PyModule_AddStringConstant(module, "MECHANISM",
                                      memlab_mechanism == MECH_MONITORING
                                      ? "monitoring" : "settrace");
}

int
memlab_code_wanted(PyObject *code)
{
    for (TracerObject *t = memlab_enabled_tracers; t != NULL; t = t->next_enabled) {
        if (codemap_get(&t->codes, code) != NULL) {
            return 1;
        }
    }
    return 0;
}

int
hook_enable(TracerObject *t)
{
#if MEMLAB_HAVE_MONITORING
    if (use_monitoring()) {
        return monitoring_enable(t);
    }
#endif
    return settrace_enable(t);
}

int
hook_disable(TracerObject *t)
{
#if MEMLAB_HAVE_MONITORING
    if (use_monitoring()) {
        return monitoring_disable(t);
    }
#endif
    return settrace_disable(t);
}

int
hook_add_code(TracerObject *t, PyObject *code)
{
#if MEMLAB_HAVE_MONITORING
    if (use_monitoring()) {
        return monitoring_add_code(t, code);
    }
#endif
    return 0;   /* the settrace hook looks every frame's code up */
}
