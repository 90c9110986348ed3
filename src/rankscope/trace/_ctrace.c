/* The tracer's hot path in C (optional: rankscope.trace.backend falls back to pure Python).
 *
 * A Ring writes 3-word records into the trace file's memory mapping, exactly as the Python
 * closures do (format.py): [monotonic ns, key | kind, thread ident]. Code objects map to keys
 * through a small open-addressing table keyed by the code object's address; a miss calls the
 * Python `intern(code)` once (which applies the filter and writes the name; -1: filtered out).
 * At the end of the ring the Python `wrap()` starts the next lap: it writes every traced thread's
 * whole stack from slot 0 on (through Ring.emit) and returns where events go on.
 *
 * Hooks:
 *  - Python >= 3.12: Hook objects (vectorcall) registered with sys.monitoring for PY_START,
 *    PY_RETURN and LINE; a filtered-out code returns sys.monitoring.DISABLE.
 *  - Python < 3.12: Ring.install() sets a C profile function (PyEval_SetProfile) for the calling
 *    thread: calls and returns of Python frames; C calls are rejected in C. With line events a
 *    TraceHook object is given to sys.settrace instead (a profile function gets no lines).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int have_view;
    uint64_t *words;
    Py_ssize_t end;   /* words in the ring */
    Py_ssize_t pos;   /* next word to write; a multiple of 3, < end */
    PyObject *intern; /* intern(code) -> int key, or -1 */
    PyObject *wrap;   /* wrap() -> next position (int) */
    PyObject *disable;
    /* code address -> key */
    uintptr_t *keys;
    int64_t *vals;
    size_t cap;  /* power of two */
    size_t used;
    int halted;
    int ticks; /* stamp records with the CPU's counter instead of CLOCK_MONOTONIC */
} Ring;

/* Time stamps. CLOCK_MONOTONIC nanoseconds, or (Ring(..., ticks=True), x86-64 and aarch64) the CPU's
 * constant-rate counter, which the reader converts with two (counter, ns) pairs the writer keeps in
 * the header: clock_gettime costs ~100 ns where the VM's vDSO cannot read the TSC (measured here:
 * 102 ns, rdtsc 38 ns), and a traced call takes two stamps. */
static inline uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
static inline uint64_t cpu_ticks(void) {
    unsigned lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}
#define HAVE_TICKS 1
#elif defined(__aarch64__)
static inline uint64_t cpu_ticks(void) {
    uint64_t v;
    __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
}
#define HAVE_TICKS 1
#else
static inline uint64_t cpu_ticks(void) { return mono_ns(); }
#define HAVE_TICKS 0
#endif



static int table_grow(Ring *r) {
    size_t ncap = r->cap ? r->cap * 2 : 1024;
    uintptr_t *nk = PyMem_Calloc(ncap, sizeof(uintptr_t));
    int64_t *nv = PyMem_Calloc(ncap, sizeof(int64_t));
    if (!nk || !nv) {
        PyMem_Free(nk);
        PyMem_Free(nv);
        return -1;
    }
    for (size_t i = 0; i < r->cap; i++) {
        if (r->keys[i]) {
            size_t j = (r->keys[i] >> 4) & (ncap - 1);
            while (nk[j]) j = (j + 1) & (ncap - 1);
            nk[j] = r->keys[i];
            nv[j] = r->vals[i];
        }
    }
    PyMem_Free(r->keys);
    PyMem_Free(r->vals);
    r->keys = nk;
    r->vals = nv;
    r->cap = ncap;
    return 0;
}

/* The key of a code object; -1 when filtered out; -2 on an error (cleared: never raised). */
static int64_t key_of(Ring *r, PyObject *code) {
    uintptr_t addr = (uintptr_t)code;
    size_t mask = r->cap - 1;
    size_t j = (addr >> 4) & mask;
    while (r->keys[j]) {
        if (r->keys[j] == addr) return r->vals[j];
        j = (j + 1) & mask;
    }
    PyObject *res = PyObject_CallOneArg(r->intern, code);
    if (res == NULL) {
        PyErr_Clear();
        return -2;
    }
    int64_t key = PyLong_AsLongLong(res);
    Py_DECREF(res);
    if (key == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -2;
    }
    if ((r->used + 1) * 2 > r->cap && table_grow(r) < 0) return key;
    mask = r->cap - 1;
    j = (addr >> 4) & mask;
    while (r->keys[j]) j = (j + 1) & mask;
    r->keys[j] = addr;
    r->vals[j] = key;
    r->used++;
    return key;
}

