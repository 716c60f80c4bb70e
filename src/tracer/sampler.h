/* Reads one device of a memory source and turns readings into per-interval
 * figures for the chosen columns. */
#ifndef MEMLAB_SAMPLER_H
#define MEMLAB_SAMPLER_H

#include "linetable.h"
#include "source.h"
#include "threadtable.h"

/* A column's reading becomes an interval figure by its field's kind, which
 * the source declares (memlab_field_kind): a peak is the peak since this
 * reader's previous reading, a counter the delta since the last sample, a
 * level the reading itself.  A push source reports each thread's own peak
 * and counters, so no reading resets anything; a polled source resets its
 * peaks on each sample, and so does a thread of a push source that found no
 * free register (source.h).  A poll reads the whole device, so what it saw
 * since the previous poll belongs to every line open on a polling thread,
 * whichever thread polled (sampler_take). */

/* SamplerReader.reader when it holds no register.  Only an idle slot may
 * change hands: while a Python source's open_reader() runs, other threads do
 * too, and must not take the slot. */
#define READER_IDLE (-1)       /* closed; the slot is free for any thread */
#define READER_OPENING (-2)    /* its thread is in open_reader() */
#define READER_POLLED (-3)     /* none was free: its thread polls sample() */

/* One thread's reader of a push source: the source's peak register and the
 * thread's counter readings at its previous read. */
typedef struct {
    uint64_t thread;               /* PyThreadState_GetID(); first, as ThreadTable asks */
    int device;                    /* the device `reader` belongs to */
    int reader;                    /* the source's register, or READER_* */
    int64_t last_counter[];        /* n_columns */
} SamplerReader;

struct Sampler;
/* One way of reading, chosen at init by the source's kind (push or poll,
 * compiled or Python): sampler_take's work without a test per event. */
typedef int (*sampler_take_fn)(struct Sampler *s, uint64_t thread, int64_t *interval);

typedef struct Sampler {
    Source source;                 /* Owned. what it reads, whichever kind */
    sampler_take_fn take;          /* chosen at init */
    sampler_take_fn take_quietly;  /* a Python source's: what `take` wraps */
    int device;
    int n_columns;
    int *field_of;                 /* Owned. column -> field index */
    int *kinds;                    /* Owned. per column: a memlab_field_kind */
    memlab_fold *folds;            /* Owned. per column */
    int growth_field;              /* field index, -1 for none */
    int has_peaks;
    int64_t *reading;              /* Owned. n_fields: the latest sample */
    int64_t *last_counter;         /* Owned. n_columns: counter readings at the
                                      previous poll, any thread's */
    int64_t *polled;               /* Owned. n_columns: the latest poll's interval */
    int *field_kinds;              /* Owned. n_fields: memlab_field_kind */
    int64_t *carried;              /* Owned. n_fields: peaks a peer read (and reset)
                                      since our last reading */
    int has_carried;
    ThreadTable readers;           /* Owned. SamplerReader per thread; push sources */
    struct Sampler *next_live;     /* Borrowed. started samplers, to share peaks */
    int live;
    unsigned long stops;           /* sampler_stop() calls: a caller that let a
                                      Python source run compares it to learn
                                      that the tracer was disabled meanwhile */
} Sampler;

/* Python-facing helpers; return NULL / -1 with an exception set. */
PyObject *sampler_source_info(PyObject *source);
/* ((name, kind, unit), ...) of a source's fields, kind and unit as str. */
PyObject *sampler_field_table(PyObject *source);
int sampler_init(Sampler *s, PyObject *source, int device, PyObject *columns,
                 PyObject *growth_field);
void sampler_dealloc(Sampler *s);
PyObject *sampler_columns(const Sampler *s);
PyObject *sampler_growth_name(const Sampler *s);

/* sampler_init's choice of s->take by the source's kind (sampler_read.c). */
void sampler_choose_take(Sampler *s);

/* Control path: prepare the device, take a first reading, reset peaks. */
int sampler_start(Sampler *s);

/* Control path: stop sharing readings (disable, dealloc). */
void sampler_stop(Sampler *s);

/* sampler_take's result when it polled the device: s->polled then holds the
 * device's interval since the previous poll (peaks, counters; levels as
 * read), which the open lines of every polling thread (sampler_polls) share,
 * not only `thread`'s. */
#define SAMPLER_POLLED 1

/* Hot path: interval figures of `thread`'s reader into `interval`, growth
 * field's level into *level.  Only the calling thread's own counters can be
 * read through a register, so for another thread they read 0.  Never
 * raises; returns 0, SAMPLER_POLLED, or -1 if the device could not be read. */
static inline int
sampler_take(Sampler *s, uint64_t thread, int64_t *interval, int64_t *level)
{
    int rc = s->take(s, thread, interval);
    if (rc >= 0) {
        *level = s->growth_field >= 0 ? s->reading[s->growth_field] : 0;
    }
    return rc;
}

/* Does `thread` poll the device (a polled source's every thread, a push
 * source's thread that found no free register)?  Hot path. */
int sampler_polls(const Sampler *s, uint64_t thread);

/* `thread` has no profiled frame left: give its reader back. */
void sampler_release(Sampler *s, uint64_t thread);

#endif /* MEMLAB_SAMPLER_H */
