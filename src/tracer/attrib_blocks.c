/* The table of live blocks (attrib_internal.h): open addressing with
 * linear probing and backward-shift deletion, keyed by the block's start. */
#include "attrib_internal.h"

#include <stdlib.h>
#include <string.h>

static inline size_t
hash_ptr(uintptr_t ptr, size_t mask)
{
    return (size_t)(((uint64_t)ptr >> 4) * 0x9E3779B97F4A7C15ull >> 17) & mask;
}

int
attrib_blocks_resize(Attrib *a, size_t capacity)
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

AttribBlock *
attrib_blocks_find(Attrib *a, uintptr_t ptr)
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
AttribBlock *
attrib_blocks_add(Attrib *a, uintptr_t ptr)
{
    /* Up to three quarters full: kept blocks cost host memory for as long
     * as they live, and probes stay short at that load. */
    if ((a->used + 1) * 4 > a->capacity * 3) {
        size_t cap = a->capacity ? a->capacity * 2 : MIN_CAPACITY;
        if (attrib_blocks_resize(a, cap) < 0) {
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

void
attrib_blocks_remove(Attrib *a, AttribBlock *b)
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
        (void)attrib_blocks_resize(a, a->capacity / 2);
    }
}

