/* Version shims: every #if on the Python version lives here. */
#ifndef MEMLAB_COMPAT_H
#define MEMLAB_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

/* sys.monitoring exists from 3.12. */
#if PY_VERSION_HEX >= 0x030C0000
#  define MEMLAB_HAVE_MONITORING 1
#else
#  define MEMLAB_HAVE_MONITORING 0
#endif

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o) { Py_INCREF(o); return o; }
static inline PyObject *Py_XNewRef(PyObject *o) { Py_XINCREF(o); return o; }
#endif

#if PY_VERSION_HEX < 0x030A0000
/* Adds a new reference; the caller keeps its own, also on failure. */
static inline int
PyModule_AddObjectRef(PyObject *module, const char *name, PyObject *value)
{
    Py_INCREF(value);
    if (PyModule_AddObject(module, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}
#endif

/* The offset of the instruction a frame runs (3.11+ accessor). */
#if PY_VERSION_HEX >= 0x030B0000
#  define memlab_frame_lasti(frame) PyFrame_GetLasti(frame)
#else
#  define memlab_frame_lasti(frame) ((frame)->f_lasti)
#endif

/* Saving the exception in flight around a call into Python code. */
#if PY_VERSION_HEX >= 0x030C0000
typedef struct { PyObject *exc; } memlab_saved_exc;
static inline void memlab_save_exc(memlab_saved_exc *s) { s->exc = PyErr_GetRaisedException(); }
static inline void memlab_restore_exc(memlab_saved_exc *s) { PyErr_SetRaisedException(s->exc); }
#else
typedef struct { PyObject *type, *value, *tb; } memlab_saved_exc;
static inline void memlab_save_exc(memlab_saved_exc *s) { PyErr_Fetch(&s->type, &s->value, &s->tb); }
static inline void memlab_restore_exc(memlab_saved_exc *s) { PyErr_Restore(s->type, s->value, s->tb); }
#endif

#endif /* MEMLAB_COMPAT_H */
