/* What happens on each event, whichever hook delivered it.
 *
 * Every event first takes one reading and folds the interval since the last
 * reading into the current line of *every* profiled frame on this thread, so
 * a call's peak is charged to the caller's line too (a level column keeps
 * the last reading: the level at the line's end).  A poll of the device
 * covers the lines open on other polling threads as well: its peaks and
 * counters go to theirs too (their levels are read at their own events).  Then the event moves
 * the innermost frame: a new line commits the old one, a return commits and
 * pops. */
#include "tracer.h"

#include <string.h>

static ThreadStack *
current_stack(TracerObject *t)
{
    return threadstacks_get(&t->threads, PyThreadState_GetID(PyThreadState_Get()));
}

/* fold_interval's result when the tracer was disabled (and perhaps enabled
 * again) while a Python source ran with the GIL released: the event belongs
 * to a session that is closed, and must not touch the stack. */
#define FOLD_STALE 1

/* Fold `interval` into the pending figures of every open frame of `stack`;
 * level columns only when `levels`.  A level is the one at the line's end,
 * for an outer frame too (not the highest its callees reached): the last
 * reading wins. */
static void
fold_into(TracerObject *t, ThreadStack *stack, const int64_t *interval, int levels)
{
    int n = t->sampler.n_columns;
    const int *kinds = t->sampler.kinds;
    for (int i = 0; i < stack->depth; i++) {
        int64_t *pending = threadstack_pending(stack, n, i);
        for (int c = 0; c < n; c++) {
            int64_t v = interval[c];
            if (kinds[c] == MEMLAB_COUNTER) {
                pending[c] = memlab_add_sat(pending[c], v);
            }
            else if (kinds[c] == MEMLAB_LEVEL ? levels : v > pending[c]) {
                pending[c] = v;
            }
        }
    }
}

/* Is `thread` still running?  A thread that died inside a profiled call
 * whose return we never saw (a debugger hid it from settrace) leaves its
 * frames open until disable(); the device's later intervals are not theirs.
 * Threads are few, and only a poll with lines open on other threads asks. */
static int
thread_alive(uint64_t thread)
{
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (PyThreadState_GetID(ts) == thread) {
            return 1;
        }
    }
    return 0;
}

/* Fold the reading sampler_take just put in t->interval (rc, its result)
 * into every open frame of `stack`; a poll's peaks and counters also go to
 * the lines open on the other polling threads. */
static void
fold_reading(TracerObject *t, ThreadStack *stack, int rc)
{
    fold_into(t, stack, t->interval, 1);
    if (rc != SAMPLER_POLLED) {
        return;
    }
    for (int s = 0; s < t->threads.n; s++) {
        ThreadStack *other = t->threads.records[s];
        if (other != stack && other->depth > 0
            && sampler_polls(&t->sampler, other->thread)
            && thread_alive(other->thread)) {
            fold_into(t, other, t->sampler.polled, 0);
        }
    }
}

/* One reading, folded.  Returns 0 with the growth field's level in *level,
 * or -1 (an error counted) if reading failed.  An event's reading (`event`)
 * returns FOLD_STALE, folding nothing, if the tracer was disabled (and
 * perhaps enabled again) while a Python source ran with the GIL released;
 * disable()'s own last reading, taken once the tracer is off the enabled
 * list, is no event's and is always folded. */
static int
fold_interval(TracerObject *t, ThreadStack *stack, int64_t *level, int event)
{
    unsigned long stops = t->sampler.stops;
    int rc = sampler_take(&t->sampler, stack->thread, t->interval, level);
    if (event && (!t->enabled || t->sampler.stops != stops)) {
        return FOLD_STALE;
    }
    if (rc < 0) {
        t->sample_errors++;
        return -1;
    }
    fold_reading(t, stack, rc);
    return 0;
}

/* Close frame i's current line into its table and open `line`. */
static void
commit_line(TracerObject *t, ThreadStack *stack, int i, int64_t level, int next_line)
{
    Frame *f = &stack->frames[i];
    int n = t->sampler.n_columns;
    int64_t *pending = threadstack_pending(stack, n, i);
    if (f->line >= 0 && linetable_commit(f->table, f->line, f->counted,
                                         memlab_sub_sat(level, f->start_level), pending,
                                         t->sampler.folds) < 0) {
        t->memory_errors++;
    }
    if (f->line >= 0 && t->curves.choice != CURVE_OFF) {
        curve_line_ended(&t->curves, stack, i, f->line, level, pending);
    }
    memset(pending, 0, sizeof(int64_t) * (size_t)n);
    if (f->acall != NULL && next_line >= 0) {
        attrib_set_line(f->acall, next_line);
    }
    f->line = next_line;
    f->counted = 1;
    f->start_level = level;
}

