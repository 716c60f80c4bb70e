/* The Tracer type's methods: tracer_init.c (construction), tracer_type.c
 * (registration, control, the type) and tracer_results.c (figures read back). */
#ifndef MEMLAB_TRACER_METHODS_H
#define MEMLAB_TRACER_METHODS_H

#include "tracer.h"

/* Is the Tracer initialised?  0 with an exception set if not. */
int tracer_ready(TracerObject *self);

PyObject *Tracer_stats(TracerObject *self, PyObject *unused);
PyObject *Tracer_call_stats(TracerObject *self, PyObject *unused);
PyObject *Tracer_peaks(TracerObject *self, PyObject *unused);
/* [(code, peak_of(its peak) or None)] over the tracer's tables (the peak a
 * copy, taken under attrib's lock); NULL with an exception set. */
PyObject *tracer_peak_rows(TracerObject *t, PyObject *(*peak_of)(const AttribPeak *));
PyObject *Tracer_live_by_line(TracerObject *self, PyObject *code);
PyObject *Tracer_curves(TracerObject *self, PyObject *unused);
PyObject *Tracer_get_peak_unavailable(TracerObject *self, void *closure);
int Tracer_init(TracerObject *self, PyObject *args, PyObject *kwds);
PyObject *Tracer_get_columns(TracerObject *self, void *closure);
PyObject *Tracer_get_growth_field(TracerObject *self, void *closure);
PyObject *Tracer_get_enabled(TracerObject *self, void *closure);
PyObject *Tracer_get_device(TracerObject *self, void *closure);
PyObject *Tracer_get_sample_errors(TracerObject *self, void *closure);
PyObject *Tracer_get_followed_level(TracerObject *self, void *closure);
PyObject *Tracer_get_followed_blocks(TracerObject *self, void *closure);
PyObject *Tracer_get_tool_id(TracerObject *self, void *closure);

#endif /* MEMLAB_TRACER_METHODS_H */
