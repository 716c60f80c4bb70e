#include "sampler.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int python_values(Sampler *s, PyObject *values);

/* ---- the source's identity -------------------------------------------- */

static const memlab_source *
capsule_source(PyObject *source)
{
    if (!PyCapsule_IsValid(source, MEMLAB_SOURCE_CAPSULE)) {
        return NULL;
    }
    const memlab_source *src = PyCapsule_GetPointer(source, MEMLAB_SOURCE_CAPSULE);
    if (src == NULL) {
        return NULL;
    }
    if (src->abi_version != MEMLAB_SOURCE_ABI_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "memory source ABI %d, tracer expects %d: rebuild pytorch_memlab "
                     "from its checkout; this prints the exact command: python -c "
                     "\"import pytorch_memlab._install as i; print(i.rebuild_command())\"",
                     src->abi_version, MEMLAB_SOURCE_ABI_VERSION);
        return NULL;
    }
    return src;
}

/* (name, fields) as Python objects; NULL with an exception set. */
PyObject *
sampler_source_info(PyObject *source)
{
    if (PyCapsule_CheckExact(source)) {
        const memlab_source *src = capsule_source(source);
        if (src == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "capsule is not a pytorch_memlab memory source");
            }
            return NULL;
        }
        PyObject *fields = PyTuple_New(src->n_fields);
        if (fields == NULL) {
            return NULL;
        }
        for (int i = 0; i < src->n_fields; i++) {
            PyObject *name = PyUnicode_FromString(src->fields[i].name);
            if (name == NULL) {
                Py_DECREF(fields);
                return NULL;
            }
            PyTuple_SET_ITEM(fields, i, name);
        }
        return Py_BuildValue("(sN)", src->name, fields);
    }
    PyObject *name = PyObject_GetAttrString(source, "name");
    PyObject *fields = name ? PyObject_GetAttrString(source, "fields") : NULL;
    PyObject *tuple = fields ? PySequence_Tuple(fields) : NULL;
    Py_XDECREF(fields);
    if (tuple == NULL) {
        Py_XDECREF(name);
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_SetString(PyExc_TypeError, "a memory source is a pytorch_memlab capsule "
                            "or an object with name, fields, prepare(), sample(), reset_peaks()");
        }
        return NULL;
    }
    return Py_BuildValue("(NN)", name, tuple);
}

/* ---- what each field is ------------------------------------------------ */

static const char *const kind_names[] = {"level", "peak", "counter"};
static const char *const unit_names[] = {"count", "bytes"};
#define N_KINDS 3
#define N_UNITS 2
#define KINDS_ACCEPTED "'level', 'peak' or 'counter'"
#define UNITS_ACCEPTED "'count' or 'bytes'"

/* A Python source's `attr` (e.g. kinds = ("level", "peak")) as codes, one per
 * field: each str must be one of `names`.  With `fallback` >= 0, a missing
 * attribute gives every field that code.  0, or -1 with an exception set. */
static int
python_codes(PyObject *source, const char *attr, const char *const *names, int n_names,
             const char *accepted, int fallback, int n_fields, int *out)
{
    PyObject *value = NULL, *seq = NULL;
    int ret = -1;
    value = PyObject_GetAttrString(source, attr);
    if (value == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
        if (fallback < 0) {
            PyErr_Format(PyExc_TypeError, "a Python memory source needs `%s`: %s "
                         "for each field", attr, accepted);
            return -1;
        }
        for (int f = 0; f < n_fields; f++) {
            out[f] = fallback;
        }
        return 0;
    }
    seq = PySequence_Fast(value, "a memory source's kinds / units must be a sequence of str");
    if (seq == NULL) {
        goto error;
    }
    if (PySequence_Fast_GET_SIZE(seq) != n_fields) {
        PyErr_Format(PyExc_ValueError, "memory source: %zd %s for %d fields; expected one each",
                     PySequence_Fast_GET_SIZE(seq), attr, n_fields);
        goto error;
    }
    for (int f = 0; f < n_fields; f++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, f);
        const char *text = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (text == NULL && PyErr_Occurred()) {
            goto error;
        }
        out[f] = -1;
        for (int k = 0; text != NULL && k < n_names; k++) {
            if (strcmp(text, names[k]) == 0) {
                out[f] = k;
            }
        }
        if (out[f] < 0) {
            PyErr_Format(PyExc_ValueError, "memory source: %s[%d] is %R; expected %s",
                         attr, f, item, accepted);
            goto error;
        }
    }
    ret = 0;
