/* Why the peak (attrib.h): live blocks by the line that made them. */
#include "attrib.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

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
};

#define MIN_CAPACITY 1024

/* A spin lock, not a mutex: it is taken for every block the allocators
 * report, uncontended almost always, and held for a few table operations
 * (a mutex's lock and unlock cost as much as the work they guard). */
static int attrib_lock;

static inline void
lock(void)
{
    while (__atomic_exchange_n(&attrib_lock, 1, __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(&attrib_lock, __ATOMIC_RELAXED)) {
            sched_yield();
        }
    }
}

static inline void
unlock(void)
{
    __atomic_store_n(&attrib_lock, 0, __ATOMIC_RELEASE);
}
static Attrib *attached;          /* guarded by attrib_lock */
static int any_attached;          /* atomics: the listener's early exit */
static int fork_hooked;

static void lock_for_fork(void) { lock(); }
static void unlock_after_fork(void) { unlock(); }

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

static void
call_release(AttribCall *c)
{
    while (c != NULL && --c->refs == 0) {
        AttribCall *parent = c->parent;
        free(c->open);
        free(c);
        c = parent;
    }
}

/* The nearest Call from c up that is still open, or NULL. */
static AttribCall *
open_from(AttribCall *c)
{
    while (c != NULL && c->open == NULL) {
        c = c->parent;
    }
    return c;
}

/* ---- the block table: linear probing, backward-shift deletion ---- */

static inline size_t
hash_ptr(uintptr_t ptr, size_t mask)
{
    return (size_t)(((uint64_t)ptr >> 4) * 0x9E3779B97F4A7C15ull >> 17) & mask;
}

static int
blocks_resize(Attrib *a, size_t capacity)
{
    AttribBlock *fresh = calloc(capacity, sizeof(AttribBlock));
    if (fresh == NULL) {
        return -1;
    }
    size_t mask = capacity - 1;
    for (size_t i = 0; i < a->capacity; i++) {
        if (a->blocks[i].ptr != 0) {
            size_t j = hash_ptr(a->blocks[i].ptr, mask);
            while (fresh[j].ptr != 0) {
                j = (j + 1) & mask;
            }
            fresh[j] = a->blocks[i];
        }
    }
    free(a->blocks);
    a->blocks = fresh;
    a->capacity = capacity;
    return 0;
}

static AttribBlock *
blocks_find(Attrib *a, uintptr_t ptr)
{
    if (a->capacity == 0) {
        return NULL;
    }
    size_t mask = a->capacity - 1;
    for (size_t i = hash_ptr(ptr, mask);; i = (i + 1) & mask) {
        if (a->blocks[i].ptr == ptr) {
            return &a->blocks[i];
        }
        if (a->blocks[i].ptr == 0) {
            return NULL;
        }
    }
}

/* A new slot for ptr (not present); NULL when out of memory. */
static AttribBlock *
blocks_add(Attrib *a, uintptr_t ptr)
{
    /* Up to three quarters full: kept blocks cost host memory for as long
     * as they live, and probes stay short at that load. */
    if ((a->used + 1) * 4 > a->capacity * 3) {
        size_t cap = a->capacity ? a->capacity * 2 : MIN_CAPACITY;
        if (blocks_resize(a, cap) < 0) {
            return NULL;
        }
    }
    size_t mask = a->capacity - 1;
    size_t i = hash_ptr(ptr, mask);
    while (a->blocks[i].ptr != 0) {
        i = (i + 1) & mask;
    }
    a->used++;
    a->blocks[i].ptr = ptr;
    return &a->blocks[i];
}

static void
blocks_remove(Attrib *a, AttribBlock *b)
{
    size_t mask = a->capacity - 1;
    size_t hole = (size_t)(b - a->blocks);
    for (size_t i = (hole + 1) & mask; a->blocks[i].ptr != 0; i = (i + 1) & mask) {
        size_t home = hash_ptr(a->blocks[i].ptr, mask);
        /* Move it into the hole unless its home lies cyclically in (hole, i]. */
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            a->blocks[hole] = a->blocks[i];
            hole = i;
        }
    }
    memset(&a->blocks[hole], 0, sizeof(AttribBlock));
    a->used--;
    /* Host memory follows the live blocks: shrink when mostly empty (a
     * failure only keeps the larger table). */
    if (a->capacity > MIN_CAPACITY && a->used * 8 < a->capacity) {
        (void)blocks_resize(a, a->capacity / 2);
    }
}

