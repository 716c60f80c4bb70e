/* Figures per outermost call: the first call kept apart, and per line the
 * least growth of one later call (see callfigures.h). */
#include "callfigures.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void
release_growth(CallFigures *f)
{
    free(f->growth_before);
    free(f->least_growth);
    free(f->last_growth);
    free(f->deferred_growth);
    f->growth_before = f->least_growth = f->last_growth = f->deferred_growth = NULL;
    f->n_slots = 0;
}

static void
release_tops(CallFigures *f)
{
    free(f->later_top);
    free(f->later_start);
    f->later_top = f->later_start = NULL;
    f->n_tops = 0;
}

void
callfigures_free(CallFigures *f)
{
    if (f == NULL) {
        return;
    }
    linetable_free(f->first);
    release_growth(f);
    release_tops(f);
    free(f);
}

void
callfigures_clear(LineTable *table)
{
    callfigures_free(table->calls);
    table->calls = NULL;
    table->commits = 0;
}

void
callfigures_rotate(LineTable *table)
{
    CallFigures *f = table->calls;
    table->commits = 0;
    if (f == NULL) {
        return;
    }
    linetable_free(f->first);
    f->first = NULL;
    f->first_start = -1;
    release_tops(f);          /* the table's figures start over */
    f->commits_seen = 0;
    if (f->growth_before != NULL) {
        memset(f->growth_before, 0, (size_t)f->n_slots * sizeof(int64_t));
    }
}

void
callfigures_clear_clock(CallClock *clock)
{
    clock->started = 0;
    clock->start_ok = 0;
    clock->ended = 0;
    clock->start_level = 0;
    clock->end_level = 0;
}

/* Lay the growth arrays over the table's lines (it widens when a line outside
 * its span runs).  A slot new to them ran only in the call that just ended:
 * nothing before it, and no growth in the calls before. */
static int
cover_table(CallFigures *f, const LineTable *t)
{
    if (f->growth_before != NULL && f->first_line == t->first_line
        && f->n_slots == t->n_slots) {
        return 0;
    }
    size_t n = (size_t)t->n_slots;
    int64_t *before = calloc(n, sizeof(int64_t));
    int64_t *least = calloc(n, sizeof(int64_t));
    int64_t *last = calloc(n, sizeof(int64_t));
    int64_t *deferred = calloc(n, sizeof(int64_t));
    if (before == NULL || least == NULL || last == NULL || deferred == NULL) {
        free(before);
        free(least);
        free(last);
        free(deferred);
        return -1;
    }
    if (f->growth_before != NULL) {
        /* the table only widens: the old span lies inside the new one */
        size_t shift = (size_t)(f->first_line - t->first_line), old = (size_t)f->n_slots;
        memcpy(before + shift, f->growth_before, old * sizeof(int64_t));
        memcpy(least + shift, f->least_growth, old * sizeof(int64_t));
        memcpy(last + shift, f->last_growth, old * sizeof(int64_t));
        memcpy(deferred + shift, f->deferred_growth, old * sizeof(int64_t));
    }
    release_growth(f);
    f->growth_before = before;
    f->least_growth = least;
    f->last_growth = last;
    f->deferred_growth = deferred;
    f->first_line = t->first_line;
    f->n_slots = t->n_slots;
    return 0;
}

/* A later call of `t` ended, begun at `start` (-1: not read): for each
 * column whose highest figure over the table's lines rose in it, this call's
 * start is the later calls' (ties keep the earlier call). */
static int
note_later_start(CallFigures *f, const LineTable *t, int64_t start)
{
    int n = t->n_columns;
    if (f->n_tops != n) {
        release_tops(f);
        f->later_top = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        f->later_start = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        if (f->later_top == NULL || f->later_start == NULL) {
            release_tops(f);
            return -1;
        }
        for (int c = 0; c < n; c++) {
            f->later_top[c] = INT64_MIN;
            f->later_start[c] = -1;
        }
        f->n_tops = n;
    }
    for (int s = 0; s < t->n_slots; s++) {
        if (!t->seen[s]) {
            continue;
        }
        const int64_t *row = t->values + (size_t)s * (size_t)n;
        for (int c = 0; c < n; c++) {
            if (row[c] > f->later_top[c]) {
                f->later_top[c] = row[c];
                f->later_start[c] = start;
            }
        }
    }
    return 0;
}