error:
    Py_XDECREF(seq);
    Py_DECREF(value);
    return ret;
}

/* Kind and unit of each of a source's n_fields fields: from the contract for
 * a capsule, from `kinds` (required) and `units` (default "count") for a
 * Python source.  `units` may be NULL.  0, or -1 with an exception set. */
static int
source_field_codes(PyObject *source, const memlab_source *csrc, int n_fields,
                   int *kinds, int *units)
{
    if (csrc == NULL) {
        if (python_codes(source, "kinds", kind_names, N_KINDS, KINDS_ACCEPTED, -1, n_fields,
                         kinds) < 0) {
            return -1;
        }
        return units == NULL ? 0
               : python_codes(source, "units", unit_names, N_UNITS, UNITS_ACCEPTED, MEMLAB_COUNT,
                              n_fields, units);
    }
    for (int f = 0; f < n_fields; f++) {
        const memlab_field *field = &csrc->fields[f];
        if (field->kind < 0 || field->kind >= N_KINDS || field->unit < 0
            || field->unit >= N_UNITS) {
            PyErr_Format(PyExc_ValueError, "%s source: field %s has kind %d, unit %d",
                         csrc->name, field->name, field->kind, field->unit);
            return -1;
        }
        kinds[f] = field->kind;
        if (units != NULL) {
            units[f] = field->unit;
        }
    }
    return 0;
}

PyObject *
sampler_field_table(PyObject *source)
{
    PyObject *info = sampler_source_info(source), *table = NULL;
    if (info == NULL) {
        return NULL;
    }
    PyObject *fields = PyTuple_GET_ITEM(info, 1);
    int n = (int)PyTuple_GET_SIZE(fields);
    int *kinds = calloc((size_t)n + 1, sizeof(int));
    int *units = calloc((size_t)n + 1, sizeof(int));
    if (kinds == NULL || units == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    const memlab_source *csrc = PyCapsule_CheckExact(source) ? capsule_source(source) : NULL;
    if (source_field_codes(source, csrc, n, kinds, units) < 0) {
        goto error;
    }
    table = PyTuple_New(n);
    for (int f = 0; table != NULL && f < n; f++) {
        PyObject *row = Py_BuildValue("(Oss)", PyTuple_GET_ITEM(fields, f),
                                      kind_names[kinds[f]], unit_names[units[f]]);
        if (row == NULL) {
            Py_CLEAR(table);
            break;
        }
        PyTuple_SET_ITEM(table, f, row);
    }
error:
    free(kinds);
    free(units);
    Py_DECREF(info);
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

int
sampler_init(Sampler *s, PyObject *source, int device, PyObject *columns,
             PyObject *growth_field)
{
    int ret = -1;
    PyObject *info = sampler_source_info(source);
    if (info == NULL) {
        return -1;
    }
    PyObject *fields = PyTuple_GET_ITEM(info, 1);
    s->csource = PyCapsule_CheckExact(source) ? capsule_source(source) : NULL;
    s->owner = Py_NewRef(source);
    if (s->csource != NULL) {
        s->push = s->csource->read != NULL && s->csource->open_reader != NULL
                  && s->csource->close_reader != NULL;
    }
    else {
        /* A Python source pushes if it has all three reader methods. */
        s->push = PyObject_HasAttrString(source, "open_reader")
                  && PyObject_HasAttrString(source, "close_reader")
                  && PyObject_HasAttrString(source, "read");
    }
    s->field_names = Py_NewRef(fields);
    s->device = device;
    s->n_fields = (int)PyTuple_GET_SIZE(fields);
    s->growth_field = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(fields, i))) {
            PyErr_SetString(PyExc_TypeError, "source field names must be str");
            goto error;
        }
    }
    s->reading = calloc((size_t)s->n_fields + 1, sizeof(int64_t));
    s->carried = calloc((size_t)s->n_fields + 1, sizeof(int64_t));
    s->field_kinds = calloc((size_t)s->n_fields + 1, sizeof(int));
    if (s->reading == NULL || s->carried == NULL || s->field_kinds == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    if (source_field_codes(source, s->csource, s->n_fields, s->field_kinds, NULL) < 0) {
        goto error;
    }
    if (sampler_pick_columns(s, fields, columns) < 0) {
        goto error;
    }
    if (growth_field != NULL && growth_field != Py_None) {
        s->growth_field = field_index(fields, growth_field);
        if (s->growth_field < 0) {
            goto error;
        }
    }
    ret = 0;
error:
    Py_DECREF(info);
    return ret;
}