/* ---- Calls and peaks ---- */

static AttribTop *
top_of(Attrib *a, uint64_t thread)
{
    for (int i = 0; i < a->n_tops; i++) {
        if (a->tops[i].thread == thread) {
            return &a->tops[i];
        }
    }
    return NULL;
}

/* A new highest level: its figures now, its lines' bytes later.  While the
 * level only rises, each new peak is a few stores; the Call's per-line
 * bytes are copied once, when something is freed (flush_peaks), the Call
 * ends or the peak is read: until then they are still the peak's. */
static void
snapshot_if_higher(Attrib *a, AttribCall *c)
{
    AttribPeak *p = c->table->peak;
    /* A suspended function is not running: its lines did not see the level. */
    if (p == NULL || c->open->suspended || a->level <= p->bytes) {
        return;
    }
    const AttribOpen *op = c->open;
    p->bytes = a->level;
    p->line = __atomic_load_n(&c->line, __ATOMIC_RELAXED);
    p->call = c->call;
    p->before = op->before;
    p->other = op->other;
    p->pending = c;
}

/* The pending peak's per-line bytes, copied from its Call (still open). */
static void
flush_peak(AttribPeak *p)
{
    const AttribCall *c = p->pending;
    if (c == NULL) {
        return;
    }
    const AttribOpen *op = c->open;
    /* Line by line: the table may have widened between the two. */
    for (int i = 0; i < p->n_slots; i++) {
        int s = p->first_line + i - op->first_line;
        p->held[i] = s >= 0 && s < op->n_slots ? op->live[s] : 0;
    }
    p->pending = NULL;
}

/* Before the level falls (a block freed): every pending peak copied. */
static void
flush_peaks(Attrib *a)
{
    for (AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        AttribPeak *p = o->table->peak;
        if (p != NULL && p->pending == o) {
            flush_peak(p);
        }
    }
}

static AttribPeak *
peak_new(const LineTable *table)
{
    AttribPeak *p = calloc(1, sizeof(AttribPeak) + 3 * sizeof(int64_t) * (size_t)table->n_slots);
    if (p != NULL) {
        p->kept = p->held + table->n_slots;
        p->bytes = -1;
        p->first_line = table->first_line;
        p->n_slots = table->n_slots;
    }
    return p;
}

/* ---- events (attrib_lock held) ---- */

/* A block made before we attached (or before its size came) is freed. */
static void
free_before(Attrib *a, int64_t size)
{
    flush_peaks(a);
    for (AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        o->open->before -= size;
    }
    a->level -= size;
}

/* Returns 1 when the block was known (its size too), else 0; a size of -1
 * (not known yet) leaves an unknown block awaiting its MEMLAB_SIZED. */
static int
on_free(Attrib *a, uintptr_t ptr, int64_t size)
{
    AttribBlock *b = blocks_find(a, ptr);
    if (b == NULL) {
        if (size < 0) {
            a->unsized = ptr;
            a->unsized_event = MEMLAB_FREE;
        }
        else {
            free_before(a, size);   /* made before we attached */
        }
        return 0;
    }
    size = b->size;
    flush_peaks(a);
    uint64_t mark = ++a->seq;
    int line = b->line;
    for (AttribCall *c = b->call; c != NULL; line = c->parent_line, c = c->parent) {
        if (c->open != NULL) {
            c->open->live[slot_of(c->open, line)] -= size;
            c->open->mark = mark;
        }
        AttribPeak *p = c->table->peak;
        int k = (int)(c->call & 1);
        if (p->kept_call[k] == c->call && p->kept_attach[k] == a->attaches) {
            p->kept[k * p->n_slots + peak_slot(p, line)] -= size;
        }
    }
    for (AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        if (o->open->mark == mark) {
            continue;
        }
        if (b->seq < o->start_seq) {
            o->open->before -= size;
        }
        else {
            o->open->other -= size;
        }
    }
    a->level -= size;
    call_release(b->call);
    blocks_remove(a, b);
    return 1;
}

