#include "threadtable.h"

#include <stdlib.h>

static uint64_t
record_thread(const void *record)
{
    return *(const uint64_t *)record;
}

void
threadtable_init(ThreadTable *t, size_t size, int (*idle)(const void *record))
{
    t->records = NULL;
    t->n = t->cap = t->last = 0;
    t->size = size;
    t->idle = idle;
}

void *
threadtable_find(const ThreadTable *t, uint64_t thread)
{
    for (int i = 0; i < t->n; i++) {
        if (record_thread(t->records[i]) == thread) {
            return t->records[i];
        }
    }
    return NULL;
}

void *
threadtable_get(ThreadTable *t, uint64_t thread, int *made)
{
    *made = 0;
    if (t->n > 0 && record_thread(t->records[t->last]) == thread) {
        return t->records[t->last];
    }
    int idle = -1;
    for (int i = 0; i < t->n; i++) {
        if (record_thread(t->records[i]) == thread) {
            t->last = i;
            return t->records[i];
        }
        if (idle < 0 && t->idle(t->records[i])) {
            idle = i;
        }
    }
    if (idle < 0) {
        if (t->n == t->cap) {
            int cap = t->cap ? 2 * t->cap : 4;
            void **grown = realloc(t->records, sizeof(void *) * (size_t)cap);
            if (grown == NULL) {
                return NULL;
            }
            t->records = grown;
            t->cap = cap;
        }
        void *fresh = calloc(1, t->size);
        if (fresh == NULL) {
            return NULL;
        }
        idle = t->n++;
        t->records[idle] = fresh;
        *made = 1;
    }
    *(uint64_t *)t->records[idle] = thread;
    t->last = idle;
    return t->records[idle];
}

void
threadtable_clear(ThreadTable *t, void (*release)(void *record))
{
    for (int i = 0; i < t->n; i++) {
        if (release != NULL) {
            release(t->records[i]);
        }
        free(t->records[i]);
    }
    free(t->records);
    threadtable_init(t, t->size, t->idle);
}
