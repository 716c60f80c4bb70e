#include "codemap.h"

#include <stdlib.h>

void
codemap_init(CodeMap *map)
{
    map->tables = NULL;
    map->n_tables = map->cap_tables = 0;
    map->slots = NULL;
    map->n_slots = 0;
}

void
codemap_dealloc(CodeMap *map)
{
    for (int i = 0; i < map->n_tables; i++) {
        linetable_free(map->tables[i]);
    }
    free(map->tables);
    free(map->slots);
    codemap_init(map);
}

static void
codemap_place(CodeMap *map, int idx)
{
    size_t mask = (size_t)map->n_slots - 1;
    size_t i = ((size_t)map->tables[idx]->code >> 4) & mask;
    while (map->slots[i] >= 0) {
        i = (i + 1) & mask;
    }
    map->slots[i] = idx;
}

/* Rebuild the index with room for at least `n` tables at load <= 1/2. */
static int
codemap_reindex(CodeMap *map, int n)
{
    int n_slots = 8;
    while (n_slots < 2 * n + 2) {
        n_slots *= 2;
    }
    int *slots = malloc(sizeof(int) * (size_t)n_slots);
    if (slots == NULL) {
        return -1;
    }
    for (int i = 0; i < n_slots; i++) {
        slots[i] = -1;
    }
    free(map->slots);
    map->slots = slots;
    map->n_slots = n_slots;
    for (int idx = 0; idx < map->n_tables; idx++) {
        codemap_place(map, idx);
    }
    return 0;
}

LineTable *
codemap_add(CodeMap *map, PyObject *code, int n_columns, int *added)
{
    LineTable *table = codemap_get(map, code);
    *added = 0;
    if (table != NULL) {
        return table;
    }
    if (map->n_tables == map->cap_tables) {
        int cap = map->cap_tables ? 2 * map->cap_tables : 4;
        LineTable **tables = realloc(map->tables, sizeof(LineTable *) * (size_t)cap);
        if (tables == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        map->tables = tables;
        map->cap_tables = cap;
    }
    if (2 * (map->n_tables + 1) + 2 > map->n_slots
            && codemap_reindex(map, map->n_tables + 1) < 0) {
        PyErr_NoMemory();
        return NULL;
    }
    table = linetable_new(code, n_columns);
    if (table == NULL) {
        return NULL;
    }
    map->tables[map->n_tables] = table;
    codemap_place(map, map->n_tables);
    map->n_tables++;
    *added = 1;
    return table;
}