/* A block of Call c's line made `size` more bytes alive: its table's count
 * of what its current call made and still holds (a later call starts it
 * anew; a block of an earlier call no longer counts there). */
static void
keep_made(Attrib *a, const AttribCall *c, int line, int64_t size)
{
    AttribPeak *p = c->table->peak;
    int k = (int)(c->call & 1);
    int64_t *kept = p->kept + k * p->n_slots;
    if (c->call > p->kept_call[k] || p->kept_attach[k] != a->attaches) {
        memset(kept, 0, sizeof(int64_t) * (size_t)p->n_slots);
        p->kept_call[k] = c->call;
        p->kept_attach[k] = a->attaches;
    }
    if (c->call == p->kept_call[k]) {
        kept[peak_slot(p, line)] += size;
    }
}

/* `size` more bytes of block b (seq: when it was made) are alive: charged
 * to its line and the calling lines above it, to the other open Calls as
 * alive before them or made by another thread; then the peaks. */
static void
charge(Attrib *a, const AttribBlock *b, uint64_t seq, int64_t size)
{
    uint64_t mark = ++a->seq;
    a->level += size;
    int l = b->line;
    for (AttribCall *c = b->call; c != NULL; l = c->parent_line, c = c->parent) {
        if (c->open != NULL) {
            c->open->live[slot_of(c->open, l)] += size;
            c->open->mark = mark;
        }
        keep_made(a, c, l, size);
    }
    for (AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        if (o->open->mark == mark) {
            continue;
        }
        if (seq < o->start_seq) {
            o->open->before += size;
        }
        else {
            o->open->other += size;
        }
    }
    for (AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        snapshot_if_higher(a, o);
    }
}

/* The awaited size of the last unsized ALLOC or FREE. */
static void
on_sized(Attrib *a, uintptr_t ptr, int64_t size)
{
    if (a->unsized != ptr || size <= 0) {
        return;
    }
    a->unsized = 0;
    if (a->unsized_event == MEMLAB_FREE) {
        free_before(a, size);
        return;
    }
    AttribBlock *b = blocks_find(a, ptr);
    if (b == NULL) {
        /* Its slot could not be made (failed), or it was made before we
         * attached beside another tracer: alive, with no line. */
        AttribBlock none = {ptr, 0, 0, NULL, -1};
        charge(a, &none, 0, size);
        return;
    }
    b->size = size;
    charge(a, b, b->seq, size);
}

/* Is the calling thread running Python code now?  Not on a thread Python
 * never ran on, nor on one that has a thread state but no frame: autograd's
 * device threads keep one (to run hooks) while they work for a backward()
 * called elsewhere.  Read without the GIL: these are the calling thread's
 * own fields. */
static int
runs_python_now(void)
{
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (ts == NULL) {
        return 0;
    }
#if PY_VERSION_HEX >= 0x030D0000
    return ts->current_frame != NULL;
#elif PY_VERSION_HEX >= 0x030B0000
    return ts->cframe != NULL && ts->cframe->current_frame != NULL;
#else
    return ts->frame != NULL;
#endif
}

