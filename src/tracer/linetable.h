/* Per-code-object aggregation: one record per source line, O(lines). */
#ifndef MEMLAB_LINETABLE_H
#define MEMLAB_LINETABLE_H

#include "compat.h"
#include <stdint.h>

/* Saturating int64 arithmetic for every figure made from readings: a Python
 * source may report any int64, and a delta or a sum of extremes must stay
 * defined and keep its sign rather than wrap. */
static inline int64_t
memlab_add_sat(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b) {
        return INT64_MAX;
    }
    if (b < 0 && a < INT64_MIN - b) {
        return INT64_MIN;
    }
    return a + b;
}

static inline int64_t
memlab_sub_sat(int64_t a, int64_t b)
{
    if (b < 0 && a > INT64_MAX + b) {
        return INT64_MAX;
    }
    if (b > 0 && a < INT64_MIN + b) {
        return INT64_MIN;
    }
    return a - b;
}

/* How a column folds interval figures together, and executions together. */
typedef enum { FOLD_MAX = 0, FOLD_SUM = 1 } memlab_fold;

/* Figures for every line of one registered code object. */
typedef struct {
    PyObject *code;        /* Owned. The code object; keys this table. */
    int first_line;        /* line number of slot 0 */
    int n_slots;           /* lines covered, first_line .. first_line + n_slots - 1 */
    int n_columns;
    int64_t *hits;         /* Owned. n_slots: executions of the line */
    int64_t *growth;       /* Owned. n_slots: summed (level at end - at start) */
    int64_t *values;       /* Owned. n_slots * n_columns, folded over executions */
    char *seen;            /* Owned. n_slots: 1 once the line committed anything */
    int64_t commits;       /* commits ever: tells which calls ran a line */
    struct CallFigures *calls;  /* Owned. per-call figures (callfigures.c), or NULL */
    struct AttribPeak *peak;    /* Owned. what was alive at its peak (attrib.h), or NULL */
} LineTable;

/* Returns NULL with MemoryError set. */
LineTable *linetable_new(PyObject *code, int n_columns);
void linetable_free(LineTable *table);
void linetable_clear(LineTable *table);

/* Fold one line execution's figures in.  Hot path: returns -1 on memory
 * failure without setting an exception. */
int linetable_commit(LineTable *table, int line, int counted, int64_t growth,
                     const int64_t *values, const memlab_fold *folds);

/* {lineno: (hits, growth, (values...))}; NULL with an exception set. */
PyObject *linetable_to_dict(const LineTable *table);

/* One line's (hits, growth, (values...)); NULL with an exception set. */
PyObject *linetable_figures(int64_t hits, int64_t growth, const int64_t *values,
                            int n_columns);

/* A new table (no code, no per-call figures) holding this one's figures; this
 * one is left empty over the same lines.  NULL when out of memory (no
 * exception set; nothing changed). */
LineTable *linetable_take(LineTable *table);

#endif /* MEMLAB_LINETABLE_H */