/* One table's step at the end of a call it took part in, begun at `start`
 * (-1: not read). */
static int
table_end_call(LineTable *t, int64_t start)
{
    CallFigures *f = t->calls;
    if (f == NULL) {
        f = t->calls = calloc(1, sizeof(CallFigures));
        if (f == NULL) {
            return -1;
        }
        f->first_start = -1;
    }
    f->correct_last = 0;
    if (t->commits == f->commits_seen) {
        return 0;              /* none of its lines ran in this call */
    }
    f->commits_seen = t->commits;
    if (f->calls == 0) {
        /* The table held the first call alone: that is `first`, and the
         * table goes on with the later calls.  (After a rotation calls is
         * not 0: the table's next call is a later one.) */
        f->first = linetable_take(t);
        if (f->first == NULL) {
            return -1;
        }
        f->first_start = start;
        f->calls = 1;
        return 0;
    }
    if (cover_table(f, t) < 0 || note_later_start(f, t, start) < 0) {
        return -1;
    }
    f->calls++;
    for (int s = 0; s < t->n_slots; s++) {
        int64_t grown = memlab_sub_sat(t->growth[s], f->growth_before[s]);
        f->growth_before[s] = t->growth[s];
        f->last_growth[s] = grown;
    }
    /* Folded into least_growth once known: when the next call begins. */
    f->correct_last = 1;
    f->last_exact = 0;
    return 0;
}

/* One later call's growth per line, `growth`, into the least of them. */
static void
fold_growth(CallFigures *f, const int64_t *growth)
{
    for (int s = 0; s < f->n_slots; s++) {
        if (f->folded == 0 || growth[s] < f->least_growth[s]) {
            f->least_growth[s] = growth[s];
        }
    }
    f->folded++;
}

/* A growth of one line in the call being corrected. */
typedef struct {
    int64_t bytes;
    int slot;
} Share;

static int
share_desc(const void *a, const void *b)
{
    int64_t x = ((const Share *)a)->bytes, y = ((const Share *)b)->bytes;
    return (x < y) - (x > y);
}

static int
bytes_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Reduce each line's growth in the last call (last_growth) by the frees seen
 * since it began, as callfigures.h tells: the frees are the lines that shrank
 * and `released`.  -1 when memory ran out (last_growth is then untouched). */
static int
charge_frees(CallFigures *f, int64_t released)
{
    int n = f->n_slots, n_grown = 0, n_frees = 0;
    Share *grown = malloc((size_t)(n + 1) * sizeof(Share));
    int64_t *frees = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (grown == NULL || frees == NULL) {
        free(grown);
        free(frees);
        return -1;
    }
    for (int s = 0; s < n; s++) {
        int64_t g = f->last_growth[s];
        if (g > 0) {
            grown[n_grown].bytes = g;
            grown[n_grown++].slot = s;
        }
        else if (g < 0) {
            frees[n_frees++] = g == INT64_MIN ? INT64_MAX : -g;
        }
    }
    if (released > 0) {
        frees[n_frees++] = released;
    }
    qsort(grown, (size_t)n_grown, sizeof(Share), share_desc);
    qsort(frees, (size_t)n_frees, sizeof(int64_t), bytes_desc);
    int64_t left = 0;
    for (int i = 0; i < n_frees; i++) {
        int64_t budget = frees[i];
        for (int j = 0; j < n_grown && budget > 0; j++) {
            if (grown[j].bytes > 0 && grown[j].bytes <= budget) {
                budget -= grown[j].bytes;
                grown[j].bytes = 0;
            }
        }
        left = memlab_add_sat(left, budget);
    }
    for (int j = 0; j < n_grown && left > 0; j++) {
        int64_t take = grown[j].bytes < left ? grown[j].bytes : left;
        grown[j].bytes -= take;
        left -= take;
    }
    for (int s = 0; s < n; s++) {
        if (f->last_growth[s] < 0) {
            f->last_growth[s] = 0;
        }
    }
    for (int j = 0; j < n_grown; j++) {
        f->last_growth[grown[j].slot] = grown[j].bytes;
    }
    free(grown);
    free(frees);
    return 0;
}