static void
on_alloc(Attrib *a, uint64_t thread, uintptr_t ptr, int64_t size)
{
    if (blocks_find(a, ptr) != NULL) {
        /* Its free never reached us: retire the stale block first. */
        (void)on_free(a, ptr, 0);
    }
    AttribTop *top = top_of(a, thread);
    /* A thread without Python (autograd's device threads) works for a
     * backward() called on some Python thread; it cannot say which.  With
     * one thread profiling, that one; with several, no guess: another
     * thread's, for each of them.  A Python thread with no Call open here is
     * another thread. */
    AttribCall *call = top != NULL ? top->top : NULL;
    if (top == NULL && a->n_tops == 1 && !runs_python_now()) {
        call = a->tops[0].top;
    }
    AttribBlock made = {ptr, 0, ++a->seq, call,
                        call != NULL ? __atomic_load_n(&call->line, __ATOMIC_RELAXED) : -1};
    AttribBlock *b = blocks_add(a, ptr);
    if (b == NULL) {
        a->failed = 1;     /* its free will count as "before": say so */
        made.call = NULL;
    }
    else {
        *b = made;
        if (call != NULL) {
            call->refs++;
        }
    }
    if (size == 0) {
        a->unsized = ptr;      /* charged when its MEMLAB_SIZED comes */
        a->unsized_event = MEMLAB_ALLOC;
        return;
    }
    if (b != NULL) {
        b->size = size;
    }
    charge(a, &made, made.seq, size);
}

int
attrib_listener(const char *source, int device, uintptr_t ptr, int64_t size, int event)
{
    int known = 1;
    if (!__atomic_load_n(&any_attached, __ATOMIC_ACQUIRE) || ptr == 0) {
        return known;
    }
    uint64_t thread = (uint64_t)PyThread_get_thread_ident();
    lock();
    for (Attrib *a = attached; a != NULL; a = a->next) {
        if (a->device != device || strcmp(a->source->name, source) != 0) {
            continue;
        }
        switch (event) {
        case MEMLAB_ALLOC:
            on_alloc(a, thread, ptr, size);
            break;
        case MEMLAB_FREE:
            known &= on_free(a, ptr, size);
            break;
        case MEMLAB_SIZED:
            on_sized(a, ptr, size);
            break;
        default:
            break;
        }
    }
    unlock();
    return known;
}

/* Another attached Attrib of the same source and device (attrib_lock held). */
static Attrib *
sibling_of(const Attrib *a, const memlab_source *source, int device)
{
    for (Attrib *o = attached; o != NULL; o = o->next) {
        if (o != a && o->device == device && strcmp(o->source->name, source->name) == 0) {
            return o;
        }
    }
    return NULL;
}

/* ---- control ---- */

int
attrib_offered(const memlab_source *source)
{
    return source != NULL && source->listen != NULL;
}

int
attrib_attach(Attrib *a, const memlab_source *source, int device)
{
    int64_t level = 0;
    if (a->attached) {
        return 0;
    }
    if (!attrib_offered(source)) {
        return 0;
    }
    if (!fork_hooked) {
        fork_hooked = pthread_atfork(lock_for_fork, unlock_after_fork,
                                     unlock_after_fork) == 0;
    }
    lock();
    a->source = source;
    a->device = device;
    a->failed = 0;
    a->attaches++;
    a->level = 0;
    a->unsized = 0;
    /* A tracer already following this device: the source pushes to it
     * already; start from its level (and its awaited size), exactly. */
    Attrib *sibling = sibling_of(a, source, device);
    if (sibling != NULL) {
        a->level = sibling->level;
        a->unsized = sibling->unsized;
        a->unsized_event = sibling->unsized_event;
    }
    a->next = attached;
    attached = a;
    a->attached = 1;
    __atomic_store_n(&any_attached, 1, __ATOMIC_RELEASE);
    unlock();
    if (sibling != NULL) {
        return 0;
    }
    /* Outside the lock: listen() may read the allocator, whose own lock a
     * pushing thread holds while it waits for ours.  `level` is the level
     * when pushing began; what was pushed since is already in a->level. */
    if (source->listen(device, attrib_listener, &level) < 0) {
        attrib_detach(a);
        PyErr_SetString(PyExc_RuntimeError,
                        "the memory source refused to push its allocations");
        return -1;
    }
    lock();
    a->level += level;
    unlock();
    return 0;
}

