/* A capsule or a Python source, opened into one table of calls (source.h). */
#include "source.h"

#include <limits.h>
#include <string.h>

const char *const memlab_kind_names[] = {"level", "peak", "counter"};
const char *const memlab_unit_names[] = {"count", "bytes"};
#define N_KINDS 3
#define N_UNITS 2
#define KINDS_ACCEPTED "'level', 'peak' or 'counter'"
#define UNITS_ACCEPTED "'count' or 'bytes'"

/* ---- a compiled source: the contract's calls, forwarded ----------------- */

static int
compiled_prepare(const Source *src, int device)
{
    char err[256] = {0};
    if (src->compiled->prepare(device, err, (int)sizeof(err)) < 0) {
        PyErr_Format(PyExc_RuntimeError, "%s device %d: %s", src->compiled->name, device,
                     err[0] ? err : "cannot be read");
        return -1;
    }
    return 0;
}

static int
compiled_sample(const Source *src, int device, int64_t *out)
{
    return src->compiled->sample(device, out);
}

static int
compiled_reset_peaks(const Source *src, int device)
{
    return src->compiled->reset_peaks(device);
}

static int
compiled_open_reader(const Source *src, int device)
{
    return src->compiled->open_reader(device);
}

static void
compiled_close_reader(const Source *src, int device, int reader)
{
    src->compiled->close_reader(device, reader);
}

static int
compiled_read(const Source *src, int device, int reader, int64_t *out)
{
    return src->compiled->read(device, reader, out);
}

/* ---- a Python source: its methods, results converted ------------------- */

/* values (a new reference, consumed; NULL when the call failed) -> out.
 * 0, or -1 with an exception set. */
static int
python_values(const Source *src, PyObject *values, int64_t *out)
{
    int ret = -1;
    PyObject *seq = NULL;
    if (values == NULL) {
        return -1;
    }
    seq = PySequence_Fast(values, "sample() / read() must return a sequence of ints");
    if (seq == NULL) {
        goto error;
    }
    if (PySequence_Fast_GET_SIZE(seq) != src->n_fields) {
        PyErr_Format(PyExc_ValueError, "sample() / read() returned %zd values for %d fields",
                     PySequence_Fast_GET_SIZE(seq), src->n_fields);
        goto error;
    }
    for (int f = 0; f < src->n_fields; f++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, f));
        if (v == -1 && PyErr_Occurred()) {
            goto error;
        }
        out[f] = (int64_t)v;
    }
    ret = 0;
error:
    Py_XDECREF(seq);
    Py_DECREF(values);
    return ret;
}

/* A method whose result is ignored. */
static int
python_call(const Source *src, const char *method, int device)
{
    PyObject *r = PyObject_CallMethod(src->object, method, "i", device);
    Py_XDECREF(r);
    return r != NULL ? 0 : -1;
}

static int
python_prepare(const Source *src, int device)
{
    return python_call(src, "prepare", device);
}

static int
python_sample(const Source *src, int device, int64_t *out)
{
    return python_values(src, PyObject_CallMethod(src->object, "sample", "i", device), out);
}

static int
python_reset_peaks(const Source *src, int device)
{
    return python_call(src, "reset_peaks", device);
}

/* A register id, or -1: none is free (a negative id), or an exception. */
static int
python_open_reader(const Source *src, int device)
{
    PyObject *r = PyObject_CallMethod(src->object, "open_reader", "i", device);
    if (r == NULL) {
        return -1;
    }
    long id = PyLong_AsLong(r);
    Py_DECREF(r);
    if (id > INT_MAX) {
        /* an int register id, or it would name another register */
        PyErr_Format(PyExc_OverflowError, "open_reader() returned %ld: "
                     "a register id is at most %d", id, INT_MAX);
        return -1;
    }
    return id < 0 ? -1 : (int)id;
}

