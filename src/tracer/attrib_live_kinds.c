/* What is alive now around a function's latest Call, by kind and by module
 * (attrib.h): the out-of-memory post-mortem's kinds, read beside
 * attrib_live_now, split the same way. */
#include "attrib_internal.h"

#include <stdlib.h>
#include <string.h>

/* Was block b made during the Call that began at `start` in `table`? */
static int
made_in(const AttribBlock *b, const LineTable *table, uint64_t start)
{
    for (const AttribCall *c = b->call; c != NULL; c = c->parent) {
        if (c->table == table && c->start_seq == start) {
            return 1;
        }
    }
    return 0;
}

int
attrib_live_kinds(const Attrib *a, const LineTable *table, AttribLiveKinds *out)
{
    int ret = 0;
    memset(out, 0, sizeof *out);
    attrib_lock();
    const AttribPeak *p = table->peak;
    if (!a->attached || p == NULL || p->latest_start == 0
        || p->latest_attach != a->attaches) {
        goto done;
    }
    for (size_t i = 0; i < a->capacity; i++) {
        const AttribBlock *b = &a->blocks[i];
        if (b->ptr == 0) {
            continue;
        }
        int place;
        if (b->seq < p->latest_start) {
            place = ATTRIB_LIVE_BEFORE;
        }
        else if (made_in(b, table, p->latest_start)) {
            place = ATTRIB_LIVE_DURING;
            if (b->module > 0) {
                if (b->module >= out->n_mods) {
                    int n = b->module + 16;
                    int64_t *mods = realloc(out->mods, sizeof(int64_t) * (size_t)n);
                    if (mods == NULL) {
                        ret = -1;
                        goto done;
                    }
                    memset(mods + out->n_mods, 0, sizeof(int64_t) * (size_t)(n - out->n_mods));
                    out->mods = mods;
                    out->n_mods = n;
                }
                out->mods[b->module] += b->size;
            }
        }
        else if (p->latest_end != 0 && b->seq > p->latest_end) {
            place = ATTRIB_LIVE_AFTER;
        }
        else {
            place = ATTRIB_LIVE_OTHER;
        }
        if (b->kind != ATTRIB_UNTAGGED) {
            out->kinds[place][b->kind - 1] += b->size;
        }
    }
    out->known = 1;
done:
    attrib_unlock();
    if (ret < 0) {
        free(out->mods);
        memset(out, 0, sizeof *out);
    }
    return ret;
}
