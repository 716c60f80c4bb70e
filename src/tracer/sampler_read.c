/* A sampler's readings (sampler.h): polling the device or reading a
 * thread's register, the peaks a reading resets handed to the samplers
 * that share the device, and starting and stopping.
 *
 * Every operation below takes one path for any source: a Source's table of
 * calls (source.h).  Where a call may not raise (an event, stop()), the
 * exception in flight is set aside around the source's calls and a Python
 * source's own error goes to sys.unraisablehook (quiet_begin/quiet_end);
 * where it may (start()), the source's own error reaches the caller. */
#include "sampler.h"
#include "list.h"

#include <string.h>

static void
quiet_begin(const Sampler *s, memlab_saved_exc *saved)
{
    if (s->source.ops->runs_python) {
        memlab_save_exc(saved);
    }
}

/* After a failed call on a quiet path: report the source's error, if it
 * set one, before calling it again.  (A compiled source sets none, and the
 * exception in flight was not set aside for it.) */
static void
quiet_report(const Sampler *s)
{
    if (s->source.ops->runs_python && PyErr_Occurred()) {
        PyErr_WriteUnraisable(s->source.object);
    }
}

static void
quiet_end(const Sampler *s, memlab_saved_exc *saved)
{
    if (s->source.ops->runs_python) {
        if (PyErr_Occurred()) {
            PyErr_WriteUnraisable(s->source.object);
        }
        memlab_restore_exc(saved);
    }
}

/* ---- sharing the peaks a reading resets --------------------------------- */

/* Samplers that are started.  Several may read one device (two profilers,
 * nested or side by side); each reading resets the device's peaks, so it
 * hands the peaks it saw to its peers, who would otherwise miss them. */
static struct {
    Sampler *live;                 /* Borrowed. the started samplers, linked */
} runtime;

static void
link_live(Sampler *s)
{
    if (!s->live) {
        s->next_live = runtime.live;
        runtime.live = s;
        s->live = 1;
    }
}

/* Do a and b read the same fields of one device?  A Python source's fields
 * may have changed between two Tracer()s: then indices differ in meaning (and
 * in range), and nothing is shared. */
static int
same_device(const Sampler *a, const Sampler *b)
{
    return a->device == b->device && source_same(&a->source, &b->source);
}

static void
share_peaks(const Sampler *s)
{
    for (Sampler *peer = runtime.live; peer != NULL; peer = peer->next_live) {
        if (peer == s || !same_device(peer, s)) {
            continue;
        }
        for (int f = 0; f < s->source.n_fields; f++) {
            if (s->field_kinds[f] == MEMLAB_PEAK && s->reading[f] > peer->carried[f]) {
                peer->carried[f] = s->reading[f];
            }
        }
        peer->has_carried = 1;
    }
}

static void
forget_carried(Sampler *s)
{
    if (s->has_carried) {
        memset(s->carried, 0, sizeof(int64_t) * (size_t)s->source.n_fields);
        s->has_carried = 0;
    }
}

/* ---- polling the whole device ------------------------------------------- */

/* Read the device, and reset its peaks when a column is a peak (handing them
 * to the peers).  0, or -1 (a Python source's exception set). */
static int
read_reset(Sampler *s)
{
    const Source *src = &s->source;
    if (src->ops->sample(src, s->device, s->reading) < 0) {
        return -1;
    }
    if (s->has_peaks) {
        if (src->ops->reset_peaks(src, s->device) < 0) {
            return -1;
        }
        share_peaks(s);
    }
    return 0;
}

/* Poll the whole device: read and reset, and put in s->polled what it saw
 * since the previous poll of this sampler (from any thread): a peak column
 * the peak since then (a peer's reading included), a counter its delta, a
 * level the reading.  0, or -1. */
static int
sampler_poll(Sampler *s)
{
    if (read_reset(s) < 0) {
        return -1;
    }
    for (int c = 0; c < s->n_columns; c++) {
        int f = s->field_of[c];
        int64_t v = s->reading[f];
        if (s->kinds[c] == MEMLAB_COUNTER) {
            s->polled[c] = memlab_sub_sat(v, s->last_counter[c]);
            s->last_counter[c] = v;
        }
        else if (s->kinds[c] == MEMLAB_PEAK && s->has_carried && s->carried[f] > v) {
            s->polled[c] = s->carried[f];
        }
        else {
            s->polled[c] = v;
        }
    }
    forget_carried(s);
    return 0;
}

/* ---- push readers -------------------------------------------------------- */

/* Give back `rd`'s register, if it holds one.  Quiet path. */
static void
reader_close(Sampler *s, SamplerReader *rd)
{
    if (rd->reader >= 0) {
        s->source.ops->close_reader(&s->source, rd->device, rd->reader);
        quiet_report(s);
        rd->reader = READER_IDLE;
    }
    else if (rd->reader == READER_POLLED) {
        rd->reader = READER_IDLE;     /* a register may be free next time */
    }
}

void
sampler_release(Sampler *s, uint64_t thread)
{
    if (!s->source.push) {
        return;
    }
    SamplerReader *rd = threadtable_find(&s->readers, thread);
    if (rd != NULL) {
        memlab_saved_exc saved = {0};   /* set only for a Python source */
        quiet_begin(s, &saved);
        reader_close(s, rd);
        quiet_end(s, &saved);
    }
}

/* A slot whose open_reader() is running is left to its thread, which
 * closes what it gets once it sees the sampler stopped (push_take). */
static void
close_readers(Sampler *s)
{
    memlab_saved_exc saved = {0};   /* set only for a Python source */
    quiet_begin(s, &saved);
    for (int r = 0; r < s->readers.n; r++) {
        reader_close(s, s->readers.records[r]);
    }
    quiet_end(s, &saved);
}

