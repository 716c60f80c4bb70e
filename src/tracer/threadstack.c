#include "threadstack.h"

#include <stdlib.h>
#include <string.h>

static int
stack_idle(const void *record)
{
    const ThreadStack *stack = record;
    return stack->depth == 0 && !stack->in_callback;
}

static void
stack_release(void *record)
{
    ThreadStack *stack = record;
    free(stack->frames);
    free(stack->pending);
}

void
threadstacks_init(ThreadStacks *all)
{
    threadtable_init(all, sizeof(ThreadStack), stack_idle);
}

void
threadstacks_dealloc(ThreadStacks *all)
{
    threadtable_clear(all, stack_release);
}

ThreadStack *
threadstacks_get(ThreadStacks *all, uint64_t thread)
{
    int made;
    return threadtable_get(all, thread, &made);
}

static int
threadstack_grow(ThreadStack *stack, int n_columns)
{
    int cap = stack->capacity ? 2 * stack->capacity : 8;
    size_t width = (size_t)(n_columns ? n_columns : 1);
    Frame *frames = realloc(stack->frames, sizeof(Frame) * (size_t)cap);
    if (frames == NULL) {
        return -1;
    }
    stack->frames = frames;
    int64_t *pending = realloc(stack->pending, sizeof(int64_t) * width * (size_t)cap);
    if (pending == NULL) {
        return -1;
    }
    stack->pending = pending;
    stack->capacity = cap;
    return 0;
}

Frame *
threadstack_push(ThreadStack *stack, int n_columns)
{
    if (stack->depth == stack->capacity && threadstack_grow(stack, n_columns) < 0) {
        return NULL;
    }
    int index = stack->depth++;
    memset(threadstack_pending(stack, n_columns, index), 0,
           sizeof(int64_t) * (size_t)n_columns);
    return &stack->frames[index];
}