static void
python_close_reader(const Source *src, int device, int reader)
{
    PyObject *r = PyObject_CallMethod(src->object, "close_reader", "ii", device, reader);
    Py_XDECREF(r);
}

static int
python_read(const Source *src, int device, int reader, int64_t *out)
{
    return python_values(src, PyObject_CallMethod(src->object, "read", "ii", device, reader),
                         out);
}

/* ---- what each field is ------------------------------------------------ */

/* A Python source's `attr` (e.g. kinds = ("level", "peak")) as codes, one per
 * field: each str must be one of `names`.  With `fallback` >= 0, a missing
 * attribute gives every field that code.  0, or -1 with an exception set. */
static int
python_codes(const Source *src, const char *attr, const char *const *names, int n_names,
             const char *accepted, int fallback, int *out)
{
    PyObject *value = NULL, *seq = NULL;
    int ret = -1;
    value = PyObject_GetAttrString(src->object, attr);
    if (value == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
        if (fallback < 0) {
            PyErr_Format(PyExc_TypeError, "a Python memory source needs `%s`: %s "
                         "for each field", attr, accepted);
            return -1;
        }
        for (int f = 0; f < src->n_fields; f++) {
            out[f] = fallback;
        }
        return 0;
    }
    seq = PySequence_Fast(value, "a memory source's kinds / units must be a sequence of str");
    if (seq == NULL) {
        goto error;
    }
    if (PySequence_Fast_GET_SIZE(seq) != src->n_fields) {
        PyErr_Format(PyExc_ValueError, "memory source: %zd %s for %d fields; expected one each",
                     PySequence_Fast_GET_SIZE(seq), attr, src->n_fields);
        goto error;
    }
    for (int f = 0; f < src->n_fields; f++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, f);
        const char *text = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (text == NULL && PyErr_Occurred()) {
            goto error;
        }
        out[f] = -1;
        for (int k = 0; text != NULL && k < n_names; k++) {
            if (strcmp(text, names[k]) == 0) {
                out[f] = k;
            }
        }
        if (out[f] < 0) {
            PyErr_Format(PyExc_ValueError, "memory source: %s[%d] is %R; expected %s",
                         attr, f, item, accepted);
            goto error;
        }
    }
    ret = 0;
error:
    Py_XDECREF(seq);
    Py_DECREF(value);
    return ret;
}

static int
python_field_codes(const Source *src, int *kinds, int *units)
{
    if (python_codes(src, "kinds", memlab_kind_names, N_KINDS, KINDS_ACCEPTED, -1, kinds) < 0) {
        return -1;
    }
    return units == NULL ? 0
           : python_codes(src, "units", memlab_unit_names, N_UNITS, UNITS_ACCEPTED,
                          MEMLAB_COUNT, units);
}

static int
compiled_field_codes(const Source *src, int *kinds, int *units)
{
    for (int f = 0; f < src->n_fields; f++) {
        const memlab_field *field = &src->compiled->fields[f];
        if (field->kind < 0 || field->kind >= N_KINDS || field->unit < 0
            || field->unit >= N_UNITS) {
            PyErr_Format(PyExc_ValueError, "%s source: field %s has kind %d, unit %d",
                         src->compiled->name, field->name, field->kind, field->unit);
            return -1;
        }
        kinds[f] = field->kind;
        if (units != NULL) {
            units[f] = field->unit;
        }
    }
    return 0;
}

/* ---- the two tables ---------------------------------------------------- */

static const SourceOps compiled_ops = {
    compiled_field_codes, compiled_prepare, compiled_sample, compiled_reset_peaks,
    compiled_open_reader, compiled_close_reader, compiled_read,
    0,
};

static const SourceOps python_ops = {
    python_field_codes, python_prepare, python_sample, python_reset_peaks,
    python_open_reader, python_close_reader, python_read,
    1,
};

/* ---- opening ------------------------------------------------------------ */

