/* What the followed blocks are (attrib.h): Python tags live blocks with a
 * kind; their bytes move between the kinds' totals of every open Call and,
 * retroactively, of every peak taken while they were alive.  Untagged bytes
 * are the rest of each place (before the call, a line, another thread), so
 * the kinds of a peak always sum to it. */
#include "attrib_internal.h"

#include <stdlib.h>
#include <string.h>

int
attrib_list_peak(Attrib *a, LineTable *table)
{
    if (table->peak->listed == a->attaches) {
        return 0;
    }
    if (a->n_peaks == a->cap_peaks) {
        int cap = a->cap_peaks ? a->cap_peaks * 2 : 8;
        LineTable **peaks = realloc(a->peaks, sizeof(LineTable *) * (size_t)cap);
        if (peaks == NULL) {
            return -1;
        }
        a->peaks = peaks;
        a->cap_peaks = cap;
    }
    a->peaks[a->n_peaks++] = table;
    table->peak->listed = a->attaches;
    return 0;
}

static void
move_kind(int64_t *k, int from, int to, int64_t size)
{
    if (from != ATTRIB_UNTAGGED) {
        k[from - 1] -= size;
    }
    if (to != ATTRIB_UNTAGGED) {
        k[to - 1] += size;
    }
}

static int64_t
sum_kinds(const int64_t *k)
{
    int64_t sum = 0;
    for (int i = 0; i < ATTRIB_TAGGED; i++) {
        sum += k[i];
    }
    return sum;
}

/* Block b's bytes move from kind `from` to `to` in every open Call, in the
 * place charge() put them: its line in each Call of its chain, else before
 * or another thread's. */
static void
move_in_calls(Attrib *a, const AttribBlock *b, int from, int to)
{
    uint64_t mark = ++a->seq;
    int line = b->line;
    for (AttribCall *c = b->call; c != NULL; line = c->parent_line, c = c->parent) {
        if (c->open != NULL) {
            AttribOpen *op = c->open;
            move_kind(op->klive + (size_t)slot_of(op, line) * ATTRIB_TAGGED, from, to, b->size);
            attrib_module_kind(op->mklive, op->n_mods, b->module, from, to, b->size);
            op->mark = mark;
        }
    }
    for (AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        if (o->open->mark != mark) {
            move_kind(b->seq < o->start_seq ? o->open->kbefore : o->open->kother, from, to,
                      b->size);
        }
    }
    move_kind(a->ktotal, from, to, b->size);
}

void
attrib_kinds_free(Attrib *a, const AttribBlock *b)
{
    move_in_calls(a, b, b->kind, ATTRIB_UNTAGGED);
}

void
attrib_kinds_charge(Attrib *a, const AttribBlock *b)
{
    move_in_calls(a, b, ATTRIB_UNTAGGED, b->kind);
}

/* Where block b was counted in peak p (of `table`): its line's kinds when
 * its chain passes through the peak's Call (mapped as attrib_flush_peak
 * maps the Call's slots; NULL where that drops the line; *during set, its
 * module's kinds hold it too), else before or another thread's. */
static int64_t *
peak_place(AttribPeak *p, const LineTable *table, const AttribBlock *b, int *during)
{
    int line = b->line;
    for (const AttribCall *c = b->call; c != NULL; line = c->parent_line, c = c->parent) {
        if (c->table == table && c->start_seq == p->start_seq) {
            *during = 1;
            int s = line - p->call_first_line;
            if (s < 0 || s >= p->call_n_slots) {
                s = 0;
            }
            int i = p->call_first_line + s - p->first_line;
            return i >= 0 && i < p->n_slots ? p->klive + (size_t)i * ATTRIB_TAGGED : NULL;
        }
    }
    return b->seq < p->start_seq ? p->kbefore : p->kother;
}

/* Is there room for `size` more tagged bytes among those alive before every
 * open Call and every peak of this attach (a block taken in was alive
 * before all of them)? */
static int
room_before(const Attrib *a, int64_t size)
{
    if (a->level - sum_kinds(a->ktotal) < size) {
        return 0;
    }
    for (const AttribCall *o = a->open; o != NULL; o = o->open->next_open) {
        if (o->open->before - sum_kinds(o->open->kbefore) < size) {
            return 0;
        }
    }
    for (int i = 0; i < a->n_peaks; i++) {
        const AttribPeak *p = a->peaks[i]->peak;
        if (p->bytes >= 0 && p->attach == a->attaches
            && p->before - sum_kinds(p->kbefore) < size) {
            return 0;
        }
    }
    return 1;
}

static int
tag_one(Attrib *a, uintptr_t ptr, int64_t size, int kind, int only_from, int back)
{
    AttribBlock *b = attrib_blocks_find(a, ptr);
    if (b == NULL) {
        if (size <= 0 || kind == ATTRIB_UNTAGGED || only_from > ATTRIB_UNTAGGED) {
            return 0;
        }
        if (!room_before(a, size)) {
            a->kinds_inexact = "a tagged storage is not one the memory source counts "
                               "(mapped or foreign memory), or is larger than its block";
            return 0;
        }
        b = attrib_blocks_add(a, ptr);
        if (b == NULL) {
            a->kinds_inexact = "memory ran out while tagging blocks";
            return 0;
        }
        *b = (AttribBlock){ptr, size, 0, NULL, -1, ATTRIB_UNTAGGED, 1, 0, 0};
    }
    if (b->kind == kind || (only_from >= 0 && b->kind != only_from)) {
        return 0;
    }
    if (b->size <= 0) {
        /* Its size comes at the source's next event (CUDA): counted as this
         * kind from then (charge); no peak held it before. */
        b->kind = (uint8_t)kind;
        return 1;
    }
    int from = b->kind;
    move_in_calls(a, b, from, kind);
    /* A block whose kind changed from some moment on has no one kind to
     * move at the peaks before: they keep what they were told then. */
    back = back && !b->settled;
    b->settled |= !back;
    for (int i = 0; back && i < a->n_peaks; i++) {
        LineTable *table = a->peaks[i];
        AttribPeak *p = table->peak;
        if (p->bytes < 0 || p->attach != a->attaches || b->seq > p->seq) {
            continue;
        }
        int during = 0;
        int64_t *place = peak_place(p, table, b, &during);
        if (place != NULL) {
            move_kind(place, from, kind, b->size);
        }
        if (during) {
            attrib_module_kind(p->mkheld, p->n_mods, b->module, from, kind, b->size);
        }
    }
    b->kind = (uint8_t)kind;
    return 1;
}

Py_ssize_t
attrib_tag(Attrib *a, int kind, int only_from, int back, const uintptr_t *ptrs,
           const int64_t *sizes, Py_ssize_t n)
{
    Py_ssize_t tagged = 0;
    attrib_lock();
    if (a->attached) {
        /* Pending peaks first: their figures are still their Calls'. */
        attrib_flush_peaks(a);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (ptrs[i] != 0) {
                tagged += tag_one(a, ptrs[i], sizes[i], kind, only_from, back);
            }
        }
    }
    attrib_unlock();
    return tagged;
}

const char *
attrib_kinds_missing(const Attrib *a)
{
    attrib_lock();
    const char *why = a->kinds_inexact;
    attrib_unlock();
    return why;
}