/* The call (callfigures.h) is open while a thread has a profiled frame open
 * or a generator's call is suspended (suspended.h). */
static void
call_may_end(TracerObject *t, int64_t level, int read_ok)
{
    if (t->call_open && t->open_stacks == 0 && t->suspensions.parked == 0) {
        t->call_open = 0;
        t->memory_errors += callfigures_end_call(&t->clock, &t->codes, level, read_ok);
    }
}

/* A thread's stack opened (its first profiled frame) or closed. */
static void
stack_opened(TracerObject *t, int64_t level, int read_ok)
{
    if (t->open_stacks == 0) {
        suspensions_end_dead(t);
        call_may_end(t, level, read_ok);    /* dead generators kept it open */
    }
    t->open_stacks++;
    if (!t->call_open) {
        t->call_open = 1;
        callfigures_begin_call(&t->clock, &t->codes, level, read_ok,
                               t->attrib.attached && !t->attrib_moved ? &t->attrib : NULL);
    }
}

static void
stack_closed(TracerObject *t, int64_t level, int read_ok)
{
    if (t->open_stacks > 0 && --t->open_stacks == 0) {
        suspensions_end_dead(t);
    }
    call_may_end(t, level, read_ok);
}

/* `resumed`: the suspended call this frame continues, or NULL: a new one. */
static Frame *
push_frame(TracerObject *t, ThreadStack *stack, LineTable *table, int line,
           int64_t level, int read_ok, Suspension *resumed)
{
    Frame *f = threadstack_push(stack, t->sampler.n_columns);
    if (f == NULL) {
        t->memory_errors++;
        return NULL;
    }
    if (stack->depth == 1) {
        if (resumed == NULL) {
            stack_opened(t, level, read_ok);
        }
        else {
            t->open_stacks++;   /* the suspended call kept the call open */
        }
    }
    f->table = table;
    f->line = line;
    f->counted = 0;      /* a resumed line was counted before it yielded */
    f->start_level = level;
    f->curve = NULL;
    f->acall = NULL;
    f->gen = 0;
    f->no_park = 0;
    if (resumed != NULL) {
        suspension_resumes(t, f, resumed);
    }
    else if (t->attrib.attached) {
        int64_t call = (table->calls != NULL ? table->calls->calls : 0) + 1;
        f->acall = attrib_push(&t->attrib, table, line, call);
    }
    if (t->curves.choice != CURVE_OFF) {
        curve_frame_pushed(&t->curves, stack, stack->depth - 1);
    }
    return f;
}

/* The innermost frame ends: its Call (attrib.h) and its generator's record
 * (suspended.h) too. */
static void
pop_frame(TracerObject *t, ThreadStack *stack)
{
    Frame *f = &stack->frames[stack->depth - 1];
    curve_frame_popping(&t->curves, stack, stack->depth - 1);
    if (f->gen != 0) {
        suspension_frame_ends(t, stack);
    }
    if (f->acall != NULL) {
        attrib_pop(&t->attrib, f->acall);
        f->acall = NULL;
    }
    stack->depth--;
}

/* The start of every event: the calling thread's stack, marked as inside a
 * callback (a Python source's code must not re-enter), with this event's
 * reading folded in.  NULL when the event is dropped: the tracer is off, the
 * thread is already inside a callback, memory ran out, or the event outlived
 * its session (FOLD_STALE).  A reading that failed still keeps the stack's
 * shape: *read_ok is 0 and callers use a frame's own start level, so no
 * growth is invented.  Every non-NULL stack is closed with end_event(). */
static ThreadStack *
begin_event(TracerObject *t, int64_t *level, int *read_ok)
{
    if (!t->enabled) {
        return NULL;
    }
    ThreadStack *stack = current_stack(t);
    if (stack == NULL) {
        t->memory_errors++;
        return NULL;
    }
    if (stack->in_callback) {
        return NULL;
    }
    stack->in_callback = 1;
    *level = 0;
    int folded = fold_interval(t, stack, level, 1);
    if (folded == FOLD_STALE) {
        stack->in_callback = 0;
        return NULL;
    }
    *read_ok = folded == 0;
    return stack;
}

static void
end_event(ThreadStack *stack)
{
    stack->in_callback = 0;
}