/* A capsule's memlab_source, checked; NULL with an exception set. */
static const memlab_source *
capsule_source(PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, MEMLAB_SOURCE_CAPSULE)) {
        PyErr_SetString(PyExc_TypeError, "capsule is not a pytorch_memlab memory source");
        return NULL;
    }
    const memlab_source *compiled = PyCapsule_GetPointer(capsule, MEMLAB_SOURCE_CAPSULE);
    if (compiled == NULL) {
        return NULL;
    }
    if (compiled->abi_version != MEMLAB_SOURCE_ABI_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "memory source ABI %d, tracer expects %d: rebuild pytorch_memlab "
                     "from its checkout; this prints the exact command: python -c "
                     "\"import pytorch_memlab._install as i; print(i.rebuild_command())\"",
                     compiled->abi_version, MEMLAB_SOURCE_ABI_VERSION);
        return NULL;
    }
    return compiled;
}

static int
open_compiled(Source *src, PyObject *capsule)
{
    const memlab_source *compiled = capsule_source(capsule);
    if (compiled == NULL) {
        return -1;
    }
    src->compiled = compiled;
    src->name = PyUnicode_FromString(compiled->name);
    src->field_names = PyTuple_New(compiled->n_fields);
    if (src->name == NULL || src->field_names == NULL) {
        return -1;
    }
    for (int f = 0; f < compiled->n_fields; f++) {
        PyObject *name = PyUnicode_FromString(compiled->fields[f].name);
        if (name == NULL) {
            return -1;
        }
        PyTuple_SET_ITEM(src->field_names, f, name);
    }
    src->push = compiled->open_reader != NULL && compiled->close_reader != NULL
                && compiled->read != NULL;
    src->ops = &compiled_ops;
    return 0;
}

static int
open_python(Source *src, PyObject *object)
{
    PyObject *fields = NULL;
    src->name = PyObject_GetAttrString(object, "name");
    fields = src->name != NULL ? PyObject_GetAttrString(object, "fields") : NULL;
    src->field_names = fields != NULL ? PySequence_Tuple(fields) : NULL;
    Py_XDECREF(fields);
    if (src->field_names == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_SetString(PyExc_TypeError, "a memory source is a pytorch_memlab capsule "
                            "or an object with name, fields, prepare(), sample(), reset_peaks()");
        }
        return -1;
    }
    /* It pushes if it has all three reader methods. */
    src->push = PyObject_HasAttrString(object, "open_reader")
                && PyObject_HasAttrString(object, "close_reader")
                && PyObject_HasAttrString(object, "read");
    src->ops = &python_ops;
    return 0;
}

int
source_open(Source *src, PyObject *object)
{
    memset(src, 0, sizeof(*src));
    src->object = Py_NewRef(object);
    int rc = PyCapsule_CheckExact(object) ? open_compiled(src, object)
             : open_python(src, object);
    if (rc < 0) {
        src->ops = NULL;
        return -1;
    }
    src->n_fields = (int)PyTuple_GET_SIZE(src->field_names);
    return 0;
}

void
source_close(Source *src)
{
    Py_CLEAR(src->object);
    Py_CLEAR(src->name);
    Py_CLEAR(src->field_names);
    src->ops = NULL;
    src->compiled = NULL;
    src->n_fields = 0;
    src->push = 0;
}

int
source_same(const Source *a, const Source *b)
{
    if (a->object != b->object && (a->compiled == NULL || a->compiled != b->compiled)) {
        return 0;
    }
    if (a->n_fields != b->n_fields) {
        return 0;
    }
    if (!a->ops->runs_python || a->field_names == b->field_names) {
        return 1;     /* a compiled source's fields are fixed */
    }
    for (int f = 0; f < a->n_fields; f++) {
        /* str against str: compares the data, calls no Python code */
        if (PyUnicode_Compare(PyTuple_GET_ITEM(a->field_names, f),
                              PyTuple_GET_ITEM(b->field_names, f)) != 0) {
            return 0;
        }
    }
    return 1;
}
