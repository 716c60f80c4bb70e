/* The Tracer: one profiler's registered code, per-thread stacks and line
 * tables, fed by whichever hook this interpreter uses. */
#ifndef MEMLAB_TRACER_H
#define MEMLAB_TRACER_H

#include "attrib.h"
#include "callfigures.h"
#include "codemap.h"
#include "curve.h"
#include "sampler.h"
#include "suspended.h"
#include "threadstack.h"

/* Where enable() and disable() stand.  Both run Python code (the source's
 * prepare() and sample(), threading.settrace), which may call them again, on
 * this thread or another.  The call under way finishes the transition: the
 * same call again is a no-op, the opposite one is refused (RuntimeError). */
typedef enum {
    TRACER_OFF,
    TRACER_ENABLING,
    TRACER_ON,
    TRACER_DISABLING,
} tracer_state;

typedef struct TracerObject {
    PyObject_HEAD
    Sampler sampler;
    CodeMap codes;
    ThreadStacks threads;
    int64_t *interval;             /* Owned. scratch: n_columns figures */
    int enabled;                   /* on the enabled list: events are counted */
    tracer_state state;
    Py_ssize_t sample_errors;      /* readings that failed (reported at stats()) */
    Py_ssize_t memory_errors;      /* commits lost to a failed allocation */
    CurveSet curves;               /* the memory curve of one call per function */
    Attrib attrib;                 /* what was alive at each function's peak */
    int attrib_moved;              /* set_device() while enabled: peaks mix devices */
    int follow_blocks;             /* attach attrib when the source offers it */
    int tool_id;                   /* sys.monitoring tool id, -1 when none */
    int open_stacks;               /* threads with a profiled frame open */
    int call_open;                 /* a call (callfigures.h) began and did not end:
                                      a stack is open or a generator suspended */
    Suspensions suspensions;       /* calls of suspended generators (suspended.h) */
    CallClock clock;               /* when the current call began */
    struct TracerObject *next_enabled;  /* Borrowed. the enabled-tracers list */
    PyObject *weakreflist;
} TracerObject;

/* Events, mechanism-independent.  Hot path: never raise.
 *
 * A frame starts; or a generator or coroutine frame resumes after a yield or
 * await (`thrown`: or it may be an exception thrown in at the yield, close()
 * too), and `gen` is the generator (NULL: not known), whose call goes on
 * across its suspensions (suspended.h).  A thrown-in frame's `line` may be
 * -1.  A frame returns or unwinds; or it suspends at a yield or await of
 * generator `yielded` (NULL: not a yield, or not known). */
void tracer_on_resume(TracerObject *t, LineTable *table, int line, PyObject *gen, int thrown);
static inline void
tracer_on_start(TracerObject *t, LineTable *table, int line)
{
    tracer_on_resume(t, table, line, NULL, 0);
}
void tracer_on_line(TracerObject *t, LineTable *table, int line);
void tracer_on_leave(TracerObject *t, LineTable *table, PyObject *yielded);

/* Fold the open interval into the calling thread's frames (control path). */
void tracer_fold_now(TracerObject *t);

/* Every open frame forgets its Call (attrib.h), before a detach. */
void tracer_drop_calls(TracerObject *t);

/* Every open line now starts at `level` (after a device switch). */
void tracer_restart_levels(TracerObject *t, int64_t level);

/* Commit and drop every open frame of every thread. */
void tracer_close_all_frames(TracerObject *t);

/* The enabled tracers, newest first (both mechanisms use it; the settrace
 * hook dispatches through it, atexit disables through it). */
extern TracerObject *memlab_enabled_tracers;

/* Does an enabled tracer register `code`?  (Both hooks ask.) */
int memlab_code_wanted(PyObject *code);

/* Mechanism hooks: 0, or -1 with an exception set. */
int hook_enable(TracerObject *t);
int hook_disable(TracerObject *t);
int hook_add_code(TracerObject *t, PyObject *code);
/* Which hook delivers events: chosen once per process, at the module's first
 * execution (a second execution, after `del sys.modules[...]`, keeps it, so
 * tracers already enabled are disabled through the hook that enabled them). */
typedef enum { MECH_SETTRACE, MECH_MONITORING } memlab_mechanism_kind;
extern memlab_mechanism_kind memlab_mechanism;

/* Chooses the mechanism; called once at module exec. */
int hooks_init(PyObject *module);

PyObject *memlab_install_thread_hook(PyObject *module, PyObject *unused);

int tracer_type_init(PyObject *module);

#endif /* MEMLAB_TRACER_H */
