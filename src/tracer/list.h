/* Singly linked lists threaded through a member of their items: the enabled
 * tracers, the live samplers, the attached Attribs. */
#ifndef MEMLAB_LIST_H
#define MEMLAB_LIST_H

/* Unlinks `item` from the list whose first item is the lvalue `head`,
 * linked through member `next`, and clears its link; an item not on the
 * list is left alone (its link still cleared). */
#define MEMLAB_LIST_REMOVE(head, item, next)                                  \
    do {                                                                      \
        __typeof__(item) *link_ = &(head);                                    \
        while (*link_ != NULL && *link_ != (item)) {                          \
            link_ = &(*link_)->next;                                          \
        }                                                                     \
        if (*link_ == (item)) {                                               \
            *link_ = (item)->next;                                            \
        }                                                                     \
        (item)->next = NULL;                                                  \
    } while (0)

#endif /* MEMLAB_LIST_H */