void
attrib_detach(Attrib *a)
{
    lock();
    if (!a->attached) {
        unlock();
        return;
    }
    Attrib **link = &attached;
    while (*link != NULL && *link != a) {
        link = &(*link)->next;
    }
    if (*link == a) {
        *link = a->next;
    }
    a->next = NULL;
    a->attached = 0;
    if (attached == NULL) {
        __atomic_store_n(&any_attached, 0, __ATOMIC_RELEASE);
    }
    /* The last follower of this device stops the pushes (a source may pay
     * for them per allocation).  Attach and detach run with the GIL held, so
     * no attach can slip in between. */
    int last = sibling_of(a, a->source, a->device) == NULL;
    for (size_t i = 0; i < a->capacity; i++) {
        if (a->blocks[i].ptr != 0) {
            call_release(a->blocks[i].call);
        }
    }
    free(a->blocks);
    a->blocks = NULL;
    a->capacity = a->used = 0;
    /* Frames close before detach (tracer_close_all_frames); any Call still
     * open lost its frame's end: close it here. */
    flush_peaks(a);
    while (a->open != NULL) {
        AttribCall *c = a->open;
        a->open = c->open->next_open;
        free(c->open);
        c->open = NULL;
        call_release(c);
    }
    free(a->tops);
    a->tops = NULL;
    a->n_tops = a->cap_tops = 0;
    a->unsized = 0;
    unlock();
    if (last) {
        int64_t unused;
        (void)a->source->listen(a->device, NULL, &unused);
    }
}

AttribCall *
attrib_push(Attrib *a, LineTable *table, int line, int64_t call)
{
    AttribCall *c = NULL;
    if (!a->attached) {
        return NULL;
    }
    uint64_t thread = (uint64_t)PyThread_get_thread_ident();
    lock();
    AttribTop *top = top_of(a, thread);
    AttribCall *parent = top != NULL ? top->top : NULL;
    for (AttribCall *x = parent; x != NULL; x = x->parent) {
        if (x->table == table) {
            goto done;      /* recursive: the outer frame's calling line counts */
        }
    }
    if (table->peak == NULL && (table->peak = peak_new(table)) == NULL) {
        a->failed = 1;
        goto done;
    }
    if (top == NULL) {
        if (a->n_tops == a->cap_tops) {
            int cap = a->cap_tops ? a->cap_tops * 2 : 8;
            AttribTop *tops = realloc(a->tops, sizeof(AttribTop) * (size_t)cap);
            if (tops == NULL) {
                a->failed = 1;
                goto done;
            }
            a->tops = tops;
            a->cap_tops = cap;
        }
        top = &a->tops[a->n_tops++];
        top->thread = thread;
        top->top = NULL;
    }
    c = calloc(1, sizeof(AttribCall));
    AttribOpen *op = calloc(1, sizeof(AttribOpen) + sizeof(int64_t) * (size_t)table->n_slots);
    if (c == NULL || op == NULL) {
        free(c);
        free(op);
        c = NULL;
        a->failed = 1;
        if (top->top == NULL) {
            *top = a->tops[--a->n_tops];
        }
        goto done;
    }
    c->refs = 1;
    c->open = op;
    c->parent = parent;
    if (parent != NULL) {
        parent->refs++;
        c->parent_line = __atomic_load_n(&parent->line, __ATOMIC_RELAXED);
    }
    c->table = table;
    op->first_line = table->first_line;
    op->n_slots = table->n_slots;
    c->line = line;
    op->thread = thread;
    /* A number of its own: it also tells this Call from any other (the
     * blocks made during it are numbered above it). */
    c->start_seq = ++a->seq;
    c->call = call;
    table->peak->latest_start = c->start_seq;
    table->peak->latest_end = 0;
    table->peak->latest_call = call;
    table->peak->latest_attach = a->attaches;
    op->before = a->level;
    op->next_open = a->open;
    a->open = c;
    top->top = c;
    snapshot_if_higher(a, c);
done:
    unlock();
    return c;
}

void
attrib_set_line(AttribCall *c, int line)
{
    __atomic_store_n(&c->line, line, __ATOMIC_RELAXED);
}

