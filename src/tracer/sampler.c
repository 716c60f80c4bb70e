#include "sampler.h"

#include <stdlib.h>
#include <string.h>

/* Every operation below takes one path for any source: a Source's table of
 * calls (source.h).  Where a call may not raise (an event, stop()), the
 * exception in flight is set aside around the source's calls and a Python
 * source's own error goes to sys.unraisablehook (quiet_begin/quiet_end);
 * where it may (start()), the source's own error reaches the caller. */

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

/* ---- the source's identity -------------------------------------------- */

/* (name, fields) as Python objects; NULL with an exception set. */
PyObject *
sampler_source_info(PyObject *source)
{
    Source src;
    PyObject *info = NULL;
    if (source_open(&src, source) == 0) {
        info = PyTuple_Pack(2, src.name, src.field_names);
    }
    source_close(&src);
    return info;
}

PyObject *
sampler_field_table(PyObject *source)
{
    Source src;
    PyObject *table = NULL;
    int *kinds = NULL, *units = NULL;
    if (source_open(&src, source) < 0) {
        goto error;
    }
    int n = src.n_fields;
    kinds = calloc((size_t)n + 1, sizeof(int));
    units = calloc((size_t)n + 1, sizeof(int));
    if (kinds == NULL || units == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    if (src.ops->field_codes(&src, kinds, units) < 0) {
        goto error;
    }
    table = PyTuple_New(n);
    for (int f = 0; table != NULL && f < n; f++) {
        PyObject *row = Py_BuildValue("(Oss)", PyTuple_GET_ITEM(src.field_names, f),
                                      memlab_kind_names[kinds[f]], memlab_unit_names[units[f]]);
        if (row == NULL) {
            Py_CLEAR(table);
            break;
        }
        PyTuple_SET_ITEM(table, f, row);
    }
error:
    free(kinds);
    free(units);
    source_close(&src);
    return table;
}

/* ---- columns ----------------------------------------------------------- */

static int
field_index(PyObject *fields, PyObject *name)
{
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    for (Py_ssize_t i = 0; i < n; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(fields, i), name, Py_EQ);
        if (eq < 0) {
            return -2;
        }
        if (eq) {
            return (int)i;
        }
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *valid = sep ? PyUnicode_Join(sep, fields) : NULL;
    Py_XDECREF(sep);
    if (valid == NULL) {
        return -2;
    }
    PyErr_Format(PyExc_ValueError, "unknown column %R; valid columns: %U", name, valid);
    Py_DECREF(valid);
    return -2;
}

static int
sampler_pick_columns(Sampler *s, PyObject *fields, PyObject *columns)
{
    PyObject *seq = PySequence_Tuple(columns);
    if (seq == NULL) {
        return -1;
    }
    int n = (int)PyTuple_GET_SIZE(seq), ret = -1;
    s->n_columns = n;
    s->field_of = calloc((size_t)n + 1, sizeof(int));
    s->kinds = calloc((size_t)n + 1, sizeof(int));
    s->folds = calloc((size_t)n + 1, sizeof(memlab_fold));
    s->last_counter = calloc((size_t)n + 1, sizeof(int64_t));
    s->polled = calloc((size_t)n + 1, sizeof(int64_t));
    if (!s->field_of || !s->kinds || !s->folds || !s->last_counter || !s->polled) {
        PyErr_NoMemory();
        goto error;
    }
    for (int c = 0; c < n; c++) {
        PyObject *name = PyTuple_GET_ITEM(seq, c);
        int f = field_index(fields, name);
        if (f < 0) {
            goto error;
        }
        s->field_of[c] = f;
        s->kinds[c] = s->field_kinds[f];
        s->folds[c] = s->kinds[c] == MEMLAB_COUNTER ? FOLD_SUM : FOLD_MAX;
        s->has_peaks |= s->kinds[c] == MEMLAB_PEAK;
    }
    ret = 0;
error:
    Py_DECREF(seq);
    return ret;
}

static int push_take(Sampler *s, uint64_t thread, int64_t *interval);
static int poll_all(Sampler *s, uint64_t thread, int64_t *interval);
static int take_quietly(Sampler *s, uint64_t thread, int64_t *interval);

static int
reader_idle(const void *record)
{
    return ((const SamplerReader *)record)->reader == READER_IDLE;
}

int
sampler_init(Sampler *s, PyObject *source, int device, PyObject *columns,
             PyObject *growth_field)
{
    if (source_open(&s->source, source) < 0) {
        return -1;
    }
    PyObject *fields = s->source.field_names;
    int n_fields = s->source.n_fields;
    s->device = device;
    s->growth_field = -1;
    for (int f = 0; f < n_fields; f++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(fields, f))) {
            PyErr_SetString(PyExc_TypeError, "source field names must be str");
            return -1;
        }
    }
    s->reading = calloc((size_t)n_fields + 1, sizeof(int64_t));
    s->carried = calloc((size_t)n_fields + 1, sizeof(int64_t));
    s->field_kinds = calloc((size_t)n_fields + 1, sizeof(int));
    if (s->reading == NULL || s->carried == NULL || s->field_kinds == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (s->source.ops->field_codes(&s->source, s->field_kinds, NULL) < 0) {
        return -1;
    }
    if (sampler_pick_columns(s, fields, columns) < 0) {
        return -1;
    }
    if (growth_field != NULL && growth_field != Py_None) {
        s->growth_field = field_index(fields, growth_field);
        if (s->growth_field < 0) {
            return -1;
        }
    }
    s->take = s->source.push ? push_take : poll_all;
    if (s->source.ops->runs_python) {
        s->take_quietly = s->take;
        s->take = take_quietly;
    }
    threadtable_init(&s->readers,
                     sizeof(SamplerReader) + sizeof(int64_t) * (size_t)s->n_columns,
                     reader_idle);
    return 0;
}

