/* What monitoring.c (the tool id, the instrumented codes) and
 * monitoring_events.c (the callbacks sys.monitoring calls) share. */
#ifndef MEMLAB_MONITORING_INTERNAL_H
#define MEMLAB_MONITORING_INTERNAL_H

#include "tracer.h"

#if MEMLAB_HAVE_MONITORING

/* What an event does to the tracer. */
typedef enum { ACT_LINE, ACT_START, ACT_RESUME, ACT_THROW, ACT_YIELD, ACT_LEAVE } event_action;

/* Registration is driven by this table, and so is teardown. */
typedef struct {
    const char *name;
    event_action action;
    int local;          /* 1: set per code object; 0: global, filtered by code */
} MonitorEvent;

static const MonitorEvent monitor_events[] = {
    {"LINE", ACT_LINE, 1},
    {"PY_START", ACT_START, 1},
    {"PY_RESUME", ACT_RESUME, 1},
    {"PY_RETURN", ACT_LEAVE, 1},
    {"PY_YIELD", ACT_YIELD, 1},
    {"PY_UNWIND", ACT_LEAVE, 0},   /* global-only in 3.12/3.13 */
    {"PY_THROW", ACT_THROW, 0},    /* global-only in 3.12/3.13 */
};
#define N_EVENTS ((int)(sizeof(monitor_events) / sizeof(monitor_events[0])))

/* A new callback of `type` (the module state's) for events doing `action`. */
PyObject *monitoring_new_callback(PyTypeObject *type, event_action action);

/* The callbacks' type, made from `module`'s spec into its state; 0, or -1
 * with an exception set. */
int monitoring_callback_type_init(PyObject *module);

#endif /* MEMLAB_HAVE_MONITORING */
#endif /* MEMLAB_MONITORING_INTERNAL_H */
