#include "threadstack.h"

#include <stdlib.h>
#include <string.h>

void
threadstacks_init(ThreadStacks *all, int n_columns)
{
    all->stacks = NULL;
    all->n_stacks = all->cap_stacks = 0;
    all->last = 0;
    all->n_columns = n_columns;
}

void
threadstacks_dealloc(ThreadStacks *all)
{
    for (int i = 0; i < all->n_stacks; i++) {
        free(all->stacks[i]->frames);
        free(all->stacks[i]->pending);
        free(all->stacks[i]);
    }
    free(all->stacks);
    threadstacks_init(all, all->n_columns);
}

ThreadStack *
threadstacks_get(ThreadStacks *all, uint64_t thread)
{
    if (all->n_stacks > 0 && all->stacks[all->last]->thread == thread) {
        return all->stacks[all->last];
    }
    int idle = -1;
    for (int i = 0; i < all->n_stacks; i++) {
        if (all->stacks[i]->thread == thread) {
            all->last = i;
            return all->stacks[i];
        }
        if (idle < 0 && all->stacks[i]->depth == 0 && !all->stacks[i]->in_callback) {
            idle = i;
        }
    }
    /* An empty stack can change hands: its thread has no profiled frame
     * running, and gets a fresh stack if it comes back. */
    if (idle < 0) {
        if (all->n_stacks == all->cap_stacks) {
            int cap = all->cap_stacks ? 2 * all->cap_stacks : 4;
            ThreadStack **grown = realloc(all->stacks, sizeof(ThreadStack *) * (size_t)cap);
            if (grown == NULL) {
                return NULL;
            }
            all->stacks = grown;
            all->cap_stacks = cap;
        }
        ThreadStack *fresh = calloc(1, sizeof(ThreadStack));
        if (fresh == NULL) {
            return NULL;
        }
        idle = all->n_stacks++;
        all->stacks[idle] = fresh;
    }
    all->stacks[idle]->thread = thread;
    all->last = idle;
    return all->stacks[idle];
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