/* The record at word i is written: move past it. At the end of the ring the wrap callback runs with
 * pos already at 0, so the records it writes itself (the new lap's whole stacks, format.py) go to
 * the start of the ring; it returns the next write position. */
static inline void advance(Ring *r, Py_ssize_t i) {
    i += 3;
    if (i >= r->end) {
        r->pos = 0;
        PyObject *res = PyObject_CallNoArgs(r->wrap);
        i = r->pos;
        if (res == NULL) {
            PyErr_Clear();
        } else {
            Py_ssize_t next = PyLong_AsSsize_t(res);
            Py_DECREF(res);
            if (next == -1 && PyErr_Occurred()) PyErr_Clear();
            else if (next >= 0 && next % 3 == 0 && next + 3 <= r->end) i = next;
        }
        if (i < 0 || i % 3 || i + 3 > r->end) i = 0;
    }
    r->pos = i;
}

static inline void write_record(Ring *r, uint64_t word) {
    Py_ssize_t i = r->pos;
    r->words[i] = r->ticks ? cpu_ticks() : mono_ns();
    r->words[i + 1] = word;
    r->words[i + 2] = (uint64_t)pthread_self();
    advance(r, i);
}

/* ---- Ring ---------------------------------------------------------------------------------- */

static int Ring_init(Ring *r, PyObject *args, PyObject *kwds) {
    PyObject *buffer;
    Py_ssize_t offset, nwords;
    int ticks = 0;
    if (!PyArg_ParseTuple(args, "OnnOOO|p", &buffer, &offset, &nwords, &r->intern, &r->wrap, &r->disable, &ticks))
        return -1;
    r->ticks = ticks && HAVE_TICKS;
    Py_INCREF(r->intern);
    Py_INCREF(r->wrap);
    Py_INCREF(r->disable);
    if (PyObject_GetBuffer(buffer, &r->view, PyBUF_WRITABLE) < 0) return -1;
    r->have_view = 1;
    if (offset < 0 || nwords < 3 || nwords % 3 || offset % 8 || offset + nwords * 8 > r->view.len) {
        PyErr_SetString(PyExc_ValueError, "ring outside the buffer");
        return -1;
    }
    r->words = (uint64_t *)((char *)r->view.buf + offset);
    r->end = nwords;
    r->pos = 0;
    return table_grow(r);
}

static void Ring_dealloc(Ring *r) {
    if (r->have_view) PyBuffer_Release(&r->view);
    Py_XDECREF(r->intern);
    Py_XDECREF(r->wrap);
    Py_XDECREF(r->disable);
    PyMem_Free(r->keys);
    PyMem_Free(r->vals);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *Ring_emit(Ring *r, PyObject *args) {
    unsigned long long word, tid = 0, when = 0;
    if (!PyArg_ParseTuple(args, "K|KK", &word, &tid, &when)) return NULL;
    Py_ssize_t i = r->pos;
    r->words[i] = when ? (uint64_t)when : (r->ticks ? cpu_ticks() : mono_ns());
    r->words[i + 1] = word;
    r->words[i + 2] = tid ? (uint64_t)tid : (uint64_t)pthread_self();
    advance(r, i);
    Py_RETURN_NONE;
}

static PyObject *Ring_position(Ring *r, PyObject *unused) { return PyLong_FromSsize_t(r->pos); }

/* (stamp, CLOCK_MONOTONIC ns) read back to back: a calibration pair for the header. */
static PyObject *Ring_calibration(Ring *r, PyObject *unused) {
    uint64_t a = r->ticks ? cpu_ticks() : mono_ns();
    uint64_t ns = mono_ns();
    uint64_t b = r->ticks ? cpu_ticks() : mono_ns();
    return Py_BuildValue("(KK)", (unsigned long long)(a / 2 + b / 2 + (a & b & 1)), (unsigned long long)ns);
}

static PyObject *Ring_uses_ticks(Ring *r, PyObject *unused) { return PyBool_FromLong(r->ticks); }

static PyObject *Ring_halt(Ring *r, PyObject *unused) {
    r->halted = 1;
    Py_RETURN_NONE;
}

#if PY_VERSION_HEX < 0x030C0000
static int profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    Ring *r = (Ring *)obj;
    uint64_t kind;
    if (what == PyTrace_CALL) kind = 1;
    else if (what == PyTrace_RETURN) kind = 2;
    else return 0;
    if (r->halted) {
        PyEval_SetProfile(NULL, NULL);
        return 0;
    }
    PyCodeObject *code = PyFrame_GetCode(frame);
    int64_t key = key_of(r, (PyObject *)code);
    Py_DECREF(code);
    if (key < 0) return 0;
    write_record(r, (uint64_t)key | kind);
    return 0;
}

