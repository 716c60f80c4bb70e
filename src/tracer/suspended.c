/* The calls of suspended generators (suspended.h): a table by address. */
#include "tracer.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAPACITY 16

/* Deaths of followed generators, process-wide: the weak references' one
 * callback only counts (it may run inside a tracer's event, from the garbage
 * collector); each tracer sweeps its own records when the count moved. */
static uint64_t deaths;
static PyObject *on_death;            /* Owned. made once per process */

static PyObject *
count_death(PyObject *self, PyObject *ref)
{
    deaths++;
    Py_RETURN_NONE;
}

static PyMethodDef on_death_def = {
    "_generator_died", (PyCFunction)count_death, METH_O,
    "Counts the deaths of generators whose calls pytorch_memlab follows."
};

static inline size_t
slot_of(uintptr_t key, size_t mask)
{
    return (size_t)(((uint64_t)key >> 4) * 0x9E3779B97F4A7C15ull >> 17) & mask;
}

static int
grow(Suspensions *s)
{
    size_t capacity = s->capacity ? s->capacity * 2 : MIN_CAPACITY;
    Suspension *fresh = calloc(capacity, sizeof(Suspension));
    if (fresh == NULL) {
        return -1;
    }
    size_t mask = capacity - 1;
    for (size_t i = 0; i < s->capacity; i++) {
        if (s->slots[i].key != 0) {
            size_t j = slot_of(s->slots[i].key, mask);
            while (fresh[j].key != 0) {
                j = (j + 1) & mask;
            }
            fresh[j] = s->slots[i];
        }
    }
    free(s->slots);
    s->slots = fresh;
    s->capacity = capacity;
    return 0;
}

void
suspensions_dealloc(Suspensions *s)
{
    for (size_t i = 0; i < s->capacity; i++) {
        Py_XDECREF(s->slots[i].ref);
    }
    free(s->slots);
    memset(s, 0, sizeof(*s));
}

Suspension *
suspensions_find(Suspensions *s, uintptr_t key)
{
    if (s->used == 0 || key == 0) {
        return NULL;
    }
    size_t mask = s->capacity - 1;
    for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
        if (s->slots[i].key == key) {
            return &s->slots[i];
        }
        if (s->slots[i].key == 0) {
            return NULL;
        }
    }
}

Suspension *
suspensions_add(Suspensions *s, PyObject *gen, PyObject *ref, LineTable *table)
{
    if ((s->used + 1) * 2 > s->capacity && grow(s) < 0) {
        return NULL;
    }
    size_t mask = s->capacity - 1;
    size_t i = slot_of((uintptr_t)gen, mask);
    while (s->slots[i].key != 0) {
        i = (i + 1) & mask;
    }
    Suspension *r = &s->slots[i];
    r->key = (uintptr_t)gen;
    r->ref = ref;
    r->table = table;
    r->acall = NULL;
    r->parked = 0;
    s->used++;
    return r;
}

void
suspensions_remove(Suspensions *s, Suspension *r)
{
    PyObject *ref = r->ref;
    size_t mask = s->capacity - 1;
    size_t hole = (size_t)(r - s->slots);
    for (size_t i = (hole + 1) & mask; s->slots[i].key != 0; i = (i + 1) & mask) {
        size_t home = slot_of(s->slots[i].key, mask);
        /* Move it into the hole unless its home lies cyclically in (hole, i]. */
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            s->slots[hole] = s->slots[i];
            hole = i;
        }
    }
    memset(&s->slots[hole], 0, sizeof(Suspension));
    s->used--;
    Py_XDECREF(ref);          /* a weak reference's end runs no Python code */
}

int
suspensions_died(Suspensions *s)
{
    if (s->deaths_seen == deaths) {
        return 0;
    }
    s->deaths_seen = deaths;
    return 1;
}

int
suspension_dead(const Suspension *r)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *gen;
    int alive = PyWeakref_GetRef(r->ref, &gen);
    if (alive < 0) {
        PyErr_Clear();
    }
    Py_XDECREF(gen);
    return alive <= 0;
#else
    return PyWeakref_GetObject(r->ref) == Py_None;
#endif
}

PyObject *
memlab_frame_generator(PyFrameObject *frame)
{
#if PY_VERSION_HEX >= 0x030B0000
    return PyFrame_GetGenerator(frame);
#else
    return Py_XNewRef(frame->f_gen);
#endif
}

/* ---- a tracer's side ---- */

/* A suspended generator's call ends without its frame: its Call too. */
static void
suspension_end(TracerObject *t, Suspension *r)
{
    if (r->acall != NULL) {
        attrib_pop(&t->attrib, r->acall);
    }
    if (r->parked) {
        t->suspensions.parked--;
    }
    suspensions_remove(&t->suspensions, r);
}

