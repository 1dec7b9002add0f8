/* RecvBuffer: memory an HTTP body is received into, reused instead of returned to the system (issue #38).
 *
 * Why: a presigned GET's body is up to a plan's 8 MiB, held until its records are taken. A new bytes object of
 * that size is new memory each time (glibc serves it with mmap and unmaps it on free), so the kernel faults in
 * and zeroes every page of it before the socket's data is copied there: measured with bench_sdk.py's data, the
 * reader's system CPU per GB doubled (0.3 -> 0.7 s/GB) when the bodies were kept, as the consumer keeps them.
 * A RecvBuffer's memory goes back to a small pool when the last reference to it (the buffer, a memoryview of
 * it, an Arrow buffer over it) goes, and the next RecvBuffer of a size that fits takes it from there.
 *
 *   RecvBuffer(size) -> a writable buffer of exactly size bytes (contents undefined until written);
 *   recv_pool() -> (blocks, bytes) idle in the pool.
 * In C (_native.h): tk_recv_new, tk_recv_mem, tk_recv_truncate: the columnar decoder's value data is a RecvBuffer
 * too (the bulk API's largest allocation: each range's values, as an Arrow buffer).
 *
 * The pool holds at most RECV_POOL_MAX_BYTES and RECV_POOL_MAX_BLOCKS idle blocks (a decision: 64 MiB, the
 * default bulk and consumer prefetch hold 128-256 MiB in flight, so what the pool keeps idle is less than what
 * the reader had in use a moment before); blocks beyond it are freed. Capacities are rounded up to 1 MiB so
 * ranges of slightly different sizes share blocks; a block serves a request of at least 80% of its size less 1 MiB
 * (memory budgets count a buffer's length: what it holds beyond is bounded so).
 * Below RECV_MIN_POOLED (256 KiB) the memory is exactly the size asked and never pooled: small allocations come
 * from the heap malloc reuses anyway, and a small range must not hold a 1 MiB block.
 * Every pool operation happens with the GIL held (allocation and deallocation of Python objects). */
#include "_native.h"

#define RECV_POOL_MAX_BYTES ((Py_ssize_t)64 << 20)
#define RECV_POOL_MAX_BLOCKS 16
#define RECV_ROUND ((Py_ssize_t)1 << 20)
#define RECV_MIN_POOLED ((Py_ssize_t)256 << 10)

typedef struct {
    char *mem;
    Py_ssize_t cap;
} Block;

static Block pool[RECV_POOL_MAX_BLOCKS];
static int pool_n = 0;
static Py_ssize_t pool_bytes = 0;

typedef struct {
    PyObject_HEAD
    char *mem;
    Py_ssize_t size, cap;
} RecvBuffer;

static PyObject *recv_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Py_ssize_t size;
    static char *kw[] = {"size", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n", kw, &size)) return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "RecvBuffer size must be 0 or more");
        return NULL;
    }
    RecvBuffer *self = (RecvBuffer *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    int best = -1;
    for (int i = 0; size >= RECV_MIN_POOLED && i < pool_n; i++)  /* the smallest idle block that fits, at most 1.25 times the size plus 1 MiB; never for a small size */
        if (pool[i].cap >= size && pool[i].cap - RECV_ROUND <= size + size / 4 && (best < 0 || pool[i].cap < pool[best].cap)) best = i;
    if (best >= 0) {
        self->mem = pool[best].mem;
        self->cap = pool[best].cap;
        pool_bytes -= pool[best].cap;
        pool[best] = pool[--pool_n];
    } else {
        Py_ssize_t cap = size < RECV_MIN_POOLED ? (size ? size : 1) : (size + RECV_ROUND - 1) / RECV_ROUND * RECV_ROUND;
        self->mem = PyMem_RawMalloc((size_t)cap);
        if (!self->mem) {
            Py_DECREF(self);
            return PyErr_NoMemory();
        }
        self->cap = cap;
    }
    self->size = size;
    return (PyObject *)self;
}

static void recv_dealloc(RecvBuffer *self) {
    if (self->mem) {
        if (self->cap >= RECV_MIN_POOLED && pool_n < RECV_POOL_MAX_BLOCKS && pool_bytes + self->cap <= RECV_POOL_MAX_BYTES) {
            pool[pool_n].mem = self->mem;
            pool[pool_n].cap = self->cap;
            pool_n++;
            pool_bytes += self->cap;
        } else {
            PyMem_RawFree(self->mem);
        }
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int recv_getbuffer(RecvBuffer *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->mem, self->size, 0, flags);
}

static Py_ssize_t recv_len(RecvBuffer *self) { return self->size; }

static PyBufferProcs recv_as_buffer = {(getbufferproc)recv_getbuffer, NULL};
static PySequenceMethods recv_as_sequence = {.sq_length = (lenfunc)recv_len};

static PyTypeObject RecvBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tiered_kafka.format._native.RecvBuffer",
    .tp_doc = "RecvBuffer(size): memory an HTTP body is received into, pooled on release (see _recv.c).",
    .tp_basicsize = sizeof(RecvBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = recv_new,
    .tp_dealloc = (destructor)recv_dealloc,
    .tp_as_buffer = &recv_as_buffer,
    .tp_as_sequence = &recv_as_sequence,
};

PyObject *tk_recv_new(Py_ssize_t size) {
    PyObject *args = Py_BuildValue("(n)", size);
    if (!args) return NULL;
    PyObject *out = recv_new(&RecvBufferType, args, NULL);
    Py_DECREF(args);
    return out;
}

char *tk_recv_mem(PyObject *buffer) { return ((RecvBuffer *)buffer)->mem; }

void tk_recv_truncate(PyObject *buffer, Py_ssize_t size) {
    RecvBuffer *b = (RecvBuffer *)buffer;
    if (size >= 0 && size < b->size) b->size = size;
}

static PyObject *recv_pool(PyObject *self, PyObject *unused) { return Py_BuildValue("(in)", pool_n, pool_bytes); }

static PyMethodDef recv_methods[] = {
    {"recv_pool", recv_pool, METH_NOARGS, "recv_pool() -> (blocks, bytes) of RecvBuffer memory idle in the pool"},
    {NULL, NULL, 0, NULL},
};

int tk_recv_init(PyObject *module) {
    if (PyType_Ready(&RecvBufferType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "RecvBuffer", (PyObject *)&RecvBufferType) < 0) return -1;
    return PyModule_AddFunctions(module, recv_methods);
}
