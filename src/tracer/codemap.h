/* Registered code objects: code pointer -> LineTable, in registration order. */
#ifndef MEMLAB_CODEMAP_H
#define MEMLAB_CODEMAP_H

#include "linetable.h"

typedef struct {
    LineTable **tables;    /* Owned, with each table: registration order */
    int n_tables;
    int cap_tables;
    int *slots;            /* Owned. open-addressing index into tables, -1 empty */
    int n_slots;           /* power of two, > 2 * n_tables */
} CodeMap;

void codemap_init(CodeMap *map);
void codemap_dealloc(CodeMap *map);

/* Hot path: the table registered for `code`, or NULL. */
static inline LineTable *
codemap_get(const CodeMap *map, PyObject *code)
{
    if (map->n_slots == 0) {
        return NULL;
    }
    size_t mask = (size_t)map->n_slots - 1;
    size_t i = ((size_t)code >> 4) & mask;
    for (;;) {
        int idx = map->slots[i];
        if (idx < 0) {
            return NULL;
        }
        if (map->tables[idx]->code == code) {
            return map->tables[idx];
        }
        i = (i + 1) & mask;
    }
}

/* Registers `code` (no-op if present).  Returns the table, or NULL with an
 * exception set.  *added tells whether it is new. */
LineTable *codemap_add(CodeMap *map, PyObject *code, int n_columns, int *added);

#endif /* MEMLAB_CODEMAP_H */