/* A thread that found no free register polls, as source.h says: sample(),
 * then reset_peaks() if a column is a peak (as a polled source is read;
 * a register-less thread cannot do better), counters as the device's deltas
 * since the previous poll.  Such threads share one baseline, as a polled
 * source's threads do (sampler_take).  A thread's first reading has no span
 * behind it: its counters and peaks read 0 there, though the poll's interval
 * still goes to the other polling threads' lines.  SAMPLER_POLLED, or -1. */
static int
poll_take(Sampler *s, int fresh, int64_t *interval)
{
    if (sampler_poll(s) < 0) {
        return -1;
    }
    for (int c = 0; c < s->n_columns; c++) {
        interval[c] = fresh && s->kinds[c] != MEMLAB_LEVEL ? 0 : s->polled[c];
    }
    return SAMPLER_POLLED;
}

/* Read through `thread`'s register, opening it (and taking the counters'
 * baseline) on first use.  Returns 0, SAMPLER_POLLED (no register was
 * free), or -1.  Quiet path. */
static int
push_take(Sampler *s, uint64_t thread, int64_t *interval)
{
    const Source *src = &s->source;
    int made;
    SamplerReader *rd = threadtable_get(&s->readers, thread, &made);
    if (rd == NULL) {
        return -1;
    }
    if (made) {
        rd->reader = READER_IDLE;
    }
    int own = thread == PyThreadState_GetID(PyThreadState_Get());
    int fresh = rd->reader == READER_IDLE;
    if (fresh) {
        unsigned long stops = s->stops;
        rd->reader = READER_OPENING;
        rd->device = s->device;
        int reader = src->ops->open_reader(src, s->device);
        if (reader < 0) {
            quiet_report(s);       /* it failed: the thread polls */
        }
        if (s->stops != stops) {
            /* Stopped meanwhile: close_readers() left this slot to us. */
            if (reader >= 0) {
                src->ops->close_reader(src, rd->device, reader);
            }
            rd->reader = READER_IDLE;
            return -1;
        }
        rd->reader = reader < 0 ? READER_POLLED : reader;
    }
    if (rd->reader == READER_POLLED) {
        return poll_take(s, fresh, interval);
    }
    if (src->ops->read(src, s->device, rd->reader, s->reading) < 0) {
        return -1;
    }
    for (int c = 0; c < s->n_columns; c++) {
        int64_t v = s->reading[s->field_of[c]];
        if (s->kinds[c] != MEMLAB_COUNTER) {
            interval[c] = v;
            continue;
        }
        /* Counters are the calling thread's own: another thread's cannot be
         * read from here, and a reused thread identity may start lower. */
        if (fresh || !own || v < rd->last_counter[c]) {
            interval[c] = 0;
        }
        else {
            interval[c] = memlab_sub_sat(v, rd->last_counter[c]);
        }
        if (own) {
            rd->last_counter[c] = v;
        }
    }
    return 0;
}

/* A polled source: every thread's reading is the device's.  SAMPLER_POLLED,
 * or -1. */
static int
poll_all(Sampler *s, uint64_t thread, int64_t *interval)
{
    if (sampler_poll(s) < 0) {
        return -1;
    }
    memcpy(interval, s->polled, sizeof(int64_t) * (size_t)s->n_columns);
    return SAMPLER_POLLED;
}

/* A Python source's reading: the exception in flight set aside around it. */
static int
take_quietly(Sampler *s, uint64_t thread, int64_t *interval)
{
    memlab_saved_exc saved = {0};
    quiet_begin(s, &saved);
    int rc = s->take_quietly(s, thread, interval);
    quiet_end(s, &saved);
    return rc;
}

void
sampler_choose_take(Sampler *s)
{
    s->take = s->source.push ? push_take : poll_all;
    if (s->source.ops->runs_python) {
        s->take_quietly = s->take;
        s->take = take_quietly;
    }
}

/* ---- control -------------------------------------------------------------- */

void
sampler_stop(Sampler *s)
{
    s->stops++;
    if (s->source.push) {
        close_readers(s);
    }
    MEMLAB_LIST_REMOVE(runtime.live, s, next_live);
    s->live = 0;
}

/* Prepare the device, take a first reading.  A push source's readers open
 * lazily on each thread's first event and nothing is reset; a polled
 * source's first reading resets the peaks and is every counter's baseline.
 * A source's failure raises its own exception (a compiled source's: the
 * device it could not read). */
int
sampler_start(Sampler *s)
{
    const Source *src = &s->source;
    if (src->ops->prepare(src, s->device) < 0) {
        return -1;
    }
    int rc;
    if (src->push) {
        close_readers(s);
        rc = src->ops->sample(src, s->device, s->reading);
    }
    else {
        link_live(s);
        rc = read_reset(s);
    }
    if (rc < 0) {
        if (!src->push) {
            sampler_stop(s);
        }
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_RuntimeError, "cannot read device %d of the memory source",
                         s->device);
        }
        return -1;
    }
    /* Live too when pushing: a thread that finds no free register polls, and
     * must get the peaks a peer's poll reset. */
    link_live(s);
    memset(s->carried, 0, sizeof(int64_t) * (size_t)src->n_fields);
    s->has_carried = 0;
    if (!src->push) {
        for (int c = 0; c < s->n_columns; c++) {
            s->last_counter[c] = s->reading[s->field_of[c]];
        }
    }
    return 0;
}


int
sampler_polls(const Sampler *s, uint64_t thread)
{
    if (!s->source.push) {
        return 1;
    }
    const SamplerReader *rd = threadtable_find(&s->readers, thread);
    return rd != NULL && rd->reader == READER_POLLED;
}
