/* The contract between the tracer (_tracer, C) and a memory source
 * (_torchshim, C++ over c10).  Plain C types only: nothing else crosses.
 *
 * A source is exported as a PyCapsule named MEMLAB_SOURCE_CAPSULE whose
 * pointer is a `const memlab_source *` with static storage duration. */
#ifndef MEMLAB_SOURCE_H
#define MEMLAB_SOURCE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEMLAB_SOURCE_ABI_VERSION 5
#define MEMLAB_SOURCE_CAPSULE "pytorch_memlab.memlab_source"

/* What one reading of a field means: the tracer folds it by its kind and
 * the reports write it by its unit, so neither parses the field's name. */
typedef enum {
    MEMLAB_LEVEL = 0,    /* a level now (".current", "max_split_size"): kept as read */
    MEMLAB_PEAK = 1,     /* the highest level since peaks were last reset/read */
    MEMLAB_COUNTER = 2,  /* a running total (".allocated", ".freed"): per-line deltas */
} memlab_field_kind;

typedef enum {
    MEMLAB_COUNT = 0,    /* blocks, segments, events */
    MEMLAB_BYTES = 1,
} memlab_field_unit;

/* What a listener is told about one block. */
typedef enum {
    MEMLAB_FREE = 0,     /* freed; size is its size, or -1 when the source
                            cannot tell yet (a MEMLAB_SIZED follows when the
                            listener returns 0) */
    MEMLAB_ALLOC = 1,    /* allocated; size is its size, or 0 when the
                            source cannot tell yet (a MEMLAB_SIZED follows) */
    MEMLAB_SIZED = 2,    /* the size of the block of the source's last FREE /
                            ALLOC that carried none, reported before any
                            other event of that device and on any thread */
} memlab_alloc_event;

/* Called by a source for each block it counts, on the thread that allocates
 * or frees it (MEMLAB_SIZED: any thread), without the GIL (perhaps under the
 * allocator's own lock): `source` is the source's name, `size` is in the
 * units of its active bytes, `event` a memlab_alloc_event.  Returns 1 when a
 * MEMLAB_FREE of unknown size needs no MEMLAB_SIZED (the listener knew the
 * block), else 0.  Must not block on anything but a short lock, allocate
 * through torch, or throw. */
typedef int (*memlab_alloc_listener)(const char *source, int device, uintptr_t ptr,
                                     int64_t size, int event);

typedef struct memlab_field {
    const char *name;    /* e.g. "active_bytes.all.peak" */
    int kind;            /* a memlab_field_kind (an int: its size is fixed) */
    int unit;            /* a memlab_field_unit */
} memlab_field;

/* One reader of allocator statistics for devices of one kind. */
typedef struct memlab_source {
    int abi_version;                 /* MEMLAB_SOURCE_ABI_VERSION */
    const char *name;                /* "cuda", "cpu", ... */
    int n_fields;                    /* length of fields and of sample()'s output */
    const memlab_field *fields;      /* what each value of sample()'s output is */

    /* Make `device` ready to be sampled (lazy CUDA init check, install the
     * CPU counting allocator...).  Called outside the hot path, GIL held.
     * Returns 0, or -1 with a message copied into err (NUL-terminated). */
    int (*prepare)(int device, char *err, int err_len);

    /* Write n_fields values for `device` into out.  Hot path: must not take
     * the GIL, allocate, or throw.  Returns 0, or -1 if the device cannot be
     * read (out is then left untouched). */
    int (*sample)(int device, int64_t *out);

    /* Reset every MEMLAB_PEAK field of `device` to its current level.
     * Accumulated counters are left alone.  Returns 0 or -1. */
    int (*reset_peaks)(int device);

    /* The push path; all three NULL when the source can only be polled.
     *
     * A reader is one thread's stack of profiled frames on one device.  It
     * owns a peak register that every allocation raises, so no reader ever
     * resets shared state (nor the user's own peak statistics).
     *
     * open_reader: a free register armed at the current levels; its id >= 0,
     * or -1 when none is free.  The caller then polls for that thread until
     * its profiled frames have all returned: sample(), followed by
     * reset_peaks() when a chosen column is a MEMLAB_PEAK field (a source
     * whose reset_peaks() fails makes those readings failures), counters
     * as the device's deltas.  Control path.
     * close_reader: give the register back.  Control path.
     * read: like sample(), except that every MEMLAB_PEAK field is this reader's
     * peak since its previous read (the register is then rearmed at the
     * current level), and every MEMLAB_COUNTER field counts only
     * what the calling thread allocated / freed since it started.  Hot path,
     * same rules as sample(). */
    int (*open_reader)(int device);
    void (*close_reader)(int device, int reader);
    int (*read)(int device, int reader, int64_t *out);

    /* The per-allocation push; NULL when not offered.  From this call on,
     * every block the source counts on `device` reaches `listener` (one
     * listener per process: a second call replaces it; NULL stops the pushes
     * of `device` alone), and *level is the device's active bytes now,
     * exactly: a block counted in it is not pushed, one pushed is not in it,
     * even while other threads allocate.  Control path.  0 or -1. */
    int (*listen)(int device, memlab_alloc_listener listener, int64_t *level);
} memlab_source;

#ifdef __cplusplus
}
#endif

#endif /* MEMLAB_SOURCE_H */
