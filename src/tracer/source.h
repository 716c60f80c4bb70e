/* The sampler's one kind of memory source.
 *
 * The contract (memlab/source.h) is a table of C functions without a
 * context: a compiled source keeps its state in its own static storage.  A
 * Python source is an object whose methods are called on it.  So the tracer
 * opens either once into a Source: the contract's calls with the Source as
 * their context, through one of two static tables (SourceOps) -- one that
 * forwards to a capsule's memlab_source, one that calls a Python object's
 * methods and converts their results.  The sampler calls through the table
 * and never asks which kind it holds.
 *
 * A call that fails returns -1.  A Python source's failed call leaves the
 * source's own exception set; a compiled source's sets none, except
 * prepare(), whose message becomes a RuntimeError.  The sampler raises what
 * is set on the control path and reports it with sys.unraisablehook on the
 * hot path (sampler.c), so the source's own error is the one seen. */
#ifndef MEMLAB_SOURCE_ADAPTER_H
#define MEMLAB_SOURCE_ADAPTER_H

#include "compat.h"
#include "memlab/source.h"

typedef struct Source Source;

/* memlab_source's calls, each with its Source (see source.h's contract for
 * what each does). */
typedef struct {
    /* Each field's memlab_field_kind into kinds and, unless units is NULL,
     * its memlab_field_unit into units: as the contract declares them for a
     * compiled source; from `kinds` (required) and `units` (default "count")
     * for a Python one.  Control path: -1 with an exception set. */
    int (*field_codes)(const Source *src, int *kinds, int *units);
    int (*prepare)(const Source *src, int device);   /* -1: exception set */
    int (*sample)(const Source *src, int device, int64_t *out);
    int (*reset_peaks)(const Source *src, int device);
    int (*open_reader)(const Source *src, int device);
    void (*close_reader)(const Source *src, int device, int reader);
    int (*read)(const Source *src, int device, int reader, int64_t *out);
    /* The calls run Python code: they may leave an exception set and must
     * not meet one in flight, they may let other threads run, and the
     * object's `fields` may differ between two openings. */
    int runs_python;
} SourceOps;

struct Source {
    const SourceOps *ops;            /* Borrowed: static.  NULL until opened. */
    const memlab_source *compiled;   /* Borrowed: static storage in the shim;
                                        NULL for a Python source */
    PyObject *object;                /* Owned. the capsule, or the Python source */
    PyObject *name;                  /* Owned. the source's name as it gives it */
    PyObject *field_names;           /* Owned. tuple: its fields as read once (a
                                        Python source's `fields` may change
                                        later; indices into these must not) */
    int n_fields;
    int push;                        /* offers open_reader, close_reader, read */
};

/* Open a capsule or a Python source: its name, fields and calls.  0, or -1
 * with an exception set; source_close() in either case. */
int source_open(Source *src, PyObject *object);
void source_close(Source *src);

/* The names of the kinds and units, indexed by their codes. */
extern const char *const memlab_kind_names[];
extern const char *const memlab_unit_names[];

/* Do a and b read the same fields of the same source?  Calls no Python
 * code. */
int source_same(const Source *a, const Source *b);

#endif /* MEMLAB_SOURCE_ADAPTER_H */