/* The deferred call's growth as it stands now, where `a` (NULL: none)
 * knows it exactly; else as it was last seen. */
static void
refresh_deferred(CallFigures *f, const LineTable *t, const Attrib *a)
{
    if (f->deferred_call != 0 && a != NULL) {
        (void)attrib_kept(a, t, f->deferred_call, f->first_line, f->n_slots,
                          f->deferred_growth);
    }
}

void
callfigures_settle_last(CallClock *clock, CodeMap *codes, const Attrib *a)
{
    clock->settle_level = attrib_level(a);
    for (int i = 0; i < codes->n_tables; i++) {
        LineTable *t = codes->tables[i];
        CallFigures *f = t->calls;
        if (f == NULL) {
            continue;
        }
        refresh_deferred(f, t, a);
        callfigures_bound_by_survivors(f, t, a, f->least_growth);
        if (f->correct_last && !f->last_exact
            && attrib_kept(a, t, f->calls, f->first_line, f->n_slots, f->last_growth)) {
            f->last_exact = 1;
        }
    }
}

void
callfigures_begin_call(CallClock *clock, CodeMap *codes, int64_t level, int read_ok,
                       const Attrib *a)
{
    if (clock->started) {
        int64_t kept = memlab_sub_sat(level, clock->start_level);
        int64_t released = clock->ended ? memlab_sub_sat(clock->end_level, level) : 0;
        if (kept < 0) {
            kept = 0;
        }
        for (int i = 0; i < codes->n_tables; i++) {
            LineTable *t = codes->tables[i];
            CallFigures *f = t->calls;
            if (f == NULL) {
                continue;
            }
            if (f->calls == 1) {      /* its second call may begin now */
                f->follow_attach = a != NULL && a->attached && !a->failed ? a->attaches : 0;
            }
            if (f->deferred_call != 0) {
                refresh_deferred(f, t, a);
                fold_growth(f, f->deferred_growth);
                f->deferred_call = 0;
            }
            if (!f->correct_last) {
                continue;
            }
            f->correct_last = 0;
            if (f->last_exact) {
                /* Exact until blocks stopped being followed (a profiler on
                 * only during its decorated calls): what was freed since,
                 * between the calls, is charged as without them. */
                int64_t since = memlab_sub_sat(clock->settle_level, level);
                (void)charge_frees(f, since > 0 ? since : 0);
                fold_growth(f, f->last_growth);
                continue;
            }
            if (a != NULL && attrib_kept(a, t, f->calls, f->first_line, f->n_slots,
                                         f->deferred_growth)) {
                f->deferred_call = f->calls;
                continue;
            }
            /* Out of memory: the call's kept bytes alone bound each line. */
            (void)charge_frees(f, released);
            for (int s = 0; s < f->n_slots; s++) {
                if (f->last_growth[s] > kept) {
                    f->last_growth[s] = kept;
                }
            }
            fold_growth(f, f->last_growth);
        }
    }
    clock->started = 1;
    clock->start_ok = read_ok;
    clock->ended = 0;
    clock->start_level = level;
}

Py_ssize_t
callfigures_end_call(CallClock *clock, CodeMap *codes, int64_t level, int read_ok)
{
    Py_ssize_t failed = 0;
    int64_t start = clock->start_ok ? clock->start_level : -1;
    clock->ended = read_ok;
    clock->end_level = level;
    for (int i = 0; i < codes->n_tables; i++) {
        if (table_end_call(codes->tables[i], start) < 0) {
            failed++;
        }
    }
    return failed;
}
