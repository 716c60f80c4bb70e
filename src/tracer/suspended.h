/* The calls of profiled generators and coroutines across their suspensions.
 *
 * A generator's (or coroutine's) call runs from its first line to its
 * return or unwind, across every yield and await, as a plain function's runs
 * from its first line to its return.  While it is suspended its frame is off
 * the thread's stack, so what other code runs then (the consumer, the event
 * loop, another coroutine) is not charged to its lines, and its Call
 * (attrib.h) takes no peak: blocks made then are "other" for it.  But its
 * call stays open: callfigures' call does not end (a profiled call made while
 * a generator is suspended is part of the same call, as calls overlapping on
 * two threads are: two coroutines interleaved by asyncio.gather are one call
 * there, each with its own Call), and it is the same Call when it resumes.
 * The tracer keeps one record per such call, from its first suspension to
 * its end, keyed by the generator object's address.
 *
 * A generator closed while suspended ends its call with the events of the
 * close (a throw into it, then its unwind) up to 3.12, and on 3.13+ where the
 * yield is inside a try.  On 3.13+ a yield outside any try is closed without
 * an event: a weak reference to each generator tells when it died, and its
 * call then ends at the tracer's next event that opens or closes a thread's
 * stack, or at disable().  A closed generator still referenced keeps its
 * call open until it is freed or the tracer is disabled.
 *
 * Limits: a generator resumed under another caller than the one it began
 * under keeps charging its blocks to the first caller's line (a Call's
 * parent is fixed).  One resumed with no record (enable() while it was
 * suspended) gets one at its next yield; where a resume cannot be told from
 * a throw (settrace before 3.11 and from 3.13) it gets none, and its call
 * ends at each yield: a weak reference made while a generator is closed by
 * its finalizer would outlive it.  A curve (curve.h) still ends at each
 * suspension. */
#ifndef MEMLAB_SUSPENDED_H
#define MEMLAB_SUSPENDED_H

#include "threadstack.h"

#include <stdint.h>

struct AttribCall;
struct TracerObject;

/* One generator's call, from its first suspension to its end. */
typedef struct {
    uintptr_t key;             /* the generator's address; 0: an empty slot */
    PyObject *ref;             /* Owned. a weak reference to the generator */
    LineTable *table;          /* Borrowed: the tracer's CodeMap owns it. */
    struct AttribCall *acall;  /* Borrowed: open while parked; NULL: none */
    int parked;                /* suspended now (else its frame runs) */
} Suspension;

/* A tracer's records: an open-addressing table. */
typedef struct {
    Suspension *slots;         /* Owned. */
    size_t capacity;           /* a power of two, or 0 */
    size_t used;
    int parked;                /* records suspended now: they keep the call open */
    uint64_t deaths_seen;      /* generator deaths counted at the last sweep */
} Suspensions;

void suspensions_dealloc(Suspensions *s);

/* The record of `key`, or NULL. */
Suspension *suspensions_find(Suspensions *s, uintptr_t key);

/* A new record for generator `gen` (not present), taking `ref`, a weak
 * reference to it (suspension_ref); NULL when memory ran out. */
Suspension *suspensions_add(Suspensions *s, PyObject *gen, PyObject *ref, LineTable *table);

/* Drop a record.  Records may move: a pointer to another is stale after. */
void suspensions_remove(Suspensions *s, Suspension *r);

/* Did a followed generator die since the last call that returned 1? */
int suspensions_died(Suspensions *s);

/* Is the record's generator gone? */
int suspension_dead(const Suspension *r);

/* The generator running in `frame`, as a new reference, or NULL (none). */
PyObject *memlab_frame_generator(PyFrameObject *frame);

/* ---- a tracer's side (events.c), hot path, never raises ---- */

/* The suspended call of `gen` (NULL: none known) that a resume of a frame
 * of `table` continues, or NULL: it begins a new one. */
Suspension *suspension_of(struct TracerObject *t, PyObject *gen, LineTable *table);

/* Frame `f`, just pushed, continues the call of `r`: its Call too. */
void suspension_resumes(struct TracerObject *t, Frame *f, Suspension *r);

/* A weak reference to generator `gen`, which yields from a frame of
 * `table`, when the thread's innermost frame is that one and needs a record
 * for it; else NULL.  Taken before the event's reading: making it may
 * collect garbage, and so run Python code (finalizers) that lets another
 * thread disable the tracer, which that reading notices (events.c). */
PyObject *suspension_ref(struct TracerObject *t, LineTable *table, PyObject *gen);

/* The innermost frame of `stack` yields `gen` (`*ref`: suspension_ref's,
 * set to NULL when a new record took it): 0 when its call was kept open and
 * the frame popped; -1 when its call must end as a return's would (no
 * generator, no memory, it may not, or it is dying). */
int suspension_park(struct TracerObject *t, ThreadStack *stack, PyObject *gen,
                    PyObject **ref);

/* The innermost frame of `stack`, which has a record, is about to be popped
 * (returned or unwound): its record goes. */
void suspension_frame_ends(struct TracerObject *t, ThreadStack *stack);

/* The calls of suspended generators that died unseen end (their Calls
 * too); all of them end (disable()); their Calls are forgotten (detach). */
void suspensions_end_dead(struct TracerObject *t);
void suspensions_end_all(struct TracerObject *t);
void suspensions_drop_calls(struct TracerObject *t);

#endif /* MEMLAB_SUSPENDED_H */