void
sampler_dealloc(Sampler *s)
{
    if (s->source.ops != NULL) {
        sampler_stop(s);
    }
    threadtable_clear(&s->readers, NULL);
    source_close(&s->source);
    free(s->carried); free(s->field_kinds);
    s->carried = NULL; s->field_kinds = NULL;
    free(s->field_of); free(s->kinds); free(s->folds);
    free(s->reading); free(s->last_counter); free(s->polled);
    s->field_of = NULL; s->kinds = NULL; s->folds = NULL;
    s->reading = NULL; s->last_counter = NULL; s->polled = NULL;
}

static PyObject *
sampler_field_name(const Sampler *s, int field)
{
    return Py_NewRef(PyTuple_GET_ITEM(s->source.field_names, field));
}

PyObject *
sampler_columns(const Sampler *s)
{
    PyObject *names = PyTuple_New(s->n_columns);
    for (int c = 0; names != NULL && c < s->n_columns; c++) {
        PyObject *name = sampler_field_name(s, s->field_of[c]);
        if (name == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, c, name);
    }
    return names;
}

PyObject *
sampler_growth_name(const Sampler *s)
{
    if (s->growth_field < 0) {
        Py_RETURN_NONE;
    }
    return sampler_field_name(s, s->growth_field);
}

/* ---- sharing the peaks a reading resets --------------------------------- */

/* Samplers that are started.  Several may read one device (two profilers,
 * nested or side by side); each reading resets the device's peaks, so it
 * hands the peaks it saw to its peers, who would otherwise miss them. */
static Sampler *live_samplers;

static void
link_live(Sampler *s)
{
    if (!s->live) {
        s->next_live = live_samplers;
        live_samplers = s;
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
    for (Sampler *peer = live_samplers; peer != NULL; peer = peer->next_live) {
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

/* ---- control -------------------------------------------------------------- */

void
sampler_stop(Sampler *s)
{
    s->stops++;
    if (s->source.push) {
        close_readers(s);
    }
    Sampler **link = &live_samplers;
    while (*link != NULL && *link != s) {
        link = &(*link)->next_live;
    }
    if (*link == s) {
        *link = s->next_live;
    }
    s->next_live = NULL;
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
