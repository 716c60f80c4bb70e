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

/* What a block is, as Python tags it (attrib_kinds.c): untagged blocks are
 * split at a peak by where they were made (before the call, on a line,
 * another thread).  The tagged kinds' bytes are kept per place, in arrays of
 * ATTRIB_TAGGED, indexed kind - 1. */
enum {
    ATTRIB_UNTAGGED = 0,
    ATTRIB_PARAMETER,
    ATTRIB_BUFFER,
    ATTRIB_GRADIENT,
    ATTRIB_OPTIMIZER_STATE,
    ATTRIB_SAVED_FOR_BACKWARD,
    ATTRIB_WORKSPACE,
    ATTRIB_N_KINDS,
};
#define ATTRIB_TAGGED (ATTRIB_N_KINDS - 1)

/* A function's breakdown at its highest level so far (one per LineTable). */
typedef struct AttribPeak {
    int64_t bytes;         /* the level; -1: none yet */
    int line;              /* the function's line running then */
    int64_t call;          /* which call (callfigures' numbering, from 1) */
    int64_t before;        /* alive before that call began */
    int64_t other;         /* made by other threads during it, still alive */
    uint64_t latest_start; /* the latest Call of the function (attrib_live_now):
                              its start_seq, unique to it; 0 before any */
    uint64_t latest_end;   /* the event number its end took; 0 while open */
    int64_t latest_call;
    uint64_t latest_attach;/* the attach it ran in (Attrib.attaches) */
    struct AttribCall *pending; /* Borrowed (open): held[] is still its
                              per-line bytes, not copied yet; or NULL */
    /* The last two calls of the function (callfigures' numbers), by their
     * parity: what each line made in that call (callees included) and still
     * holds.  kept: 2 x n_slots after held[], in the same allocation; NULL
     * in a copy. */
    int64_t kept_call[2];
    uint64_t kept_attach[2];   /* the attach each was counted in */
    int64_t *kept;
    /* Kinds: when it was taken (blocks numbered up to seq were made by
     * then), by which Call (its start_seq, and its slots), in which attach;
     * the tagged bytes alive before that call and made by other threads, and
     * per line (klive: n_slots x ATTRIB_TAGGED after kept[], same allocation). */
    uint64_t seq;
    uint64_t start_seq;
    uint64_t attach;
    int call_first_line;
    int call_n_slots;
    uint64_t listed;       /* the attach whose list of peaks holds it */
    int64_t kbefore[ATTRIB_TAGGED];
    int64_t kother[ATTRIB_TAGGED];
    int64_t *klive;
    /* Modules (attrib_modules.c): what each module made (while it was the
     * innermost running on the allocating thread) still alive then; its own
     * allocation, n_mods long, NULL for none; and of that, the tagged bytes
     * (mkheld: n_mods x ATTRIB_TAGGED, moved by tags as klive is).  In a
     * copy both follow klive, in its allocation. */
    int64_t *mheld;
    int64_t *mkheld;
    int n_mods;
    int first_line;
    int n_slots;
    int64_t held[];        /* n_slots: made on each line, still alive */
} AttribPeak;

/* What is alive now, split as a peak is, around the function's latest Call
 * (the out-of-memory post-mortem reads it after that call failed). */
typedef struct AttribLive {
    int64_t bytes;         /* the level now */
    int64_t call;          /* which call (callfigures' numbering) */
    int64_t before;        /* alive before it began */
    int64_t other;         /* made during it by other threads */
    int64_t after;         /* made after it ended */
    int first_line;
    int n_slots;
    int64_t live[];        /* n_slots: made on each line during it */
} AttribLive;

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
    AttribCall *open;      /* open Calls, any thread, newest first */
    AttribTop *tops;       /* Owned. one per thread with an open Call: a
                              block from a thread without Python (autograd's
                              device threads) is charged to the only one */
    int n_tops;
    int cap_tops;
    int failed;            /* memory ran out: the breakdown is incomplete */
    uint64_t attaches;     /* attach() calls: blocks are followed within one */
    uintptr_t unsized;     /* the block whose MEMLAB_SIZED is awaited, or 0 */
    int unsized_event;     /* its MEMLAB_ALLOC or MEMLAB_FREE */
    int64_t unsized_adopted; /* a freed adopted block's assumed size, or -1 */
    const char *kinds_inexact; /* why the kinds are not exact, or NULL */
    int64_t ktotal[ATTRIB_TAGGED]; /* live tagged bytes by kind */
    const char *modules_inexact; /* why the modules are not exact, or NULL */
    LineTable **peaks;     /* Owned array, borrowed tables: those whose
                              peaks this attach took (retroactive tags) */
    int n_peaks;
    int cap_peaks;
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

/* A generator's frame suspends with its Call open (suspended.h): the Call
 * takes no peaks, and its thread's innermost Call is `below` again (an open
 * Call, or NULL); blocks made meanwhile are "other" for it.  Resume: it is
 * the calling thread's innermost Call again.  Its parent stays the Call it
 * began under.  Hot path, GIL held. */
