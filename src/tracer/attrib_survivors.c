/* What each line of a function made in its earlier calls and is still alive
 * now (attrib.h: attrib_survivors): the test that tells a line that grows
 * every call from one that keeps a bounded cache (a deque of the last few
 * results), whose blocks outlive a call or two and are then freed. */
#include "attrib_internal.h"

#include <stdlib.h>

/* One live block as the function's line and call it belongs to. */
typedef struct {
    int slot;
    int64_t call;
    int64_t size;
} Survivor;

static int
by_slot_then_call(const void *x, const void *y)
{
    const Survivor *a = x, *b = y;
    if (a->slot != b->slot) {
        return a->slot < b->slot ? -1 : 1;
    }
    return a->call < b->call ? -1 : a->call > b->call;
}

/* The Call of `table` a block belongs to (its own, or the enclosing one on
 * its thread, by the line that call was on when the inner one began), and
 * that line; NULL where the block was made outside any Call of the table. */
static const AttribCall *
call_of(const AttribBlock *b, const LineTable *table, int *line)
{
    const AttribCall *c = b->call;
    *line = b->line;
    while (c != NULL && c->table != table) {
        *line = c->parent_line;
        c = c->parent;
    }
    return c;
}

int
attrib_survivors(const Attrib *a, const LineTable *table, int64_t from, int64_t to,
                 int first_line, int n_slots, int64_t *out)
{
    if (from > to || n_slots <= 0) {
        return 0;
    }
    attrib_lock();
    if (!a->attached || a->failed) {
        attrib_unlock();
        return 0;
    }
    /* Plain malloc under the lock (no torch, no Python): the table cannot
     * change size while it is walked. */
    Survivor *found = malloc((a->used ? a->used : 1) * sizeof(Survivor));
    size_t n = 0;
    if (found != NULL) {
        for (size_t i = 0; i < a->capacity; i++) {
            const AttribBlock *b = &a->blocks[i];
            int line;
            const AttribCall *c = b->ptr != 0 ? call_of(b, table, &line) : NULL;
            if (c != NULL && c->call >= from && c->call <= to && n < a->used) {
                int s = line - first_line;
                found[n++] = (Survivor){s >= 0 && s < n_slots ? s : 0, c->call, b->size};
            }
        }
    }
    attrib_unlock();
    if (found == NULL) {
        return 0;
    }
    qsort(found, n, sizeof(Survivor), by_slot_then_call);
    const int64_t wanted = to - from + 1;
    for (int s = 0; s < n_slots; s++) {
        out[s] = 0;
    }
    /* Per line: the least over the calls, 0 unless every call left some. */
    for (size_t i = 0; i < n;) {
        int slot = found[i].slot;
        int64_t calls = 0, least = INT64_MAX;
        while (i < n && found[i].slot == slot) {
            int64_t call = found[i].call, bytes = 0;
            while (i < n && found[i].slot == slot && found[i].call == call) {
                bytes += found[i++].size;
            }
            calls++;
            if (bytes < least) {
                least = bytes;
            }
        }
        out[slot] = calls == wanted ? least : 0;
    }
    free(found);
    return 1;
}
