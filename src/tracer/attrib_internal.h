/* Attribution's parts (attrib.h): what its four files share, and nothing
 * else includes.  attrib.c: attaching, Calls; attrib_events.c: what the
 * sources push; attrib_blocks.c: the table of live blocks; attrib_read.c:
 * the figures read back. */
#ifndef MEMLAB_ATTRIB_INTERNAL_H
#define MEMLAB_ATTRIB_INTERNAL_H

#include "attrib.h"

#include <sched.h>
#include <stdint.h>

/* What only an open Call needs: freed when it ends, so a Call that a kept
 * block holds on to costs a few words, not a word per line of its function. */
typedef struct AttribOpen {
    uint64_t thread;
    int64_t before;        /* alive before it began, still alive */
    int64_t other;         /* made by other threads since, still alive */
    uint64_t mark;         /* the event that last walked through it */
    int first_line;        /* the table's slots when it began: live[]'s */
    int n_slots;
    AttribCall *next_open; /* Borrowed. the open list, newest first */
    int suspended;         /* its generator is suspended: no peaks, not a top */
    int64_t kbefore[ATTRIB_TAGGED];  /* of before, tagged bytes by kind */
    int64_t kother[ATTRIB_TAGGED];   /* of other, the same */
    int64_t *klive;        /* n_slots x ATTRIB_TAGGED after live[]: of live[] */
    int64_t *mlive;        /* Owned. n_mods: made by each module, still alive */
    int64_t *mklive;       /* Owned. n_mods x ATTRIB_TAGGED: of mlive[], tagged */
    int n_mods;
    int64_t live[];        /* per line of the table: made there, still alive */
} AttribOpen;

/* One open (or still referenced) outermost frame of a profiled function. */
struct AttribCall {
    int refs;              /* 1 while open, +1 per live block, +1 per child Call */
    int line;              /* current line; written by its own thread (atomics) */
    AttribCall *parent;    /* Owned reference. the enclosing Call on its thread */
    LineTable *table;      /* Borrowed: tables outlive their Calls (detach first) */
    uint64_t start_seq;    /* blocks numbered below this were alive before */
    int64_t call;          /* which call of its table (callfigures' numbering) */
    int parent_line;       /* the parent's line when this began (fixed meanwhile) */
    AttribOpen *open;      /* Owned. NULL once the Call has ended */
};

/* One live block.  ptr 0 marks an empty slot. */
struct AttribBlock {
    uintptr_t ptr;
    int64_t size;
    uint64_t seq;
    AttribCall *call;      /* Owned reference, or NULL: made outside any Call */
    int line;              /* call's line then */
    uint8_t kind;          /* ATTRIB_UNTAGGED until Python tags it */
    uint8_t adopted;       /* made before we attached: taken in when tagged,
                              its size as Python gave it */
    uint8_t settled;       /* its kind changed from now on only: the peaks
                              before keep theirs (no tag reaches back) */
    int module;            /* the module that made it (0: none) */
};

#define MIN_CAPACITY 1024

/* The process-wide state of attribution: every Attrib, wherever it is
 * attached, is reached through it. */
typedef struct {
    int lock;              /* a spin lock: see attrib_lock() */
    Attrib *attached;      /* Borrowed. the attached Attribs; guarded by lock */
    int any_attached;      /* atomics: the listener's early exit */
    int fork_hooked;       /* pthread_atfork handlers installed */
    int modules_failed;    /* a peak's modules could not be copied (memory) */
} AttribRuntime;

extern AttribRuntime attrib_runtime;

/* A spin lock, not a mutex: it is taken for every block the allocators
 * report, uncontended almost always, and held for a few table operations
 * (a mutex's lock and unlock cost as much as the work they guard). */
static inline void
attrib_lock(void)
{
    while (__atomic_exchange_n(&attrib_runtime.lock, 1, __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(&attrib_runtime.lock, __ATOMIC_RELAXED)) {
            sched_yield();
        }
    }
}

static inline void
attrib_unlock(void)
{
    __atomic_store_n(&attrib_runtime.lock, 0, __ATOMIC_RELEASE);
}

/* A Call's slot for `line`.  A line outside the slots the Call was made
 * with (before the first line event, or a table widened since) counts on its
 * first slot, the def. */
static inline int
slot_of(const AttribOpen *op, int line)
{
    int s = line - op->first_line;
    return s >= 0 && s < op->n_slots ? s : 0;
}

/* The same, for a peak's slots (its held[] and kept[]). */
static inline int
peak_slot(const AttribPeak *p, int line)
{
    int s = line - p->first_line;
    return s >= 0 && s < p->n_slots ? s : 0;
}

/* The same, for the table's slots now. */
static inline int
table_slot(const LineTable *table, int line)
{
    int s = line - table->first_line;
    return s >= 0 && s < table->n_slots ? s : 0;
}

/* attrib.c, lock held: a Call's references; the nearest open Call from c
 * up; the calling thread's top; a function's empty peak. */
void attrib_call_release(AttribCall *c);
AttribCall *attrib_open_from(AttribCall *c);
AttribTop *attrib_top_of(Attrib *a, uint64_t thread);
AttribPeak *attrib_peak_new(const LineTable *table);

/* attrib_events.c, lock held: a new highest level for Call c; a pending
 * peak's lines copied (one, or every open Call's). */
void attrib_snapshot_if_higher(Attrib *a, AttribCall *c);
void attrib_flush_peak(AttribPeak *p);
void attrib_flush_peaks(Attrib *a);

/* attrib_kinds.c, lock held: a tagged block's bytes leave their places
 * (b freed: every open Call's, not the peaks'), or come (its size came
 * after its tag); the kept peak list. */
void attrib_kinds_free(Attrib *a, const AttribBlock *b);
void attrib_kinds_charge(Attrib *a, const AttribBlock *b);
int attrib_list_peak(Attrib *a, LineTable *table);

/* attrib_modules.c, lock held: `size` more (or fewer) bytes of `module`
 * alive in an open Call; a tagged block's bytes of `module` moving from kind
 * `from` to `to` in a module x ATTRIB_TAGGED array n_mods long (a module
 * out of it was never charged there); a peak's modules copied from its Call;
 * the module the calling thread runs; an open Call's end. */
void attrib_module_add(Attrib *a, AttribOpen *op, int module, int64_t size);
void attrib_module_kind(int64_t *mk, int n_mods, int module, int from, int to, int64_t size);
void attrib_module_flush(AttribPeak *p, const AttribOpen *op);
int attrib_module_now(void);
void attrib_open_free(AttribOpen *op);

/* attrib_blocks.c, lock held: the table of live blocks (key ptr; 0 marks an
 * empty slot).  add: a new slot for ptr (not present), NULL when out of
 * memory; resize: -1 when out of memory. */
int attrib_blocks_resize(Attrib *a, size_t capacity);
AttribBlock *attrib_blocks_find(Attrib *a, uintptr_t ptr);
AttribBlock *attrib_blocks_add(Attrib *a, uintptr_t ptr);
void attrib_blocks_remove(Attrib *a, AttribBlock *b);

#endif /* MEMLAB_ATTRIB_INTERNAL_H */
