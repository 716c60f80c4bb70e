/* The memory curve of one call: the line events of one outermost call of a
 * profiled function, in the order they ended, each with the levels at the
 * line's end and the peak inside the line.  Lines of nested profiled calls
 * are part of their caller's curve, marked with the callee. */
#ifndef MEMLAB_CURVE_H
#define MEMLAB_CURVE_H

#include "threadstack.h"

/* Points kept per curve.  Even: a full buffer is halved by merging pairs. */
#define MEMLAB_CURVE_MAX_POINTS 100000

/* Which outermost call a curve keeps. */
typedef enum {
    CURVE_OFF = 0,     /* record nothing */
    CURVE_PEAK,        /* the call whose line peak was highest (the first such) */
    CURVE_FIRST,
    CURVE_LAST,
    CURVE_NTH,         /* the nth outermost call, 1-based */
} curve_choice;

/* One kept point: a line event, or `merged` consecutive ones folded into
 * their maximum (line and callee of the one with the highest peak). */
typedef struct {
    int32_t line;
    int32_t callee;        /* id of the nested function's Curve; -1: the curve's own */
    int64_t active;        /* growth field's level at the line's end */
    int64_t reserved;      /* the reserved column's level at the line's end */
    int64_t peak;          /* the peak column's peak inside the line */
} CurvePoint;

/* The points of one call, bounded by merging. */
typedef struct {
    CurvePoint *points;    /* Owned. */
    Py_ssize_t n;
    Py_ssize_t cap;
    int64_t merged;        /* events per point: 1, then doubled at each halving */
    int64_t fill;          /* events folded into the last point */
    int64_t events;        /* line events added */
    int64_t peak;          /* highest peak added */
    int64_t call;          /* which outermost call, 1-based */
} CurveBuffer;

/* One profiled function's curves on the tracer's device. */
typedef struct Curve {
    LineTable *table;      /* Borrowed: the tracer's CodeMap owns it. */
    int id;                /* index in CurveSet.curves */
    int has_kept;
    CurveBuffer kept;      /* the chosen call, once it has returned */
    CurveBuffer live;      /* the call being recorded */
    ThreadStack *owner;    /* Borrowed. the stack whose frame records `live`; NULL: none */
    int owner_depth;       /* that frame's index in owner */
    int64_t calls;         /* outermost calls begun */
} Curve;

/* Every curve of one tracer, and what to record. */
typedef struct {
    curve_choice choice;
    int64_t nth;           /* CURVE_NTH's call */
    int reserved_column;   /* column read as the reserved level; -1: the active level */
    int peak_column;       /* column read as the line's peak; -1: the active level */
    Curve **curves;        /* Owned, and each curve too; by id */
    int n_curves;
    int cap_curves;
    int *slots;            /* Owned. open addressing: table pointer -> id, -1 empty */
    int n_slots;           /* power of two, > 2 * n_curves */
    Py_ssize_t memory_errors;   /* points or curves lost to a failed allocation */
} CurveSet;

void curveset_init(CurveSet *set);
void curveset_dealloc(CurveSet *set);
/* Forget every kept curve; a call being recorded starts afresh. */
void curveset_clear(CurveSet *set);

/* Hot path (never raises): `stack`'s frame at `depth` was just pushed. */
void curve_frame_pushed(CurveSet *set, ThreadStack *stack, int depth);
/* Hot path: the frame at `depth` is about to be popped. */
void curve_frame_popping(CurveSet *set, ThreadStack *stack, int depth);
/* Hot path: frame i's `line` ended at `level` with figures `pending`. */
void curve_line_ended(CurveSet *set, ThreadStack *stack, int i, int line, int64_t level,
                      const int64_t *pending);

/* [(code, (points, merged, call, calls, events)), ...] for every function
 * with a kept curve; each point (line, active, reserved, peak, callee code
 * or None).  NULL with an exception set. */
PyObject *curveset_to_list(const CurveSet *set);

/* Parse Tracer(curve=...): None, "peak", "first", "last" or an int >= 1.
 * 0, or -1 with ValueError / TypeError set. */
int curveset_parse_choice(CurveSet *set, PyObject *arg);

#endif /* MEMLAB_CURVE_H */