void
sampler_dealloc(Sampler *s)
{
    sampler_stop(s);
    for (int r = 0; r < s->n_readers; r++) {
        free(s->readers[r]->last_counter);
        free(s->readers[r]);
    }
    free(s->readers);
    s->readers = NULL;
    s->n_readers = 0;
    Py_CLEAR(s->owner);
    Py_CLEAR(s->field_names);
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
    return Py_NewRef(PyTuple_GET_ITEM(s->field_names, field));
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

/* ---- reading the device -------------------------------------------------- */

/* Python source: sample(device) -> sequence of ints.  Fallback path only. */
static int
python_read(Sampler *s)
{
    PyObject *values = PyObject_CallMethod(s->owner, "sample", "i", s->device);
    return values != NULL ? python_values(s, values) : -1;
}

/* values (a new reference, consumed) -> s->reading.  0, or -1 with an
 * exception set. */
static int
python_values(Sampler *s, PyObject *values)
{
    int ret = -1;
    PyObject *seq = NULL;
    seq = PySequence_Fast(values, "sample() / read() must return a sequence of ints");
    if (seq == NULL) {
        goto error;
    }
    if (PySequence_Fast_GET_SIZE(seq) != s->n_fields) {
        PyErr_Format(PyExc_ValueError, "sample() / read() returned %zd values for %d fields",
                     PySequence_Fast_GET_SIZE(seq), s->n_fields);
        goto error;
    }
    for (int f = 0; f < s->n_fields; f++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, f));
        if (v == -1 && PyErr_Occurred()) {
            goto error;
        }
        s->reading[f] = (int64_t)v;
    }
    ret = 0;
error:
    Py_XDECREF(seq);
    Py_DECREF(values);
    return ret;
}

