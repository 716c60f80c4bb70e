/* Why the peak (attrib.h): attaching to a source, and the Calls of the
 * profiled frames.  The blocks' events are in attrib_events.c, their table
 * in attrib_blocks.c, the figures read back in attrib_read.c. */
#include "attrib_internal.h"
#include "list.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

AttribRuntime attrib_runtime;

static void lock_for_fork(void) { attrib_lock(); }
static void unlock_after_fork(void) { attrib_unlock(); }

void
attrib_call_release(AttribCall *c)
{
    while (c != NULL && --c->refs == 0) {
        AttribCall *parent = c->parent;
        attrib_open_free(c->open);
        free(c);
        c = parent;
    }
}

/* The nearest Call from c up that is still open, or NULL. */
AttribCall *
attrib_open_from(AttribCall *c)
{
    while (c != NULL && c->open == NULL) {
        c = c->parent;
    }
    return c;
}

AttribTop *
attrib_top_of(Attrib *a, uint64_t thread)
{
    for (int i = 0; i < a->n_tops; i++) {
        if (a->tops[i].thread == thread) {
            return &a->tops[i];
        }
    }
    return NULL;
}

AttribPeak *
attrib_peak_new(const LineTable *table)
{
    AttribPeak *p = calloc(1, sizeof(AttribPeak)
                           + (3 + ATTRIB_TAGGED) * sizeof(int64_t) * (size_t)table->n_slots);
    if (p != NULL) {
        p->kept = p->held + table->n_slots;
        p->klive = p->held + 3 * (size_t)table->n_slots;
        p->bytes = -1;
        p->first_line = table->first_line;
        p->n_slots = table->n_slots;
    }
    return p;
}

/* Another attached Attrib of the same source and device (attrib_lock held). */
static Attrib *
sibling_of(const Attrib *a, const memlab_source *source, int device)
{
    for (Attrib *o = attrib_runtime.attached; o != NULL; o = o->next) {
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
    if (!attrib_runtime.fork_hooked) {
        attrib_runtime.fork_hooked = pthread_atfork(lock_for_fork, unlock_after_fork,
                                     unlock_after_fork) == 0;
    }
    attrib_lock();
    a->source = source;
    a->device = device;
    a->failed = 0;
    a->attaches++;
    a->level = 0;
    a->unsized = 0;
    a->unsized_adopted = -1;
    /* A tracer already following this device: the source pushes to it
     * already; start from its level (and its awaited size), exactly. */
    Attrib *sibling = sibling_of(a, source, device);
    if (sibling != NULL) {
        a->level = sibling->level;
        a->unsized = sibling->unsized;
        a->unsized_event = sibling->unsized_event;
    }
    a->next = attrib_runtime.attached;
    attrib_runtime.attached = a;
    a->attached = 1;
    __atomic_store_n(&attrib_runtime.any_attached, 1, __ATOMIC_RELEASE);
    attrib_unlock();
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
    attrib_lock();
    a->level += level;
    attrib_unlock();
    return 0;
}

void
attrib_detach(Attrib *a)
{
    attrib_lock();
    if (!a->attached) {
        attrib_unlock();
        return;
    }
    MEMLAB_LIST_REMOVE(attrib_runtime.attached, a, next);
    a->attached = 0;
    if (attrib_runtime.attached == NULL) {
        __atomic_store_n(&attrib_runtime.any_attached, 0, __ATOMIC_RELEASE);
    }
    /* The last follower of this device stops the pushes (a source may pay
     * for them per allocation).  Attach and detach run with the GIL held, so
     * no attach can slip in between. */
    int last = sibling_of(a, a->source, a->device) == NULL;
    for (size_t i = 0; i < a->capacity; i++) {
        if (a->blocks[i].ptr != 0) {
            attrib_call_release(a->blocks[i].call);
        }
    }
    free(a->blocks);
    a->blocks = NULL;
    a->capacity = a->used = 0;
    /* Frames close before detach (tracer_close_all_frames); any Call still
     * open lost its frame's end: close it here. */
    attrib_flush_peaks(a);
    while (a->open != NULL) {
        AttribCall *c = a->open;
        a->open = c->open->next_open;
        attrib_open_free(c->open);
        c->open = NULL;
        attrib_call_release(c);
    }
    free(a->tops);
    a->tops = NULL;
    a->n_tops = a->cap_tops = 0;
    a->unsized = 0;
    free(a->peaks);
    a->peaks = NULL;
    memset(a->ktotal, 0, sizeof a->ktotal);
    a->n_peaks = a->cap_peaks = 0;
    attrib_unlock();
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
    attrib_lock();
    AttribTop *top = attrib_top_of(a, thread);
    AttribCall *parent = top != NULL ? top->top : NULL;
    for (AttribCall *x = parent; x != NULL; x = x->parent) {
        if (x->table == table) {
            goto done;      /* recursive: the outer frame's calling line counts */
        }
    }
    if (table->peak == NULL && (table->peak = attrib_peak_new(table)) == NULL) {
        a->failed = 1;
        goto done;
    }
    if (attrib_list_peak(a, table) < 0) {
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
    AttribOpen *op = calloc(1, sizeof(AttribOpen)
                            + (1 + ATTRIB_TAGGED) * sizeof(int64_t) * (size_t)table->n_slots);
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
    op->klive = op->live + table->n_slots;
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
    memcpy(op->kbefore, a->ktotal, sizeof op->kbefore);
    op->next_open = a->open;
    a->open = c;
    top->top = c;
    attrib_snapshot_if_higher(a, c);
done:
    attrib_unlock();
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
    attrib_lock();
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
            attrib_flush_peak(p);
        }
        c->open = NULL;
        if (p != NULL && p->latest_start == c->start_seq) {
            p->latest_end = ++a->seq;   /* blocks made after it are numbered above */
        }
        /* The thread's top is always an open Call: its frames may end out
         * of order (tracer_drop_calls, an unwinding generator), and blocks
         * made there meanwhile must never reach a Call that has ended. */
        AttribTop *top = attrib_top_of(a, op->thread);
        if (top != NULL && top->top == c) {
            top->top = attrib_open_from(c->parent);
            if (top->top == NULL) {
                *top = a->tops[--a->n_tops];
            }
        }
        attrib_open_free(op);
        attrib_call_release(c);
    }
    attrib_unlock();
}

/* ---- suspended generators (suspended.h) ---- */

/* Make `c` not its thread's innermost Call: `below` (an open Call of that
 * thread, or NULL) is again. */
static void
top_becomes(Attrib *a, AttribCall *c, AttribCall *below)
{
    AttribTop *top = attrib_top_of(a, c->open->thread);
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
    attrib_lock();
    if (c->open != NULL) {
        c->open->suspended = 1;
        top_becomes(a, c, below);
    }
    attrib_unlock();
}

void
attrib_resume(Attrib *a, AttribCall *c)
{
    uint64_t thread = (uint64_t)PyThread_get_thread_ident();
    attrib_lock();
    if (c->open == NULL) {
        goto done;
    }
    AttribTop *top = attrib_top_of(a, thread);
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
    attrib_snapshot_if_higher(a, c);
done:
    attrib_unlock();
}

