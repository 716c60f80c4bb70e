/* Figures per outermost call, beside the figures over all calls.
 *
 * While blocks are followed (attrib.h), a line's growth in a call is exact:
 * the bytes that line made in the call (its callees' included) and that are
 * still alive when the call after the next begins, or, for the last two
 * calls, when the figures are read.  Where every block has been followed since
 * the second call began, a line's growth in calls 2..n-2 is also at most
 * what it made then and is alive when read: a cache of the last few results
 * outlives a call or two but does not grow every call.  Not the next call: a result that the
 * caller holds until the next call returns, or state that the next call
 * replaces, is made anew in every call without growing.  A profiler that
 * follows blocks only during its calls (a decorated function's, enabled per
 * call) knows what each line still held when the call ended; what was freed
 * between the calls is charged to them as below.  The rest of this comment is
 * the rule without blocks followed (follow_blocks=False, a source that does
 * not push, a tracer moved between devices).
 *
 * A *call* runs from the moment a thread enters a profiled function while no
 * profiled frame is open on any thread, to the moment no profiled frame is
 * open anywhere and no profiled generator or coroutine is suspended
 * (suspended.h): a nested or recursive call is part of the call around it,
 * and calls that overlap on several threads, or interleave on one, are one
 * call.  A table takes part
 * in a call when one of its lines committed during it.
 *
 * Nothing here runs per line: at the end of each call, a table that took
 * part does one step in O(its lines x its columns).  At the end of its first call the
 * table's figures move to `first` and the table starts empty, so from then on
 * it holds the later calls alone; "all calls" is the two folded together when
 * asked (stats()).  From the second call on, each line's growth in the call
 * (its summed growth now, less at the previous call's end) updates the least
 * growth of one call seen so far.
 *
 * A line's growth in a call is not what the call kept of it: a tensor that
 * lives until the return (a local, a result the caller drops or replaces) is
 * growth of its line in every call, and is freed after the call's last event.
 * So when the next call begins, each line's growth in the call that ended is
 * reduced by the frees seen since that call began: the shrinking of its lines
 * and what was released between its end and the next start.  Which growth a
 * free released is not known (the tracer sees levels, not tensors), so it is
 * guessed: each free, largest first, takes whole the largest growths that fit
 * in it (a free of 4 MiB + 4 B releases the 4 MiB line and the 4 B line, not
 * part of a 1 MiB line), then what it has left from the largest growths still
 * standing.  What stays, at most what the call kept (the next start's level
 * less this start's), is that line's growth in the call.  Memory that code
 * outside the profiled functions keeps between calls is charged to the
 * call's lines.  The last call is never so corrected: the least over the
 * calls is no higher for it. */
#ifndef MEMLAB_CALLFIGURES_H
#define MEMLAB_CALLFIGURES_H

#include "attrib.h"
#include "codemap.h"

/* The per-call figures of one LineTable (its `calls`). */
typedef struct CallFigures {
    int64_t calls;            /* calls this table took part in */
    int64_t commits_seen;     /* the table's commits at the end of the last call */
    LineTable *first;         /* Owned. the first call's figures; NULL before it ended */
    int first_line;           /* line of slot 0 of the two arrays below */
    int n_slots;
    int64_t *growth_before;   /* Owned. the table's growth at the last call's end */
    int64_t *least_growth;    /* Owned. least growth in one call, calls 2..calls */
    int64_t *last_growth;     /* Owned. each line's growth in the last call */
    int correct_last;         /* the last call was a later call, to correct */
    int last_exact;           /* last_growth is what the last call's lines made
                                 and still held when blocks stopped being
                                 followed (callfigures_settle_last) */
    int64_t folded;           /* later calls folded into least_growth */
    int64_t deferred_call;    /* a later call whose exact growth waits for the
                                 start of the call after the next, or 0 */
    int64_t *deferred_growth; /* Owned. its lines' bytes still alive when last
                                 looked (the next call's start, a disable) */
    uint64_t follow_attach;   /* the attach (Attrib.attaches) its second call
                                 began under, or 0: while that attach lasts,
                                 what its calls made is still followed, and a
                                 bounded cache is told from growth */
    /* What was alive when the calls began, so that a first call's peak and
     * the later calls' can be told apart from what was there before them
     * (optimizer state the first call made): the level when the first call
     * began, and per column, the level when the later call began that first
     * reached the highest figure of the column's lines over the later calls.
     * -1: not read. */
    int64_t first_start;
    int n_tops;               /* columns of the two arrays below; 0 before a later call */
    int64_t *later_top;       /* Owned. per column: the highest figure of its lines */
    int64_t *later_start;     /* Owned. per column: the level when its call began */
} CallFigures;

