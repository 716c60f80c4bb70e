/* Modules (attrib.h): Python says which module each thread runs; a block
 * made then is charged to it, and each open Call keeps what each module made
 * still alive, copied into the function's peak with the lines' bytes.  Module
 * numbers are Python's (0: none), so the arrays grow as modules appear. */
#include "attrib_internal.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local int module_now;

void
attrib_set_module(int module)
{
    module_now = module > 0 ? module : 0;
}

int
attrib_module_now(void)
{
    return module_now;
}

const char *
attrib_modules_missing(const Attrib *a)
{
    attrib_lock();
    const char *why = a->modules_inexact;
    if (why == NULL && attrib_runtime.modules_failed) {
        why = "memory ran out while following modules";
    }
    attrib_unlock();
    return why;
}

/* arr (n long) and its tagged kinds karr (n x ATTRIB_TAGGED) grown to hold
 * index `want`, new slots 0; 0 or -1 (then n is unchanged: a karr grown
 * already is only larger than n says). */
static int
grow(int64_t **arr, int64_t **karr, int *n, int want)
{
    if (want < *n) {
        return 0;
    }
    int cap = *n > 0 ? *n : 16;
    while (cap <= want) {
        cap *= 2;
    }
    int64_t *kinds = realloc(*karr, sizeof(int64_t) * ATTRIB_TAGGED * (size_t)cap);
    if (kinds == NULL) {
        return -1;
    }
    *karr = kinds;
    int64_t *bigger = realloc(*arr, sizeof(int64_t) * (size_t)cap);
    if (bigger == NULL) {
        return -1;
    }
    memset(bigger + *n, 0, sizeof(int64_t) * (size_t)(cap - *n));
    memset(kinds + (size_t)*n * ATTRIB_TAGGED, 0,
           sizeof(int64_t) * ATTRIB_TAGGED * (size_t)(cap - *n));
    *arr = bigger;
    *n = cap;
    return 0;
}

void
attrib_module_add(Attrib *a, AttribOpen *op, int module, int64_t size)
{
    if (grow(&op->mlive, &op->mklive, &op->n_mods, module) < 0) {
        a->modules_inexact = "memory ran out while following modules";
        return;
    }
    op->mlive[module] += size;
}

void
attrib_module_kind(int64_t *mk, int n_mods, int module, int from, int to, int64_t size)
{
    if (module <= 0 || module >= n_mods) {
        return;
    }
    int64_t *k = mk + (size_t)module * ATTRIB_TAGGED;
    if (from != ATTRIB_UNTAGGED) {
        k[from - 1] -= size;
    }
    if (to != ATTRIB_UNTAGGED) {
        k[to - 1] += size;
    }
}

void
attrib_module_flush(AttribPeak *p, const AttribOpen *op)
{
    if (p->n_mods > 0) {
        memset(p->mheld, 0, sizeof(int64_t) * (size_t)p->n_mods);
        memset(p->mkheld, 0, sizeof(int64_t) * ATTRIB_TAGGED * (size_t)p->n_mods);
    }
    if (op->n_mods == 0) {
        return;
    }
    if (grow(&p->mheld, &p->mkheld, &p->n_mods, op->n_mods - 1) < 0) {
        p->n_mods = 0;
        free(p->mheld);
        free(p->mkheld);
        p->mheld = NULL;
        p->mkheld = NULL;
        attrib_runtime.modules_failed = 1;
        return;
    }
    memcpy(p->mheld, op->mlive, sizeof(int64_t) * (size_t)op->n_mods);
    memcpy(p->mkheld, op->mklive, sizeof(int64_t) * ATTRIB_TAGGED * (size_t)op->n_mods);
}

void
attrib_open_free(AttribOpen *op)
{
    if (op != NULL) {
        free(op->mlive);
        free(op->mklive);
        free(op);
    }
}

void
attrib_peak_free(AttribPeak *p)
{
    if (p != NULL) {
        free(p->mheld);
        free(p->mkheld);
        free(p);
    }
}