void attrib_suspend(Attrib *a, AttribCall *c, AttribCall *below);
void attrib_resume(Attrib *a, AttribCall *c);

/* What each line of `table` made in its call `call` (callfigures' number)
 * and is still alive, laid over n_slots lines from first_line into out:
 * 1, or 0 when that is not known exactly (not attached for the whole call,
 * memory ran out, no Call of the table in it).  GIL held. */
int attrib_kept(const Attrib *a, const LineTable *table, int64_t call, int first_line,
                int n_slots, int64_t *out);

/* For each line of `table` (n_slots from first_line, into out): the least,
 * over its calls from..to (callfigures' numbers), of what the line made in
 * the call and is still alive now; 0 for a line some call of which left
 * nothing.  1, or 0 when not known (not attached, memory ran out).  GIL held. */
int attrib_survivors(const Attrib *a, const LineTable *table, int64_t from, int64_t to,
                     int first_line, int n_slots, int64_t *out);

/* The level as the followed blocks make it (GIL held). */
int64_t attrib_level(const Attrib *a);

/* The table's peak (GIL held): a copy under the lock, or NULL when none.
 * The caller frees it with free(). */
AttribPeak *attrib_peak_copy(LineTable *table);
/* Forget the table's peak (clear()); with forget_calls, what its calls
 * made too (their numbering starts over). */
void attrib_peak_clear(LineTable *table, int forget_calls);

/* What is alive now around the table's latest Call (GIL held): 0 with *out
 * set (NULL when there is none: not attached, or no Call yet; else the
 * caller frees it with free()), or -1 when memory ran out.  O(live blocks). */
int attrib_live_now(const Attrib *a, const LineTable *table, AttribLive **out);

/* The tagged kinds and the modules of what is alive now around the table's
 * latest Call, split as attrib_live_now splits it (attrib_live_kinds.c):
 * known 0 where that has no figures; mods (Owned, the caller frees it):
 * n_mods long, what each module made during the Call.  -1 when memory ran
 * out.  GIL held, O(live blocks). */
enum { ATTRIB_LIVE_BEFORE, ATTRIB_LIVE_DURING, ATTRIB_LIVE_OTHER, ATTRIB_LIVE_AFTER,
       ATTRIB_LIVE_PLACES };
typedef struct {
    int known;
    int64_t kinds[ATTRIB_LIVE_PLACES][ATTRIB_TAGGED];
    int64_t *mods;
    int n_mods;
} AttribLiveKinds;
int attrib_live_kinds(const Attrib *a, const LineTable *table, AttribLiveKinds *out);

/* The table of followed blocks now: live blocks in it, and its slots (the
 * host memory it holds is the slots'). */
void attrib_table_size(const Attrib *a, size_t *used, size_t *capacity);

/* Which profiled line made the live block at `ptr` (its start address) of
 * `source`'s `device`, as the first attached tracer that saw it made inside
 * a profiled function recorded it: a new reference to that function's code
 * object, its line in *line.  NULL without an exception when no attached
 * tracer did (made outside every profiled function, before the tracer was
 * enabled, or it is not a live block).  Control path, GIL held. */
PyObject *attrib_made_at(const char *source, int device, uintptr_t ptr, int *line);

/* Tag the live blocks at ptrs[i] as `kind` (attrib_kinds.c): their bytes
 * move to that kind in every open Call and, with `back`, in every peak of
 * this attach taken while they were alive (a block alive now was alive at
 * every peak since it was made); without, from now on only (a role that
 * ended).  `only_from` >= 0: only blocks of that kind now (0: untagged).  A
 * ptr that is no followed block (made before we attached) is taken in, when
 * tagged from untagged, with sizes[i], as alive before everything, if that
 * fits in what is untagged before each open Call and peak; else the kinds
 * are marked not exact.  Control path, GIL held; returns the blocks whose
 * kind changed. */
Py_ssize_t attrib_tag(Attrib *a, int kind, int only_from, int back, const uintptr_t *ptrs,
                      const int64_t *sizes, Py_ssize_t n);

/* Why the tagged kinds are not exact, or NULL. */
const char *attrib_kinds_missing(const Attrib *a);

/* The module (a number Python gives, 0: none) the calling thread runs now:
 * blocks it makes are charged to it (attrib_modules.c).  Any thread. */
void attrib_set_module(int module);
/* Why the modules are not exact, or NULL. */
const char *attrib_modules_missing(const Attrib *a);
/* A table's peak and what it owns (linetable_free). */
void attrib_peak_free(AttribPeak *p);

/* What the source calls per allocation (memlab_alloc_listener). */
int attrib_listener(const char *source, int device, uintptr_t ptr, int64_t size, int event);

#endif /* MEMLAB_ATTRIB_H */