/* The nearest Call below the innermost frame of `stack`. */
static AttribCall *
call_below(ThreadStack *stack)
{
    for (int i = stack->depth - 2; i >= 0; i--) {
        if (stack->frames[i].acall != NULL) {
            return stack->frames[i].acall;
        }
    }
    return NULL;
}

Suspension *
suspension_of(TracerObject *t, PyObject *gen, LineTable *table)
{
    Suspension *r = suspensions_find(&t->suspensions, (uintptr_t)gen);
    return r != NULL && r->parked && r->table == table ? r : NULL;
}

void
suspension_resumes(TracerObject *t, Frame *f, Suspension *r)
{
    f->acall = r->acall;
    f->gen = r->key;
    r->acall = NULL;
    r->parked = 0;
    t->suspensions.parked--;
    if (f->acall != NULL) {
        attrib_resume(&t->attrib, f->acall);
    }
}

PyObject *
suspension_ref(TracerObject *t, LineTable *table, PyObject *gen)
{
    if (gen == NULL || !t->enabled) {
        return NULL;
    }
    ThreadStack *stack = threadstacks_get(&t->threads,
                                          PyThreadState_GetID(PyThreadState_Get()));
    if (stack == NULL || stack->depth == 0 || stack->in_callback) {
        return NULL;
    }
    const Frame *f = &stack->frames[stack->depth - 1];
    if (f->table != table || f->gen != 0 || f->no_park) {
        return NULL;       /* it has a record, or may have none */
    }
    if (on_death == NULL) {
        on_death = PyCFunction_NewEx(&on_death_def, NULL, NULL);
    }
    PyObject *ref = on_death != NULL ? PyWeakref_NewRef(gen, on_death) : NULL;
    if (ref == NULL) {
        PyErr_Clear();
    }
    return ref;
}

int
suspension_park(TracerObject *t, ThreadStack *stack, PyObject *gen, PyObject **ref)
{
    Frame *f = &stack->frames[stack->depth - 1];
    Suspension *r = NULL;
    if (f->gen != 0) {
        r = suspensions_find(&t->suspensions, f->gen);
    }
    else if (gen != NULL && *ref != NULL && !f->no_park) {
        /* Inside a long profiled call no stack opens or closes: generators
         * closed with no event (3.13+) must not pile up meanwhile. */
        suspensions_end_dead(t);
        Suspension *stale = suspensions_find(&t->suspensions, (uintptr_t)gen);
        if (stale != NULL) {
            suspension_end(t, stale);   /* a dead generator's, at this address */
        }
        r = suspensions_add(&t->suspensions, gen, *ref, f->table);
        if (r != NULL) {
            *ref = NULL;                /* the record's now */
        }
    }
    if (r == NULL || r->parked || suspension_dead(r)) {
        return -1;
    }
    f->gen = 0;
    r->parked = 1;
    t->suspensions.parked++;
    r->acall = f->acall;
    if (f->acall != NULL) {
        attrib_suspend(&t->attrib, f->acall, call_below(stack));
        f->acall = NULL;
    }
    curve_frame_popping(&t->curves, stack, stack->depth - 1);
    stack->depth--;
    return 0;
}

void
suspension_frame_ends(TracerObject *t, ThreadStack *stack)
{
    Frame *f = &stack->frames[stack->depth - 1];
    Suspension *r = suspensions_find(&t->suspensions, f->gen);
    if (r != NULL && !r->parked) {
        suspensions_remove(&t->suspensions, r);
    }
    f->gen = 0;
    /* It may have resumed under another caller than the one it began under:
     * that caller's Call is the thread's innermost again. */
    if (f->acall != NULL) {
        attrib_suspend(&t->attrib, f->acall, call_below(stack));
    }
}

/* End each record `which` picks.  Removal shifts later records back, never
 * past i: stay on i after one. */
static void
end_where(TracerObject *t, int (*which)(const Suspension *))
{
    Suspensions *s = &t->suspensions;
    for (size_t i = 0; i < s->capacity;) {
        Suspension *r = &s->slots[i];
        if (r->key != 0 && which(r)) {
            suspension_end(t, r);
        }
        else {
            i++;
        }
    }
}

static int
parked_and_dead(const Suspension *r)
{
    return r->parked && suspension_dead(r);
}

static int
any(const Suspension *r)
{
    return 1;
}

void
suspensions_end_dead(TracerObject *t)
{
    if (t->suspensions.parked > 0 && suspensions_died(&t->suspensions)) {
        end_where(t, parked_and_dead);
    }
}

void
suspensions_end_all(TracerObject *t)
{
    end_where(t, any);
}

void
suspensions_drop_calls(TracerObject *t)
{
    for (size_t i = 0; i < t->suspensions.capacity; i++) {
        Suspension *r = &t->suspensions.slots[i];
        if (r->key != 0 && r->acall != NULL) {
            attrib_pop(&t->attrib, r->acall);
            r->acall = NULL;
        }
    }
}