void
tracer_on_resume(TracerObject *t, LineTable *table, int line, PyObject *gen, int thrown)
{
    int64_t level;
    int read_ok;
    ThreadStack *stack = begin_event(t, &level, &read_ok);
    if (stack == NULL) {
        return;
    }
    Suspension *r = suspension_of(t, gen, table);
    Frame *f = push_frame(t, stack, table, line, level, read_ok, r);
    if (f != NULL && r == NULL && thrown) {
        /* Perhaps closed by its finalizer, after its weak references were
         * cleared: one made now would outlive it.  It cannot suspend. */
        f->no_park = 1;
    }
    end_event(stack);
}

void
tracer_on_line(TracerObject *t, LineTable *table, int line)
{
    int64_t level;
    int read_ok;
    ThreadStack *stack = begin_event(t, &level, &read_ok);
    if (stack == NULL) {
        return;
    }
    if (stack->depth == 0 || stack->frames[stack->depth - 1].table != table) {
        /* Enabled while this frame was already running: adopt it. */
        Frame *f = push_frame(t, stack, table, -1, level, read_ok, NULL);
        if (f == NULL) {
            goto done;
        }
        f->no_park = 1;      /* where it runs from is not known */
    }
    int top = stack->depth - 1;
    commit_line(t, stack, top, read_ok ? level : stack->frames[top].start_level, line);
done:
    end_event(stack);
}

void
tracer_on_leave(TracerObject *t, LineTable *table, PyObject *yielded)
{
    int64_t level;
    int read_ok;
    PyObject *ref = suspension_ref(t, table, yielded);
    ThreadStack *stack = begin_event(t, &level, &read_ok);
    if (stack == NULL) {
        Py_XDECREF(ref);
        return;
    }
    int target = stack->depth - 1;
    while (target >= 0 && stack->frames[target].table != table) {
        target--;
    }
    /* Frames above the one leaving lost their own leave event: close them too. */
    while (target >= 0 && stack->depth > target) {
        int top = stack->depth - 1;
        int64_t end = read_ok ? level : stack->frames[top].start_level;
        commit_line(t, stack, top, end, -1);
        if (yielded == NULL || top != target
                || suspension_park(t, stack, yielded, &ref) < 0) {
            pop_frame(t, stack);
        }
    }
    if (stack->depth == 0) {
        sampler_release(&t->sampler, stack->thread);
        if (target >= 0) {
            stack_closed(t, level, read_ok);
        }
    }
    end_event(stack);
    Py_XDECREF(ref);       /* a weak reference's end runs no Python code */
}

void
tracer_close_all_frames(TracerObject *t)
{
    int64_t level = 0;
    int read_ok = 0;      /* the last reading here, if any stack was open */
    for (int s = 0; s < t->threads.n; s++) {
        ThreadStack *stack = t->threads.records[s];
        int open = stack->depth > 0;
        read_ok = open ? fold_interval(t, stack, &level, 0) == 0 : read_ok;
        while (stack->depth > 0) {
            int top = stack->depth - 1;
            commit_line(t, stack, top, read_ok ? level : stack->frames[top].start_level, -1);
            pop_frame(t, stack);
        }
        if (open) {
            stack_closed(t, level, read_ok);
        }
    }
    /* Suspended generators' calls end with the session, at the level read
     * above, if any: no reading is taken for them alone. */
    suspensions_end_all(t);
    call_may_end(t, level, read_ok);
}

void
tracer_fold_now(TracerObject *t)
{
    ThreadStack *stack = current_stack(t);
    int64_t level;
    if (stack != NULL && stack->depth > 0) {
        fold_interval(t, stack, &level, 1);
    }
}

void
tracer_drop_calls(TracerObject *t)
{
    for (int s = 0; s < t->threads.n; s++) {
        ThreadStack *stack = t->threads.records[s];
        /* Innermost first, as the frames themselves would end: each pop
         * hands the thread's top to a parent that is still open. */
        for (int i = stack->depth - 1; i >= 0; i--) {
            if (stack->frames[i].acall != NULL) {
                attrib_pop(&t->attrib, stack->frames[i].acall);
                stack->frames[i].acall = NULL;
            }
        }
    }
    suspensions_drop_calls(t);
}

void
tracer_restart_levels(TracerObject *t, int64_t level)
{
    for (int s = 0; s < t->threads.n; s++) {
        ThreadStack *stack = t->threads.records[s];
        for (int i = 0; i < stack->depth; i++) {
            stack->frames[i].start_level = level;
        }
    }
}