static PyObject *Ring_install(Ring *r, PyObject *unused) {
    PyEval_SetProfile(profile, (PyObject *)r);
    Py_RETURN_NONE;
}
#endif

static PyObject *Ring_uninstall(Ring *r, PyObject *unused) {
#if PY_VERSION_HEX < 0x030C0000
    PyEval_SetProfile(NULL, NULL);
#endif
    Py_RETURN_NONE;
}

static PyMethodDef Ring_methods[] = {
    {"emit", (PyCFunction)Ring_emit, METH_VARARGS, "emit(word, tid=0, when=0): one record"},
    {"position", (PyCFunction)Ring_position, METH_NOARGS, "the next word index"},
    {"calibration", (PyCFunction)Ring_calibration, METH_NOARGS, "(stamp, monotonic ns) now"},
    {"uses_ticks", (PyCFunction)Ring_uses_ticks, METH_NOARGS, "whether records carry CPU counter stamps"},
    {"halt", (PyCFunction)Ring_halt, METH_NOARGS, "stop recording (profile hooks remove themselves)"},
#if PY_VERSION_HEX < 0x030C0000
    {"install", (PyCFunction)Ring_install, METH_NOARGS, "profile the calling thread into this ring"},
#endif
    {"uninstall", (PyCFunction)Ring_uninstall, METH_NOARGS, "stop profiling the calling thread"},
    {NULL}};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankscope.trace._ctrace.Ring",
    .tp_basicsize = sizeof(Ring),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ring_init,
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_methods = Ring_methods,
};

/* ---- Hook: a sys.monitoring callback (vectorcall) -------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Ring *ring;
    uint64_t kind;
    vectorcallfunc vectorcall;
} Hook;

static PyObject *Hook_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Hook *h = (Hook *)self;
    Ring *r = h->ring;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n < 2 || r->halted) Py_RETURN_NONE; /* halted: switched off (a full disk) or stopping */
    int64_t key = key_of(r, args[0]);
    if (key == -1) {
        Py_INCREF(r->disable);
        return r->disable;
    }
    if (key < 0) Py_RETURN_NONE;
    uint64_t word = (uint64_t)key | h->kind;
    if (h->kind == 3) {
        long line = PyLong_AsLong(args[1]);
        if (line == -1 && PyErr_Occurred()) PyErr_Clear();
        word = ((uint64_t)key & 0xFFFFFFFF00000000ull) | (((uint64_t)line & 0xFFFFFF) << 8) | 3;
    }
    write_record(r, word);
    Py_RETURN_NONE;
}

static PyObject *Hook_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *ring;
    unsigned long long kind;
    if (!PyArg_ParseTuple(args, "O!K", &RingType, &ring, &kind)) return NULL;
    Hook *h = (Hook *)type->tp_alloc(type, 0);
    if (!h) return NULL;
    Py_INCREF(ring);
    h->ring = (Ring *)ring;
    h->kind = kind;
    h->vectorcall = Hook_call;
    return (PyObject *)h;
}

