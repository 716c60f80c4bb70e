/* Recording the memory curve of one call per profiled function (curve.h).
 *
 * Every outermost call the choice may keep is recorded into `live`; when it
 * returns it replaces `kept` or is dropped.  Points are appended at every
 * line commit of the recording frame or of any profiled frame above it on
 * the same stack, so a nested call's lines sit inside its caller's curve. */
#include "curve.h"

#include <stdlib.h>
#include <string.h>

/* A live buffer at most this large is kept for the next call rather than
 * freed: small functions called often would otherwise pay malloc and free
 * per call.  A larger one is freed as soon as its call is dropped. */
#define CURVE_REUSE_POINTS 4096
#define CURVE_FIRST_CAP 64

void
curveset_init(CurveSet *set)
{
    memset(set, 0, sizeof(*set));
    set->reserved_column = -1;
    set->peak_column = -1;
}

static void
buffer_free(CurveBuffer *b)
{
    free(b->points);
    memset(b, 0, sizeof(*b));
}

static void
buffer_start(CurveBuffer *b, int64_t call)
{
    b->n = 0;
    b->merged = 1;
    b->fill = 0;
    b->events = 0;
    b->peak = INT64_MIN;
    b->call = call;
}

void
curveset_dealloc(CurveSet *set)
{
    for (int i = 0; i < set->n_curves; i++) {
        buffer_free(&set->curves[i]->kept);
        buffer_free(&set->curves[i]->live);
        free(set->curves[i]);
    }
    free(set->curves);
    free(set->slots);
    set->curves = NULL;
    set->slots = NULL;
    set->n_curves = set->cap_curves = set->n_slots = 0;
}

void
curveset_clear(CurveSet *set)
{
    for (int i = 0; i < set->n_curves; i++) {
        Curve *c = set->curves[i];
        buffer_free(&c->kept);
        c->has_kept = 0;
        c->calls = c->owner != NULL ? 1 : 0;
        if (c->owner != NULL) {
            buffer_start(&c->live, 1);
        }
    }
    set->memory_errors = 0;
}

/* ---- table -> curve ------------------------------------------------------ */

static size_t
slot_of(const void *table, int n_slots)
{
    return ((size_t)table >> 4) & ((size_t)n_slots - 1);
}

static int
rehash(CurveSet *set, int n_slots)
{
    int *slots = malloc(sizeof(int) * (size_t)n_slots);
    if (slots == NULL) {
        return -1;
    }
    memset(slots, -1, sizeof(int) * (size_t)n_slots);
    for (int id = 0; id < set->n_curves; id++) {
        size_t i = slot_of(set->curves[id]->table, n_slots);
        while (slots[i] >= 0) {
            i = (i + 1) & ((size_t)n_slots - 1);
        }
        slots[i] = id;
    }
    free(set->slots);
    set->slots = slots;
    set->n_slots = n_slots;
    return 0;
}

/* The curve of `table`, made on its first call; NULL when out of memory. */
static Curve *
curve_of(CurveSet *set, LineTable *table)
{
    if (set->n_slots > 0) {
        size_t i = slot_of(table, set->n_slots);
        for (int id; (id = set->slots[i]) >= 0; i = (i + 1) & ((size_t)set->n_slots - 1)) {
            if (set->curves[id]->table == table) {
                return set->curves[id];
            }
        }
    }
    if (set->n_curves == set->cap_curves) {
        int cap = set->cap_curves ? 2 * set->cap_curves : 8;
        Curve **grown = realloc(set->curves, sizeof(Curve *) * (size_t)cap);
        if (grown == NULL) {
            return NULL;
        }
        set->curves = grown;
        set->cap_curves = cap;
    }
    if (2 * (set->n_curves + 1) >= set->n_slots
        && rehash(set, set->n_slots ? 2 * set->n_slots : 16) < 0) {
        return NULL;
    }
    Curve *c = calloc(1, sizeof(Curve));
    if (c == NULL) {
        return NULL;
    }
    c->table = table;
    c->id = set->n_curves++;
    set->curves[c->id] = c;
    size_t i = slot_of(table, set->n_slots);
    while (set->slots[i] >= 0) {
        i = (i + 1) & ((size_t)set->n_slots - 1);
    }
    set->slots[i] = c->id;
    return c;
}