/* The tracer's side: the level when the current call began. */
typedef struct {
    int64_t start_level;      /* level at the start of the current (or last) call */
    int64_t end_level;        /* level at the end of the last call */
    int started;              /* a call began since the tracer was made or cleared */
    int start_ok;             /* start_level was read (a failed reading leaves it unknown) */
    int ended;                /* end_level was read (a failed reading leaves it unknown) */
    int64_t settle_level;     /* the followed level when blocks stopped being
                                 followed (callfigures_settle_last) */
} CallClock;

void callfigures_free(CallFigures *figures);

/* Forget every call (the table's figures are cleared by its owner). */
void callfigures_clear(LineTable *table);
void callfigures_clear_clock(CallClock *clock);

/* The table's figures were cleared but its calls go on being counted (a
 * profile_every table was printed): the first call's figures go, the count
 * of calls and each line's least growth stay. */
void callfigures_rotate(LineTable *table);

/* A call begins at `level` (read_ok: 0 when it could not be read): the
 * previous call's growth of each line is what its line made in that call and
 * still holds now, when `a` (NULL: none) followed every block of it; else it
 * is reduced by the frees since it began (see above).  Never raises. */
void callfigures_begin_call(CallClock *clock, CodeMap *codes, int64_t level,
                            int read_ok, const Attrib *a);

/* Blocks stop being followed (disable, a move): the last call's growth of
 * each line becomes what its line made and still holds now, where `a` knows
 * it exactly.  Never raises. */
void callfigures_settle_last(CallClock *clock, CodeMap *codes, const Attrib *a);

/* Every block the calls 2..n-2 of the table made has been followed since
 * they began, by `a` (NULL: none), and still is. */
int callfigures_survivors_known(const CallFigures *f, const Attrib *a);

/* Lowers least[] (one per slot of f) to what each line made in calls
 * 2..n-2 and is alive now, where callfigures_survivors_known.  Out of
 * memory: least[] stays as it was.  Never raises. */
void callfigures_bound_by_survivors(const CallFigures *f, const LineTable *t,
                                    const Attrib *a, int64_t *least);

/* The end of a call at `level` (read_ok: 0 when it could not be read):
 * every table of `codes` that took part steps.  Returns the number of tables
 * whose step failed for lack of memory (their per-call figures are then
 * incomplete); never raises. */
Py_ssize_t callfigures_end_call(CallClock *clock, CodeMap *codes, int64_t level,
                                int read_ok);

/* {lineno: (count, net_growth, (values...))} over all calls: the first
 * call's figures folded with the later ones'.  NULL with an exception set. */
PyObject *callfigures_all_to_dict(const LineTable *table, const memlab_fold *folds);

/* (calls, first_kept, {lineno: (first, later, least_growth)}, (first_start,
 * (later_start per column...))) where first and later are (count, net_growth,
 * (values...)) or None where the line did not run in those calls (first:
 * always None when not first_kept, after a rotation), least_growth is None
 * before the third call, and the starts are CallFigures' (None where not
 * read; no later starts before a later call).  NULL with an exception set. */
PyObject *callfigures_to_tuple(const LineTable *table, const Attrib *a);

#endif /* MEMLAB_CALLFIGURES_H */
