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

/* arr (n long) grown to hold index `want`, new slots 0; 0 or -1. */
static int
grow(int64_t **arr, int *n, int want)
{
    if (want < *n) {
        return 0;
    }
    int cap = *n > 0 ? *n : 16;
    while (cap <= want) {
        cap *= 2;
    }
    int64_t *bigger = realloc(*arr, sizeof(int64_t) * (size_t)cap);
    if (bigger == NULL) {
        return -1;
    }
    memset(bigger + *n, 0, sizeof(int64_t) * (size_t)(cap - *n));
    *arr = bigger;
    *n = cap;
    return 0;
}

void
attrib_module_add(Attrib *a, AttribOpen *op, int module, int64_t size)
{
    if (grow(&op->mlive, &op->n_mods, module) < 0) {
        a->modules_inexact = "memory ran out while following modules";
        return;
    }
    op->mlive[module] += size;
}

void
attrib_module_flush(AttribPeak *p, const AttribOpen *op)
{
    if (p->n_mods > 0) {
        memset(p->mheld, 0, sizeof(int64_t) * (size_t)p->n_mods);
    }
    if (op->n_mods == 0) {
        return;
    }
    if (grow(&p->mheld, &p->n_mods, op->n_mods - 1) < 0) {
        p->n_mods = 0;
        free(p->mheld);
        p->mheld = NULL;
        attrib_runtime.modules_failed = 1;
        return;
    }
    memcpy(p->mheld, op->mlive, sizeof(int64_t) * (size_t)op->n_mods);
}

void
attrib_open_free(AttribOpen *op)
{
    if (op != NULL) {
        free(op->mlive);
        free(op);
    }
}

void
attrib_peak_free(AttribPeak *p)
{
    if (p != NULL) {
        free(p->mheld);
        free(p);
    }
}