/* ---- points -------------------------------------------------------------- */

/* Fold `p` into `into`: each figure's maximum; the line of the higher peak. */
static void
point_fold(CurvePoint *into, const CurvePoint *p)
{
    if (p->peak > into->peak) {
        into->peak = p->peak;
        into->line = p->line;
        into->callee = p->callee;
    }
    if (p->active > into->active) {
        into->active = p->active;
    }
    if (p->reserved > into->reserved) {
        into->reserved = p->reserved;
    }
}

/* A full buffer: merge neighbours, so each point covers twice the events. */
static void
buffer_halve(CurveBuffer *b)
{
    Py_ssize_t half = b->n / 2;
    for (Py_ssize_t k = 0; k < half; k++) {
        CurvePoint merged = b->points[2 * k];
        point_fold(&merged, &b->points[2 * k + 1]);
        b->points[k] = merged;
    }
    b->n = half;
    b->merged *= 2;
    b->fill = b->merged;
}

/* Returns -1 when out of memory (the point is lost, counted by the caller). */
static int
buffer_add(CurveBuffer *b, const CurvePoint *p)
{
    b->events++;
    if (p->peak > b->peak) {
        b->peak = p->peak;
    }
    if (b->n > 0 && b->fill < b->merged) {
        point_fold(&b->points[b->n - 1], p);
        b->fill++;
        return 0;
    }
    if (b->n == MEMLAB_CURVE_MAX_POINTS) {
        buffer_halve(b);
    }
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : CURVE_FIRST_CAP;
        if (cap > MEMLAB_CURVE_MAX_POINTS) {
            cap = MEMLAB_CURVE_MAX_POINTS;
        }
        CurvePoint *grown = realloc(b->points, sizeof(CurvePoint) * (size_t)cap);
        if (grown == NULL) {
            return -1;
        }
        b->points = grown;
        b->cap = cap;
    }
    b->points[b->n++] = *p;
    b->fill = 1;
    return 0;
}

/* ---- events -------------------------------------------------------------- */

static int
wants_call(const CurveSet *set, const Curve *c)
{
    switch (set->choice) {
    case CURVE_PEAK:
    case CURVE_LAST:
        return 1;
    case CURVE_FIRST:
        return c->calls == 1;
    case CURVE_NTH:
        return c->calls == set->nth;
    case CURVE_OFF:
        break;
    }
    return 0;
}

void
curve_frame_pushed(CurveSet *set, ThreadStack *stack, int depth)
{
    Frame *f = &stack->frames[depth];
    f->curve = NULL;
    if (set->choice == CURVE_OFF) {
        return;
    }
    Curve *c = curve_of(set, f->table);
    if (c == NULL) {
        set->memory_errors++;
        return;
    }
    f->curve = c;
    /* Outermost: no frame of the same function below it on this stack.  A
     * call on another thread while one is recorded is counted, not recorded. */
    for (int j = 0; j < depth; j++) {
        if (stack->frames[j].table == f->table) {
            return;
        }
    }
    c->calls++;
    if (c->owner == NULL && wants_call(set, c)) {
        c->owner = stack;
        c->owner_depth = depth;
        buffer_start(&c->live, c->calls);
    }
}