void
attrib_pop(Attrib *a, AttribCall *c)
{
    lock();
    AttribOpen *op = c->open;
    if (op != NULL) {
        AttribCall **link = &a->open;
        while (*link != NULL && *link != c) {
            link = &(*link)->open->next_open;
        }
        if (*link == c) {
            *link = op->next_open;
        }
        AttribPeak *p = c->table->peak;
        if (p != NULL && p->pending == c) {
            flush_peak(p);
        }
        c->open = NULL;
        if (p != NULL && p->latest_start == c->start_seq) {
            p->latest_end = ++a->seq;   /* blocks made after it are numbered above */
        }
        /* The thread's top is always an open Call: its frames may end out
         * of order (tracer_drop_calls, an unwinding generator), and blocks
         * made there meanwhile must never reach a Call that has ended. */
        AttribTop *top = top_of(a, op->thread);
        if (top != NULL && top->top == c) {
            top->top = open_from(c->parent);
            if (top->top == NULL) {
                *top = a->tops[--a->n_tops];
            }
        }
        free(op);
        call_release(c);
    }
    unlock();
}

AttribPeak *
attrib_peak_copy(LineTable *table)
{
    AttribPeak *copy = NULL;
    lock();
    AttribPeak *p = table->peak;
    if (p != NULL && p->bytes >= 0) {
        flush_peak(p);
        size_t n = sizeof(AttribPeak) + sizeof(int64_t) * (size_t)p->n_slots;
        copy = malloc(n);
        if (copy != NULL) {
            memcpy(copy, p, n);
            copy->kept = NULL;
        }
    }
    unlock();
    return copy;
}

PyObject *
attrib_made_at(const char *source, int device, uintptr_t ptr, int *line)
{
    PyObject *code = NULL;
    if (ptr == 0) {
        return NULL;        /* 0 marks an empty slot of the block table */
    }
    lock();
    for (Attrib *a = attached; a != NULL && code == NULL; a = a->next) {
        if (a->device != device || strcmp(a->source->name, source) != 0) {
            continue;
        }
        const AttribBlock *b = blocks_find(a, ptr);
        if (b == NULL || b->call == NULL) {
            continue;
        }
        /* The block holds its Call, the Call its table, and the table its
         * code while the tracer is attached: take the reference under the
         * lock, before a free on another thread can drop them. */
        const LineTable *table = b->call->table;
        *line = table->first_line + table_slot(table, b->line);
        code = Py_NewRef(table->code);
    }
    unlock();
    return code;
}

void
attrib_peak_clear(LineTable *table, int forget_calls)
{
    lock();
    if (table->peak != NULL) {
        table->peak->bytes = -1;
        table->peak->pending = NULL;
        if (forget_calls) {     /* calls are numbered from 1 again */
            AttribPeak *p = table->peak;
            p->kept_call[0] = p->kept_call[1] = 0;
            memset(p->kept, 0, 2 * sizeof(int64_t) * (size_t)p->n_slots);
        }
        memset(table->peak->held, 0, sizeof(int64_t) * (size_t)table->peak->n_slots);
    }
    unlock();
}

/* Does the chain from block `b` up pass through the Call that began at
 * `start` in `table`?  Then *slot is the slot of that Call's line. */
static int
made_during(const AttribBlock *b, const LineTable *table, uint64_t start, int *slot)
{
    int line = b->line;
    for (const AttribCall *c = b->call; c != NULL; line = c->parent_line, c = c->parent) {
        if (c->table == table && c->start_seq == start) {
            *slot = table_slot(table, line);
            return 1;
        }
    }
    return 0;
}

