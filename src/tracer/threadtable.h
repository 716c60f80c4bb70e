/* One record per thread, for the per-thread stacks and the push readers. */
#ifndef MEMLAB_THREADTABLE_H
#define MEMLAB_THREADTABLE_H

#include "compat.h"
#include <stdint.h>

/* Records keyed by PyThreadState_GetID(): never reused, unlike a
 * PyThreadState's address.  Threads are few, so a short array with a cache
 * of the record used last.  Records are allocated one by one and never
 * move: a Python source may let another thread add a record while this one
 * holds a pointer to its own.  A record that `idle` accepts (its thread has
 * nothing open in it) may change hands to another thread. */
typedef struct {
    void **records;        /* Owned, and each record too.  Each begins with
                              its thread's id, a uint64_t. */
    int n;
    int cap;
    int last;              /* index of the record used last */
    size_t size;           /* bytes per record */
    int (*idle)(const void *record);
} ThreadTable;

void threadtable_init(ThreadTable *t, size_t size, int (*idle)(const void *record));

/* `thread`'s record: its own, else an idle one handed over, else a new one,
 * zeroed, with *made set to 1.  NULL when out of memory. */
void *threadtable_get(ThreadTable *t, uint64_t thread, int *made);

/* `thread`'s own record, or NULL; makes none. */
void *threadtable_find(const ThreadTable *t, uint64_t thread);

/* Free every record, each first through `release` unless it is NULL; the
 * table is then empty and may be used again. */
void threadtable_clear(ThreadTable *t, void (*release)(void *record));

#endif /* MEMLAB_THREADTABLE_H */