void
curve_frame_popping(CurveSet *set, ThreadStack *stack, int depth)
{
    Curve *c = stack->frames[depth].curve;
    if (c == NULL || c->owner != stack || c->owner_depth != depth) {
        return;
    }
    c->owner = NULL;
    int keep = c->live.events > 0
               && (set->choice != CURVE_PEAK || !c->has_kept || c->live.peak > c->kept.peak);
    if (keep) {
        CurveBuffer dropped = c->kept;
        c->kept = c->live;
        c->live = dropped;
        c->has_kept = 1;
    }
    /* The dropped call's memory goes now, unless it is small and another
     * call may be recorded into it. */
    int more = set->choice == CURVE_PEAK || set->choice == CURVE_LAST;
    if (!more || c->live.cap > CURVE_REUSE_POINTS) {
        buffer_free(&c->live);
    }
}

void
curve_line_ended(CurveSet *set, ThreadStack *stack, int i, int line, int64_t level,
                 const int64_t *pending)
{
    Frame *frames = stack->frames;
    CurvePoint p;
    p.line = line;
    p.active = level;
    p.reserved = set->reserved_column >= 0 ? pending[set->reserved_column] : level;
    p.peak = set->peak_column >= 0 ? pending[set->peak_column] : level;
    /* a peak reads 0 on a line no reading reached: never below its level */
    if (p.peak < p.active) {
        p.peak = p.active;
    }
    int32_t own = frames[i].curve != NULL ? frames[i].curve->id : -1;
    for (int j = 0; j <= i; j++) {
        Curve *c = frames[j].curve;
        if (c == NULL || c->owner != stack || c->owner_depth != j) {
            continue;
        }
        p.callee = j == i ? -1 : own;
        if (buffer_add(&c->live, &p) < 0) {
            set->memory_errors++;
        }
    }
}

/* ---- results ------------------------------------------------------------- */

static PyObject *
points_to_list(const CurveSet *set, const CurveBuffer *b)
{
    PyObject *list = PyList_New(b->n);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < b->n; k++) {
        const CurvePoint *p = &b->points[k];
        PyObject *callee = p->callee >= 0 && p->callee < set->n_curves
                           ? set->curves[p->callee]->table->code : Py_None;
        PyObject *row = Py_BuildValue("(iLLLO)", (int)p->line, (long long)p->active,
                                      (long long)p->reserved, (long long)p->peak, callee);
        if (row == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, row);
    }
    return list;
}

PyObject *
curveset_to_list(const CurveSet *set)
{
    PyObject *result = PyList_New(0);
    if (result == NULL) {
        return NULL;
    }
    for (int i = 0; i < set->n_curves; i++) {
        const Curve *c = set->curves[i];
        if (!c->has_kept) {
            continue;
        }
        PyObject *points = points_to_list(set, &c->kept);
        PyObject *item = points == NULL ? NULL
            : Py_BuildValue("(O(NLLLL))", c->table->code, points, (long long)c->kept.merged,
                            (long long)c->kept.call, (long long)c->calls,
                            (long long)c->kept.events);
        if (item == NULL || PyList_Append(result, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(item);
    }
    return result;
}

int
curveset_parse_choice(CurveSet *set, PyObject *arg)
{
    static const char *names[] = {"peak", "first", "last"};
    static const curve_choice choices[] = {CURVE_PEAK, CURVE_FIRST, CURVE_LAST};
    if (arg == NULL || arg == Py_None) {
        set->choice = CURVE_OFF;
        return 0;
    }
    if (PyUnicode_Check(arg)) {
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (PyUnicode_CompareWithASCIIString(arg, names[k]) == 0) {
                set->choice = choices[k];
                return 0;
            }
        }
    }
    else if (PyLong_Check(arg) && !PyBool_Check(arg)) {
        long long n = PyLong_AsLongLong(arg);
        if (n == -1 && PyErr_Occurred()) {
            PyErr_Clear();
        }
        else if (n >= 1) {
            set->choice = CURVE_NTH;
            set->nth = n;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "curve must be \"peak\", \"first\", \"last\", a call "
                 "number >= 1 or None, not %R", arg);
    return -1;
}
