/* Per-thread stacks of the profiled frames that are running right now. */
#ifndef MEMLAB_THREADSTACK_H
#define MEMLAB_THREADSTACK_H

#include "linetable.h"
#include "threadtable.h"

struct Curve;
struct AttribCall;

/* One running (or resumed) profiled frame and its current line. */
typedef struct {
    LineTable *table;      /* Borrowed: the tracer's CodeMap owns it. */
    int line;              /* current line; -1 before the first line event */
    int counted;           /* 0 when the line continues an execution counted
                              before a yield */
    int64_t start_level;   /* growth field's value when the line began */
    struct Curve *curve;   /* Borrowed: its function's curve (curve.h); NULL: none */
    struct AttribCall *acall;  /* Borrowed: its Call (attrib.h); NULL: none */
    uintptr_t gen;         /* its generator's record (suspended.h); 0: none */
    int no_park;           /* it may not suspend with its call open */
} Frame;

/* The profiled frames of one thread, innermost last.  pending holds, per
 * frame, the figures folded so far for its current line. */
typedef struct {
    uint64_t thread;       /* PyThreadState_GetID(); first, as ThreadTable asks */
    int in_callback;       /* re-entry guard: a Python source runs code on
                              this thread (other threads carry on) */
    Frame *frames;         /* Owned. */
    int64_t *pending;      /* Owned. capacity * n_columns */
    int depth;
    int capacity;
} ThreadStack;

/* Every thread's stack, in a ThreadTable: a stack with no frame open and
 * no callback running changes hands (its thread gets a fresh one if it
 * comes back). */
typedef ThreadTable ThreadStacks;

void threadstacks_init(ThreadStacks *all);
void threadstacks_dealloc(ThreadStacks *all);

/* The stack of `thread`, made if needed; NULL when out of memory. */
ThreadStack *threadstacks_get(ThreadStacks *all, uint64_t thread);

static inline int64_t *
threadstack_pending(ThreadStack *stack, int n_columns, int index)
{
    return stack->pending + (size_t)index * (size_t)n_columns;
}

/* Push a frame (pending zeroed); NULL when out of memory. */
Frame *threadstack_push(ThreadStack *stack, int n_columns);

#endif /* MEMLAB_THREADSTACK_H */