static void Hook_dealloc(Hook *h) {
    Py_XDECREF(h->ring);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyTypeObject HookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankscope.trace._ctrace.Hook",
    .tp_basicsize = sizeof(Hook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Hook_new,
    .tp_dealloc = (destructor)Hook_dealloc,
    .tp_vectorcall_offset = offsetof(Hook, vectorcall),
    .tp_call = PyVectorcall_Call,
};

/* ---- TraceHook: a sys.settrace function in C (Python < 3.12) ---------------------------------
 * Set with sys.settrace / threading.settrace. As the global function it sees only calls, and a
 * filtered-out frame gets None (no local function: its returns, lines and C calls cost nothing);
 * a traced frame gets this object back as its local function, with f_trace_lines off unless lines.
 */
typedef struct {
    PyObject_HEAD
    Ring *ring;
    int lines;
    vectorcallfunc vectorcall;
} TraceHook;

static PyObject *TraceHook_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    TraceHook *h = (TraceHook *)self;
    Ring *r = h->ring;
    if (PyVectorcall_NARGS(nargsf) < 2 || !PyUnicode_Check(args[1])) Py_RETURN_NONE;
    PyObject *frame = args[0];
    if (!PyFrame_Check(frame)) Py_RETURN_NONE;
    Py_UCS4 first = PyUnicode_READ_CHAR(args[1], 0);
    if (first != 'c' && first != 'r' && first != 'l') {  /* exception, opcode */
        Py_INCREF(self);
        return self;
    }
    if (r->halted) Py_RETURN_NONE;
    PyCodeObject *code = PyFrame_GetCode((PyFrameObject *)frame);
    int64_t key = key_of(r, (PyObject *)code);
    Py_DECREF(code);
    if (key < 0) Py_RETURN_NONE;
    if (first == 'c') {
        write_record(r, (uint64_t)key | 1);
        if (!h->lines && PyObject_SetAttrString(frame, "f_trace_lines", Py_False) < 0) PyErr_Clear();
    } else if (first == 'r') {
        write_record(r, (uint64_t)key | 2);
    } else {
        int line = PyFrame_GetLineNumber((PyFrameObject *)frame);
        write_record(r, ((uint64_t)key & 0xFFFFFFFF00000000ull) | (((uint64_t)line & 0xFFFFFF) << 8) | 3);
    }
    Py_INCREF(self);
    return self;
}

static PyObject *TraceHook_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *ring;
    int lines = 0;
    if (!PyArg_ParseTuple(args, "O!|p", &RingType, &ring, &lines)) return NULL;
    TraceHook *h = (TraceHook *)type->tp_alloc(type, 0);
    if (!h) return NULL;
    Py_INCREF(ring);
    h->ring = (Ring *)ring;
    h->lines = lines;
    h->vectorcall = TraceHook_call;
    return (PyObject *)h;
}

static void TraceHook_dealloc(TraceHook *h) {
    Py_XDECREF(h->ring);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyTypeObject TraceHookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankscope.trace._ctrace.TraceHook",
    .tp_basicsize = sizeof(TraceHook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = TraceHook_new,
    .tp_dealloc = (destructor)TraceHook_dealloc,
    .tp_vectorcall_offset = offsetof(TraceHook, vectorcall),
    .tp_call = PyVectorcall_Call,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ctrace", "rankscope's tracer hot path", -1, NULL};

PyMODINIT_FUNC PyInit__ctrace(void) {
    if (PyType_Ready(&RingType) < 0 || PyType_Ready(&HookType) < 0 || PyType_Ready(&TraceHookType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RingType);
    Py_INCREF(&HookType);
    Py_INCREF(&TraceHookType);
    if (PyModule_AddObject(m, "Ring", (PyObject *)&RingType) < 0 ||
        PyModule_AddObject(m, "Hook", (PyObject *)&HookType) < 0 ||
        PyModule_AddObject(m, "TraceHook", (PyObject *)&TraceHookType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
