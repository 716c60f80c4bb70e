/* The figures read back (attrib.h): a function's peak, what is alive now
 * around its latest call, what its calls made and still hold, the level. */
#include "attrib_internal.h"

#include <stdlib.h>
#include <string.h>

AttribPeak *
attrib_peak_copy(LineTable *table)
{
    AttribPeak *copy = NULL;
    attrib_lock();
    AttribPeak *p = table->peak;
    if (p != NULL && p->bytes >= 0) {
        attrib_flush_peak(p);
        /* One allocation (the caller frees it with free()): held[], the
         * kinds per line, then the modules and their kinds. */
        size_t n = (size_t)p->n_slots;
        size_t words = (1 + ATTRIB_TAGGED) * (n + (size_t)p->n_mods);
        copy = malloc(sizeof(AttribPeak) + sizeof(int64_t) * words);
        if (copy != NULL) {
            memcpy(copy, p, sizeof(AttribPeak) + sizeof(int64_t) * n);
            copy->kept = NULL;
            copy->klive = copy->held + n;
            memcpy(copy->klive, p->klive, ATTRIB_TAGGED * sizeof(int64_t) * n);
            copy->mheld = copy->klive + ATTRIB_TAGGED * n;
            copy->mkheld = copy->mheld + p->n_mods;
            if (p->n_mods > 0) {
                memcpy(copy->mheld, p->mheld, sizeof(int64_t) * (size_t)p->n_mods);
                memcpy(copy->mkheld, p->mkheld,
                       sizeof(int64_t) * ATTRIB_TAGGED * (size_t)p->n_mods);
            }
        }
    }
    attrib_unlock();
    return copy;
}

PyObject *
attrib_made_at(const char *source, int device, uintptr_t ptr, int *line)
{
    PyObject *code = NULL;
    if (ptr == 0) {
        return NULL;        /* 0 marks an empty slot of the block table */
    }
    attrib_lock();
    for (Attrib *a = attrib_runtime.attached; a != NULL && code == NULL; a = a->next) {
        if (a->device != device || strcmp(a->source->name, source) != 0) {
            continue;
        }
        const AttribBlock *b = attrib_blocks_find(a, ptr);
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
    attrib_unlock();
    return code;
}

void
attrib_peak_clear(LineTable *table, int forget_calls)
{
    attrib_lock();
    if (table->peak != NULL) {
        table->peak->bytes = -1;
        table->peak->pending = NULL;
        if (forget_calls) {     /* calls are numbered from 1 again */
            AttribPeak *p = table->peak;
            p->kept_call[0] = p->kept_call[1] = 0;
            memset(p->kept, 0, 2 * sizeof(int64_t) * (size_t)p->n_slots);
        }
        AttribPeak *p = table->peak;
        memset(p->held, 0, sizeof(int64_t) * (size_t)p->n_slots);
        memset(p->klive, 0, ATTRIB_TAGGED * sizeof(int64_t) * (size_t)p->n_slots);
        memset(p->kbefore, 0, sizeof p->kbefore);
        memset(p->kother, 0, sizeof p->kother);
        if (p->n_mods > 0) {
            memset(p->mheld, 0, sizeof(int64_t) * (size_t)p->n_mods);
            memset(p->mkheld, 0, sizeof(int64_t) * ATTRIB_TAGGED * (size_t)p->n_mods);
        }
    }
    attrib_unlock();
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
    attrib_lock();
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
    attrib_unlock();
    free(live);
    return ret;
}

void
attrib_table_size(const Attrib *a, size_t *used, size_t *capacity)
{
    attrib_lock();
    *used = a->used;
    *capacity = a->capacity;
    attrib_unlock();
}

int
attrib_kept(const Attrib *a, const LineTable *table, int64_t call, int first_line,
            int n_slots, int64_t *out)
{
    int exact = 0;
    attrib_lock();
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
    attrib_unlock();
    return exact;
}
int64_t
attrib_level(const Attrib *a)
{
    attrib_lock();
    int64_t level = a->level;
    attrib_unlock();
    return level;
}
