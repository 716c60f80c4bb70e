/* What the sources push (attrib.h): each block made, freed or sized, on
 * whichever thread, without the GIL; and the peaks they raise. */
#include "attrib_internal.h"

#include <string.h>

/* A new highest level: its figures now, its lines' bytes later.  While the
 * level only rises, each new peak is a few stores; the Call's per-line
 * bytes are copied once, when something is freed (attrib_flush_peaks), the Call
 * ends or the peak is read: until then they are still the peak's. */
void
attrib_snapshot_if_higher(Attrib *a, AttribCall *c)
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
    p->seq = a->seq;
    p->start_seq = c->start_seq;
    p->attach = a->attaches;
    p->call_first_line = op->first_line;
    p->call_n_slots = op->n_slots;
}

/* The pending peak's per-line bytes, copied from its Call (still open). */
void
attrib_flush_peak(AttribPeak *p)
{
    const AttribCall *c = p->pending;
    if (c == NULL) {
        return;
    }
    const AttribOpen *op = c->open;
    /* Line by line: the table may have widened between the two. */
    for (int i = 0; i < p->n_slots; i++) {
        int s = p->first_line + i - op->first_line;
        int in = s >= 0 && s < op->n_slots;
        p->held[i] = in ? op->live[s] : 0;
        for (int k = 0; k < ATTRIB_TAGGED; k++) {
            p->klive[i * ATTRIB_TAGGED + k] = in ? op->klive[s * ATTRIB_TAGGED + k] : 0;
        }
    }
    /* Tags and frees flush first: until then only untagged blocks came. */
    memcpy(p->kbefore, op->kbefore, sizeof p->kbefore);
    memcpy(p->kother, op->kother, sizeof p->kother);
    attrib_module_flush(p, op);
    p->pending = NULL;
}

/* Before the level falls (a block freed): every pending peak copied. */
void
attrib_flush_peaks(Attrib *a)
{
    for (AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        AttribPeak *p = o->table->peak;
        if (p != NULL && p->pending == o) {
            attrib_flush_peak(p);
        }
    }
}

/* ---- events (attrib_lock held) ---- */

/* A block made before we attached (or before its size came) is freed. */
static void
free_before(Attrib *a, int64_t size)
{
    attrib_flush_peaks(a);
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
    AttribBlock *b = attrib_blocks_find(a, ptr);
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
    attrib_flush_peaks(a);
    if (b->kind != ATTRIB_UNTAGGED) {
        attrib_kinds_free(a, b);
    }
    if (b->adopted) {
        /* Its size was Python's word: the source's, when it differs (or is
         * not told yet), moves the level; the kinds then were not exact. */
        if (size < 0) {
            a->unsized = ptr;
            a->unsized_event = MEMLAB_FREE;
            a->unsized_adopted = b->size;
        }
        else if (size > 0 && size != b->size) {   /* 0: a stale block retired */
            free_before(a, size - b->size);
            a->kinds_inexact = "a storage's size differs from its block's";
        }
    }
    int told = !b->adopted || size >= 0;
    size = b->size;
    uint64_t mark = ++a->seq;
    int line = b->line;
    for (AttribCall *c = b->call; c != NULL; line = c->parent_line, c = c->parent) {
        if (c->open != NULL) {
            c->open->live[slot_of(c->open, line)] -= size;
            c->open->mark = mark;
            if (b->module > 0 && b->module < c->open->n_mods) {
                c->open->mlive[b->module] -= size;
            }
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
    attrib_call_release(b->call);
    attrib_blocks_remove(a, b);
    return told;
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
            if (b->module > 0) {
                attrib_module_add(a, c->open, b->module, size);
            }
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
    if (b->kind != ATTRIB_UNTAGGED) {
        attrib_kinds_charge(a, b);      /* tagged before its size came */
    }
    for (AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        attrib_snapshot_if_higher(a, o);
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
        int64_t adopted = a->unsized_adopted;
        a->unsized_adopted = -1;
        if (adopted < 0) {
            free_before(a, size);
        }
        else if (size != adopted) {     /* its assumed size already left */
            free_before(a, size - adopted);
            a->kinds_inexact = "a storage's size differs from its block's";
        }
        return;
    }
    AttribBlock *b = attrib_blocks_find(a, ptr);
    if (b == NULL) {
        /* Its slot could not be made (failed), or it was made before we
         * attached beside another tracer: alive, with no line. */
        AttribBlock none = {ptr, 0, 0, NULL, -1, ATTRIB_UNTAGGED, 0, 0, 0};
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
    if (attrib_blocks_find(a, ptr) != NULL) {
        /* Its free never reached us: retire the stale block first. */
        (void)on_free(a, ptr, 0);
    }
    AttribTop *top = attrib_top_of(a, thread);
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
                        call != NULL ? __atomic_load_n(&call->line, __ATOMIC_RELAXED) : -1,
                        ATTRIB_UNTAGGED, 0, 0, call != NULL ? attrib_module_now() : 0};
    AttribBlock *b = attrib_blocks_add(a, ptr);
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
    if (!__atomic_load_n(&attrib_runtime.any_attached, __ATOMIC_ACQUIRE) || ptr == 0) {
        return known;
    }
    uint64_t thread = (uint64_t)PyThread_get_thread_ident();
    attrib_lock();
    for (Attrib *a = attrib_runtime.attached; a != NULL; a = a->next) {
        /* the shim passes its source's static name: the pointer matches */
        if (a->device != device
            || (a->source->name != source && strcmp(a->source->name, source) != 0)) {
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
    attrib_unlock();
    return known;
}