static int
python_reset(Sampler *s)
{
    PyObject *r = PyObject_CallMethod(s->owner, "reset_peaks", "i", s->device);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* Samplers that are started.  Several may read one device (two profilers,
 * nested or side by side); each reading resets the device's peaks, so it
 * hands the peaks it saw to its peers, who would otherwise miss them. */
static Sampler *live_samplers;

/* Do a and b read the same fields of one device?  A Python source's fields
 * may have changed between two Tracer()s: then indices differ in meaning (and
 * in range), and nothing is shared. */
static int
same_device(const Sampler *a, const Sampler *b)
{
    if (a->device != b->device) {
        return 0;
    }
    if (a->csource != NULL) {
        return a->csource == b->csource;
    }
    if (a->owner != b->owner || a->n_fields != b->n_fields) {
        return 0;
    }
    for (int f = 0; f < a->n_fields && a->field_names != b->field_names; f++) {
        /* str against str: compares the data, calls no Python code */
        if (PyUnicode_Compare(PyTuple_GET_ITEM(a->field_names, f),
                              PyTuple_GET_ITEM(b->field_names, f)) != 0) {
            return 0;
        }
    }
    return 1;
}

static void
share_peaks(const Sampler *s)
{
    for (Sampler *peer = live_samplers; peer != NULL; peer = peer->next_live) {
        if (peer == s || !same_device(peer, s)) {
            continue;
        }
        for (int f = 0; f < s->n_fields; f++) {
            if (s->field_kinds[f] == MEMLAB_PEAK && s->reading[f] > peer->carried[f]) {
                peer->carried[f] = s->reading[f];
            }
        }
        peer->has_carried = 1;
    }
}

/* ---- push readers -------------------------------------------------------- */

/* The reader calls, for a capsule or a Python source.  A Python source's
 * error is reported with sys.unraisablehook, never propagated. */
static int
src_open_reader(Sampler *s)
{
    if (s->csource != NULL) {
        return s->csource->open_reader(s->device);
    }
    memlab_saved_exc saved;
    memlab_save_exc(&saved);
    int reader = -1;
    PyObject *r = PyObject_CallMethod(s->owner, "open_reader", "i", s->device);
    if (r != NULL) {
        long id = PyLong_AsLong(r);
        Py_DECREF(r);
        if (id > INT_MAX) {
            /* an int register id, or it would name another register */
            PyErr_Format(PyExc_OverflowError, "open_reader() returned %ld: "
                         "a register id is at most %d", id, INT_MAX);
        }
        else if (id >= 0) {
            reader = (int)id;
        }
    }
    if (PyErr_Occurred()) {
        PyErr_WriteUnraisable(s->owner);
    }
    memlab_restore_exc(&saved);
    return reader < 0 ? -1 : reader;
}

static void
src_close_reader(Sampler *s, int device, int reader)
{
    if (s->csource != NULL) {
        s->csource->close_reader(device, reader);
        return;
    }
    memlab_saved_exc saved;
    memlab_save_exc(&saved);
    PyObject *r = PyObject_CallMethod(s->owner, "close_reader", "ii", device, reader);
    if (r == NULL) {
        PyErr_WriteUnraisable(s->owner);
    }
    Py_XDECREF(r);
    memlab_restore_exc(&saved);
}

static int
src_read(Sampler *s, int reader)
{
    if (s->csource != NULL) {
        return s->csource->read(s->device, reader, s->reading);
    }
    memlab_saved_exc saved;
    memlab_save_exc(&saved);
    PyObject *values = PyObject_CallMethod(s->owner, "read", "ii", s->device, reader);
    int rc = values != NULL ? python_values(s, values) : -1;
    if (rc < 0) {
        PyErr_WriteUnraisable(s->owner);
    }
    memlab_restore_exc(&saved);
    return rc;
}

void
sampler_release(Sampler *s, uint64_t thread)
{
    if (!s->push) {
        return;
    }
    for (int r = 0; r < s->n_readers; r++) {
        SamplerReader *rd = s->readers[r];
        if (rd->thread == thread && rd->reader >= 0) {
            src_close_reader(s, rd->device, rd->reader);
            rd->reader = READER_IDLE;
        }
        else if (rd->thread == thread && rd->reader == READER_POLLED) {
            rd->reader = READER_IDLE;     /* a register may be free next time */
        }
    }
}

/* A slot whose open_reader() is running is left to its thread, which
 * closes what it gets once it sees the sampler stopped (push_take). */
static void
close_readers(Sampler *s)
{
    for (int r = 0; r < s->n_readers; r++) {
        SamplerReader *rd = s->readers[r];
        if (rd->reader >= 0) {
            src_close_reader(s, rd->device, rd->reader);
            rd->reader = READER_IDLE;
        }
        else if (rd->reader == READER_POLLED) {
            rd->reader = READER_IDLE;
        }
    }
}

/* `thread`'s reader slot, made if needed; NULL when out of memory. */
static SamplerReader *
reader_slot(Sampler *s, uint64_t thread)
{
    if (s->n_readers > 0 && s->readers[s->last_reader]->thread == thread) {
        return s->readers[s->last_reader];
    }
    int idle = -1;
    for (int r = 0; r < s->n_readers; r++) {
        if (s->readers[r]->thread == thread) {
            s->last_reader = r;
            return s->readers[r];
        }
        if (idle < 0 && s->readers[r]->reader == READER_IDLE) {
            idle = r;
        }
    }
    if (idle < 0) {
        /* Readers are allocated one by one and never move: a Python source's
         * read() may let another thread add a reader while this one holds a
         * pointer to its own. */
        SamplerReader **grown = realloc(s->readers, sizeof(SamplerReader *) * (size_t)(s->n_readers + 1));
        if (grown == NULL) {
            return NULL;
        }
        s->readers = grown;
        SamplerReader *rd = calloc(1, sizeof(SamplerReader));
        int64_t *last = calloc((size_t)s->n_columns + 1, sizeof(int64_t));
        if (rd == NULL || last == NULL) {
            free(rd);
            free(last);
            return NULL;
        }
        rd->last_counter = last;
        rd->reader = READER_IDLE;
        idle = s->n_readers;
        grown[idle] = rd;
        s->n_readers++;
    }
    s->readers[idle]->thread = thread;
    s->last_reader = idle;
    return s->readers[idle];
}

static int sampler_poll(Sampler *s);

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
 * free), or -1. */
