/* A line's growth bounded by what its calls made and is still alive
 * (callfigures.h): where every block has been followed since the function's
 * second call began, a bounded cache is told from growth. */
#include "callfigures.h"

#include <stdlib.h>

int
callfigures_survivors_known(const CallFigures *f, const Attrib *a)
{
    return f->calls >= 4 && f->n_slots > 0 && f->growth_before != NULL && a != NULL
           && f->follow_attach != 0 && f->follow_attach == a->attaches;
}

void
callfigures_bound_by_survivors(const CallFigures *f, const LineTable *t, const Attrib *a,
                               int64_t *least)
{
    if (!callfigures_survivors_known(f, a)) {
        return;
    }
    int64_t *alive = malloc((size_t)f->n_slots * sizeof(int64_t));
    if (alive != NULL
        && attrib_survivors(a, t, 2, f->calls - 2, f->first_line, f->n_slots, alive)) {
        for (int s = 0; s < f->n_slots; s++) {
            if (alive[s] < least[s]) {
                least[s] = alive[s];
            }
        }
    }
    free(alive);
}