int
attrib_live_now(const Attrib *a, const LineTable *table, AttribLive **out)
{
    int ret = -1;
    AttribLive *live = NULL;     /* Owned until handed to *out. */
    *out = NULL;
    lock();
    const AttribPeak *p = table->peak;
    if (!a->attached || p == NULL || p->latest_start == 0
        || p->latest_attach != a->attaches) {
        ret = 0;
        goto done;
    }
    live = calloc(1, sizeof(AttribLive) + sizeof(int64_t) * (size_t)table->n_slots);
    if (live == NULL) {
        goto done;
    }
    live->bytes = a->level;
    live->call = p->latest_call;
    live->first_line = table->first_line;
    live->n_slots = table->n_slots;
    int64_t during = 0;
    for (size_t i = 0; i < a->capacity; i++) {
        const AttribBlock *b = &a->blocks[i];
        int slot;
        if (b->ptr == 0 || b->seq < p->latest_start) {
            continue;            /* empty, or alive before: the remainder below */
        }
        if (made_during(b, table, p->latest_start, &slot)) {
            live->live[slot] += b->size;
            during += b->size;
        }
        else if (p->latest_end != 0 && b->seq > p->latest_end) {
            live->after += b->size;
        }
        else {
            live->other += b->size;
        }
    }
    /* Blocks made before it, and those made before we attached (not in the
     * table), are what the level holds beyond the rest. */
    live->before = a->level - during - live->other - live->after;
    *out = live;
    live = NULL;
    ret = 0;
done:
    unlock();
    free(live);
    return ret;
}

void
attrib_table_size(const Attrib *a, size_t *used, size_t *capacity)
{
    lock();
    *used = a->used;
    *capacity = a->capacity;
    unlock();
}

/* ---- suspended generators (suspended.h) ---- */

/* Make `c` not its thread's innermost Call: `below` (an open Call of that
 * thread, or NULL) is again. */
static void
top_becomes(Attrib *a, AttribCall *c, AttribCall *below)
{
    AttribTop *top = top_of(a, c->open->thread);
    if (top != NULL && top->top == c) {
        top->top = below;
        if (below == NULL) {
            *top = a->tops[--a->n_tops];
        }
    }
}

void
attrib_suspend(Attrib *a, AttribCall *c, AttribCall *below)
{
    lock();
    if (c->open != NULL) {
        c->open->suspended = 1;
        top_becomes(a, c, below);
    }
    unlock();
}

void
attrib_resume(Attrib *a, AttribCall *c)
{
    uint64_t thread = (uint64_t)PyThread_get_thread_ident();
    lock();
    if (c->open == NULL) {
        goto done;
    }
    AttribTop *top = top_of(a, thread);
    if (top == NULL) {
        if (a->n_tops == a->cap_tops) {
            int cap = a->cap_tops ? a->cap_tops * 2 : 8;
            AttribTop *tops = realloc(a->tops, sizeof(AttribTop) * (size_t)cap);
            if (tops == NULL) {
                a->failed = 1;     /* its blocks count as another thread's */
                goto done;
            }
            a->tops = tops;
            a->cap_tops = cap;
        }
        top = &a->tops[a->n_tops++];
        top->thread = thread;
    }
    top->top = c;
    c->open->thread = thread;
    c->open->suspended = 0;
    snapshot_if_higher(a, c);
done:
    unlock();
}

int
attrib_kept(const Attrib *a, const LineTable *table, int64_t call, int first_line,
            int n_slots, int64_t *out)
{
    int exact = 0;
    lock();
    const AttribPeak *p = table->peak;
    int k = (int)(call & 1);
    if (!a->attached || a->failed || p == NULL || p->latest_attach != a->attaches
        || p->kept_call[k] > call
        || (p->kept_call[k] == call && p->kept_attach[k] != a->attaches)) {
        goto done;
    }
    /* Its latest Call ran in this attach: a call that made nothing still
     * alive left its slot on an earlier call, or never set it. */
    memset(out, 0, sizeof(int64_t) * (size_t)n_slots);
    if (p->kept_call[k] == call && n_slots > 0) {
        const int64_t *kept = p->kept + k * p->n_slots;
        for (int i = 0; i < p->n_slots; i++) {
            int s = p->first_line + i - first_line;
            out[s >= 0 && s < n_slots ? s : 0] += kept[i];
        }
    }
    exact = 1;
done:
    unlock();
    return exact;
}

int64_t
attrib_level(const Attrib *a)
{
    lock();
    int64_t level = a->level;
    unlock();
    return level;
}