static int
push_take(Sampler *s, uint64_t thread, int64_t *interval)
{
    SamplerReader *rd = reader_slot(s, thread);
    if (rd == NULL) {
        return -1;
    }
    int own = thread == PyThreadState_GetID(PyThreadState_Get());
    int fresh = rd->reader == READER_IDLE;
    if (fresh) {
        unsigned long stops = s->stops;
        rd->reader = READER_OPENING;
        rd->device = s->device;
        int reader = src_open_reader(s);
        if (s->stops != stops) {
            /* Stopped meanwhile: close_readers() left this slot to us. */
            if (reader >= 0) {
                src_close_reader(s, rd->device, reader);
            }
            rd->reader = READER_IDLE;
            return -1;
        }
        rd->reader = reader < 0 ? READER_POLLED : reader;
    }
    if (rd->reader == READER_POLLED) {
        return poll_take(s, fresh, interval);
    }
    if (src_read(s, rd->reader) < 0) {
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

void
sampler_stop(Sampler *s)
{
    s->stops++;
    if (s->push) {
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

static int
sampler_read_reset(Sampler *s);

/* Read and reset; a Python source's error is reported, never propagated. */
static int
sampler_read(Sampler *s)
{
    int rc = sampler_read_reset(s);
    if (rc == 0 && s->has_peaks) {
        share_peaks(s);
    }
    return rc;
}

/* Poll the whole device: read and reset, and put in s->polled what it saw
 * since the previous poll of this sampler (from any thread): a peak column
 * the peak since then (a peer's reading included), a counter its delta, a
 * level the reading.  0, or -1. */
static int
sampler_poll(Sampler *s)
{
    if (sampler_read(s) < 0) {
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
    if (s->has_carried) {
        memset(s->carried, 0, sizeof(int64_t) * (size_t)s->n_fields);
        s->has_carried = 0;
    }
    return 0;
}

static int
sampler_read_reset(Sampler *s)
{
    if (s->csource != NULL) {
        if (s->csource->sample(s->device, s->reading) < 0) {
            return -1;
        }
        return s->has_peaks ? s->csource->reset_peaks(s->device) : 0;
    }
    memlab_saved_exc saved;
    memlab_save_exc(&saved);
    int rc = python_read(s);
    if (rc == 0 && s->has_peaks) {
        rc = python_reset(s);
    }
    if (rc < 0) {
        PyErr_WriteUnraisable(s->owner);
    }
    memlab_restore_exc(&saved);
    return rc;
}

static int
push_start(Sampler *s)
{
    /* Readers open lazily on each thread's first event; a first reading
     * gives the growth field's level.  Nothing is reset. */
    close_readers(s);
    int rc;
    if (s->csource != NULL) {
        rc = s->csource->sample(s->device, s->reading);
    }
    else if ((rc = python_read(s)) < 0) {
        PyErr_Clear();
    }
    if (rc < 0) {
        PyErr_Format(PyExc_RuntimeError, "cannot read device %d of the memory source",
                     s->device);
        return -1;
    }
    /* Live too: a thread that finds no free register polls, and must get
     * the peaks a peer's poll reset. */
    if (!s->live) {
        s->next_live = live_samplers;
        live_samplers = s;
        s->live = 1;
    }
    s->has_carried = 0;
    memset(s->carried, 0, sizeof(int64_t) * (size_t)s->n_fields);
    return 0;
}

int
sampler_start(Sampler *s)
{
    if (s->csource != NULL) {
        char err[256] = {0};
        if (s->csource->prepare(s->device, err, (int)sizeof(err)) < 0) {
            PyErr_Format(PyExc_RuntimeError, "%s device %d: %s", s->csource->name,
                         s->device, err[0] ? err : "cannot be read");
            return -1;
        }
    }
    else {
        PyObject *r = PyObject_CallMethod(s->owner, "prepare", "i", s->device);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
    }
    if (s->push) {
        return push_start(s);
    }
    if (!s->live) {
        s->next_live = live_samplers;
        live_samplers = s;
        s->live = 1;
    }
    if (sampler_read(s) < 0) {
        sampler_stop(s);
        PyErr_Format(PyExc_RuntimeError, "cannot read device %d of the memory source",
                     s->device);
        return -1;
    }
    s->has_carried = 0;
    memset(s->carried, 0, sizeof(int64_t) * (size_t)s->n_fields);
    for (int c = 0; c < s->n_columns; c++) {
        s->last_counter[c] = s->reading[s->field_of[c]];
    }
    return 0;
}

int
sampler_take(Sampler *s, uint64_t thread, int64_t *interval, int64_t *level)
{
    if (s->push) {
        int rc = push_take(s, thread, interval);
        if (rc >= 0) {
            *level = s->growth_field >= 0 ? s->reading[s->growth_field] : 0;
        }
        return rc;
    }
    if (sampler_poll(s) < 0) {
        return -1;
    }
    memcpy(interval, s->polled, sizeof(int64_t) * (size_t)s->n_columns);
    *level = s->growth_field >= 0 ? s->reading[s->growth_field] : 0;
    return SAMPLER_POLLED;
}

int
sampler_polls(const Sampler *s, uint64_t thread)
{
    if (!s->push) {
        return 1;
    }
    for (int r = 0; r < s->n_readers; r++) {
        if (s->readers[r]->thread == thread) {
            return s->readers[r]->reader == READER_POLLED;
        }
    }
    return 0;
}
