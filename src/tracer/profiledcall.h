/* ProfiledCall: the callable `profile` returns for a plain function. */
#ifndef MEMLAB_PROFILEDCALL_H
#define MEMLAB_PROFILEDCALL_H

#include "compat.h"

int profiledcall_type_init(PyObject *module);

#endif /* MEMLAB_PROFILEDCALL_H */
