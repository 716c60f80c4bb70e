/* Why the peak: which line allocated what was alive at each function's peak.
 *
 * A source that pushes its allocations (memlab_source.listen) calls
 * attrib_listener for each one, on whichever thread allocates or frees, with
 * no GIL.  Every tracer attached to that device keeps a map from live block
 * to where it was made: a Call (one open outermost frame of a profiled
 * function on one thread) and that Call's line then.  A Call holds, per line,
 * the bytes made on that line (callees included) and still alive, the bytes
 * alive before it began (`before`) and the bytes other threads made since and
 * still hold (`other`); so before + other + sum(live) is always the level.
 * When the level passes the function's highest so far, the Call's figures are
 * copied into the function's Peak: O(its lines), never O(allocations).
 *
 * A nested profiled frame is its own Call whose parent's line is fixed while
 * it runs: a block made in it counts on its own line and on each ancestor's
 * calling line.  A recursive frame of a function already open on the thread
 * makes no Call: its blocks count on the outer frame's calling line.
 *
 * A source that learns a block's size only at its next event (CUDA: the
 * allocator's events carry requested sizes, its statistics whole blocks)
 * reports the block with no size, then MEMLAB_SIZED before anything else
 * moves the level; the level's course, and so every peak, is unchanged.
 *
 * Host memory: one entry per live block, one Call per open frame or per
 * frame that still owns a live block, one Peak per function.  Everything is
 * guarded by one process-wide mutex, taken per allocation only while some
 * tracer is attached. */
#ifndef MEMLAB_ATTRIB_H
#define MEMLAB_ATTRIB_H

#include "compat.h"
#include "linetable.h"
#include "memlab/source.h"

#include <stdint.h>

/* A function's breakdown at its highest level so far (one per LineTable). */
typedef struct AttribPeak {
    int64_t bytes;         /* the level; -1: none yet */
    int line;              /* the function's line running then */
    int64_t call;          /* which call (callfigures' numbering, from 1) */
    int64_t before;        /* alive before that call began */
    int64_t other;         /* made by other threads during it, still alive */
    int first_line;
    int n_slots;
    int64_t held[];        /* n_slots: made on each line, still alive */
} AttribPeak;

typedef struct AttribCall AttribCall;
typedef struct AttribBlock AttribBlock;

/* One thread's innermost open Call. */
typedef struct {
    uint64_t thread;       /* PyThread_get_thread_ident() */
    AttribCall *top;       /* Borrowed (the Call is open). */
} AttribTop;

/* One tracer's attribution on one device. */
typedef struct Attrib {
    int attached;          /* on the attached list: receives allocations */
    int device;
    const memlab_source *source;  /* Borrowed: static storage in the shim */
    uint64_t seq;          /* allocations seen */
    int64_t level;         /* the device level, as the pushed sizes make it */
    AttribBlock *blocks;   /* Owned. open-addressing table, key 0 = empty */
    size_t capacity;       /* a power of two, or 0 */
    size_t used;
    AttribCall *open;      /* open Calls, any thread, newest first: blocks
                              from threads without Python (autograd's engine)
                              are charged to the newest */
    AttribTop *tops;       /* Owned. */
    int n_tops;
    int cap_tops;
    int failed;            /* memory ran out: the breakdown is incomplete */
    uintptr_t unsized;     /* the block whose MEMLAB_SIZED is awaited, or 0 */
    int unsized_event;     /* its MEMLAB_ALLOC or MEMLAB_FREE */
    struct Attrib *next;   /* Borrowed. the attached list */
} Attrib;

/* Does `source` push its allocations? */
int attrib_offered(const memlab_source *source);

/* Control path, GIL held.  Attach: start receiving `source`'s allocations of
 * `device`; 0, or -1 with an exception set.  Detach: stop, and free every
 * block and Call (peaks stay in their tables). */
int attrib_attach(Attrib *a, const memlab_source *source, int device);
void attrib_detach(Attrib *a);

/* Hot path (frame events, GIL held): a frame of `table` begins; returns its
 * Call, or NULL when it makes none (not attached, a recursive frame, out of
 * memory).  `call` is the callfigures call number. */
AttribCall *attrib_push(Attrib *a, LineTable *table, int line, int64_t call);
void attrib_set_line(AttribCall *c, int line);
void attrib_pop(Attrib *a, AttribCall *c);

/* The table's peak (GIL held): a copy under the lock, or NULL when none.
 * The caller frees it with free(). */
AttribPeak *attrib_peak_copy(const LineTable *table);
/* Forget the table's peak (clear()). */
void attrib_peak_clear(LineTable *table);

/* What the source calls per allocation (memlab_alloc_listener). */
int attrib_listener(const char *source, int device, uintptr_t ptr, int64_t size, int event);

#endif /* MEMLAB_ATTRIB_H */
