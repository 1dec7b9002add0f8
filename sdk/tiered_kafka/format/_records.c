/* The per-record path of record_batch: one magic 2 batch into a list of Record objects, and the framing of
 * a buffer in chunks of batches. Record satisfies record_batch.Record (offset, timestamp, timestamp_type,
 * key, value, headers; checksum None as for aiokafka's magic 2 records). */
#include "_native.h"
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    long long offset;
    long long timestamp;
    int timestamp_type;
    PyObject *key;      /* bytes or None */
    PyObject *value;    /* bytes or None */
    PyObject *headers;  /* list of (str, bytes | None) */
} Record;

static void record_dealloc(Record *self) {
    Py_XDECREF(self->key);
    Py_XDECREF(self->value);
    Py_XDECREF(self->headers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *record_repr(Record *self) {
    return PyUnicode_FromFormat("Record(offset=%lld, timestamp=%lld, timestamp_type=%d, key=%R, value=%R, headers=%R)",
                                self->offset, self->timestamp, self->timestamp_type, self->key, self->value,
                                self->headers);
}

static PyObject *record_checksum(PyObject *self, void *closure) { Py_RETURN_NONE; }

static PyMemberDef record_members[] = {
    {"offset", T_LONGLONG, offsetof(Record, offset), READONLY, "offset"},
    {"timestamp", T_LONGLONG, offsetof(Record, timestamp), READONLY, "ms since the epoch"},
    {"timestamp_type", T_INT, offsetof(Record, timestamp_type), READONLY, "0 CreateTime, 1 LogAppendTime"},
    {"key", T_OBJECT, offsetof(Record, key), READONLY, "bytes or None"},
    {"value", T_OBJECT, offsetof(Record, value), READONLY, "bytes or None"},
    {"headers", T_OBJECT, offsetof(Record, headers), READONLY, "list of (str, bytes | None)"},
    {NULL},
};

static PyGetSetDef record_getset[] = {
    {"checksum", record_checksum, NULL, "None: magic 2 records carry no checksum", NULL},
    {NULL},
};

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tiered_kafka.format._native.Record",
    .tp_basicsize = sizeof(Record),
    .tp_dealloc = (destructor)record_dealloc,
    .tp_repr = (reprfunc)record_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One record of a magic 2 batch (record_batch.Record).",
    .tp_members = record_members,
    .tp_getset = record_getset,
};

typedef struct {
    PyObject *list;
    Py_ssize_t n;
    int timestamp_type;
} Collect;

static int on_record(void *ctx, const tk_batch *b, const tk_record *r) {
    Collect *c = ctx;
    Record *rec = PyObject_New(Record, &RecordType);
    if (!rec) return -1;
    rec->key = rec->value = rec->headers = NULL;
    rec->offset = r->offset;  /* both checked by tk_check_record */
    rec->timestamp = r->timestamp;
    rec->timestamp_type = c->timestamp_type;
    PyList_SET_ITEM(c->list, c->n++, (PyObject *)rec);  /* owned by the list from here on */
    if (!(rec->key = tk_bytes_or_none(r->key, r->key_len)) || !(rec->value = tk_bytes_or_none(r->value, r->value_len)) ||
        !(rec->headers = tk_headers_list(r)))
        return -1;
    return 0;
}

static PyObject *decode_records(const uint8_t *data, Py_ssize_t len, long long position, PyObject *decompress) {
    tk_batch b;
    if (len < TK_HEADER_V2_SIZE || data[TK_MAGIC_OFFSET] != 2) {
        PyErr_SetString(PyExc_ValueError, "decode_records takes one magic 2 batch");
        return NULL;
    }
    if (tk_open_batch(data, len, position, decompress, &b) < 0) return NULL;
    Collect c = {PyList_New(b.record_count), 0, (b.attributes & TK_ATTR_TIMESTAMP_TYPE) ? 1 : 0};
    if (c.list && tk_each_record(&b, on_record, &c) < 0) Py_CLEAR(c.list);  /* unfilled slots are NULL: skipped */
    tk_close_batch(&b);
    return c.list;
}

/* decode_records(batch, position, decompress) -> list of Record: batch is exactly one magic 2 batch,
 * framed (and CRC-checked if wanted) already. */
PyObject *tk_decode_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long position;
    PyObject *decompress;
    if (!PyArg_ParseTuple(args, "y*LO", &view, &position, &decompress)) return NULL;
    PyObject *result = decode_records(view.buf, view.len, position, decompress);
    PyBuffer_Release(&view);
    return result;
}

/* -- BatchView: the C base of record_batch.RecordBatch ----------------------------------------------------
 * Holds buffer (a memoryview of exactly the batch), position and magic; is_control and iteration are in C.
 * Iteration calls the subclass's _decode_python() for a magic 0/1 batch, and for every batch while no codec
 * function is registered (set_decompress(None): record_batch's reference path, used by tests in-process). */

typedef struct {
    PyObject_HEAD
    PyObject *buffer;    /* the batch's memoryview; NULL until first asked for when parent is set */
    PyObject *parent;    /* set by frame(): the framed buffer's memoryview, the batch at [start, end) */
    Py_ssize_t start, end;
    long long position;
    int magic;
} BatchView;

static PyObject *decompress_fn;  /* record_batch.decompress, set by set_decompress() */

static int batch_init(BatchView *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"buffer", "position", "magic", NULL};
    PyObject *buffer;
    long long position;
    int magic;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLi", names, &buffer, &position, &magic)) return -1;
    Py_XSETREF(self->buffer, Py_NewRef(buffer));
    Py_CLEAR(self->parent);
    self->position = position;
    self->magic = magic;
    return 0;
}

static void batch_dealloc(BatchView *self) {
    Py_CLEAR(self->buffer);
    Py_CLEAR(self->parent);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *batch_buffer(BatchView *self, void *closure) {
    if (!self->buffer) {
        if (!self->parent) Py_RETURN_NONE;
        self->buffer = PySequence_GetSlice(self->parent, self->start, self->end);
        if (!self->buffer) return NULL;
    }
    return Py_NewRef(self->buffer);
}

/* The batch's bytes in data and len; release view afterwards. */
static int batch_bytes(BatchView *self, Py_buffer *view, const uint8_t **data, Py_ssize_t *len) {
    PyObject *source = self->buffer ? self->buffer : self->parent;
    if (!source) {
        PyErr_SetString(PyExc_ValueError, "RecordBatch without a buffer");
        return -1;
    }
    if (PyObject_GetBuffer(source, view, PyBUF_SIMPLE) < 0) return -1;
    *data = view->buf;
    *len = view->len;
    if (source == self->parent) {
        if (self->end > view->len) {
            PyBuffer_Release(view);
            PyErr_SetString(PyExc_ValueError, "the framed buffer shrank under its RecordBatch");
            return -1;
        }
        *data += self->start;
        *len = self->end - self->start;
    }
    return 0;
}

static PyObject *batch_is_control(BatchView *self, void *closure) {
    if (self->magic < 2) Py_RETURN_FALSE;
    Py_buffer view;
    const uint8_t *data;
    Py_ssize_t len;
    if (batch_bytes(self, &view, &data, &len) < 0) return NULL;
    int control = -1;
    if (len > TK_ATTRIBUTES_OFFSET + 1)  /* attributes int16 big-endian: the flag is in its low byte */
        control = (data[TK_ATTRIBUTES_OFFSET + 1] & TK_ATTR_CONTROL) != 0;
    PyBuffer_Release(&view);
    if (control < 0) {
        PyErr_SetString(PyExc_IndexError, "batch buffer too short for its attributes");
        return NULL;
    }
    return PyBool_FromLong(control);
}

static PyObject *batch_iter(BatchView *self) {
    if (self->magic < 2 || decompress_fn == NULL || decompress_fn == Py_None)
        return PyObject_CallMethod((PyObject *)self, "_decode_python", NULL);
    Py_buffer view;
    const uint8_t *data;
    Py_ssize_t len;
    if (batch_bytes(self, &view, &data, &len) < 0) return NULL;
    PyObject *list = decode_records(data, len, self->position, decompress_fn);
    PyBuffer_Release(&view);
    if (!list) return NULL;
    PyObject *it = PyObject_GetIter(list);
    Py_DECREF(list);
    return it;
}

static PyMemberDef batch_members[] = {
    {"position", T_LONGLONG, offsetof(BatchView, position), READONLY, "position of the batch's first byte"},
    {"magic", T_INT, offsetof(BatchView, magic), READONLY, "the batch's magic (0, 1 or 2)"},
    {NULL},
};

static PyGetSetDef batch_getset[] = {
    {"buffer", (getter)batch_buffer, NULL, "a memoryview of exactly the batch's bytes", NULL},
    {"is_control", (getter)batch_is_control, NULL,
     "A control batch holds transaction markers (COMMIT/ABORT), not user records.", NULL},
    {NULL},
};

static PyTypeObject BatchViewType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tiered_kafka.format._native.BatchView",
    .tp_basicsize = sizeof(BatchView),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "BatchView(buffer, position, magic): the compiled base of record_batch.RecordBatch.",
    .tp_iter = (getiterfunc)batch_iter,
    .tp_members = batch_members,
    .tp_getset = batch_getset,
    .tp_init = (initproc)batch_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *set_decompress(PyObject *self, PyObject *fn) {
    Py_XSETREF(decompress_fn, Py_NewRef(fn));
    Py_RETURN_NONE;
}

/* frame(data, start, position, verify_crc, max_batches, cls) -> (list of cls instances, how many are
 * magic 0/1, next start, exception or None). cls is a subclass of BatchView; each instance refers to
 * data (a memoryview) and makes its own slice only when its buffer is asked for.
 * Stops at max_batches, the end of data, or the first bad batch, whose exception is returned (not raised)
 * so that the caller yields the good batches before it first. */
static PyObject *frame(PyObject *self, PyObject *args) {
    PyObject *data_obj;
    Py_buffer view;
    Py_ssize_t pos, max_batches;
    long long position;
    int verify;
    PyTypeObject *cls;
    if (!PyArg_ParseTuple(args, "OnLpnO!", &data_obj, &pos, &position, &verify, &max_batches, &PyType_Type, &cls))
        return NULL;
    if (!PyType_IsSubtype(cls, &BatchViewType)) {
        PyErr_SetString(PyExc_TypeError, "frame: cls must be a subclass of BatchView");
        return NULL;
    }
    if (PyObject_GetBuffer(data_obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (tk_check_position(position, view.len) < 0) { PyBuffer_Release(&view); return NULL; }
    if (pos < 0 || pos > view.len) {
        PyErr_Format(PyExc_ValueError, "frame: start %zd outside the data's 0..%zd", pos, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    const uint8_t *data = view.buf;
    Py_ssize_t size = view.len, count = 0, legacy = 0;
    PyObject *error = NULL;
    PyObject *out = PyList_New(0);
    while (out && pos < size && count < max_batches) {
        Py_ssize_t end;
        int magic;
        if (tk_frame_one(data, size, pos, position, verify, &end, &magic) < 0) {
            PyObject *type, *tb;
            PyErr_Fetch(&type, &error, &tb);
            PyErr_NormalizeException(&type, &error, &tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            break;
        }
        BatchView *batch = (BatchView *)cls->tp_alloc(cls, 0);
        if (!batch || PyList_Append(out, (PyObject *)batch) < 0) {
            Py_XDECREF(batch);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(batch);  /* the list holds it */
        batch->parent = Py_NewRef(data_obj);
        batch->start = pos;
        batch->end = end;
        legacy += magic < 2;
        batch->position = position + pos;
        batch->magic = magic;
        count++;
        pos = end;
    }
    PyBuffer_Release(&view);
    if (!out) { Py_XDECREF(error); return NULL; }
    PyObject *result = Py_BuildValue("(NnnO)", out, legacy, pos, error ? error : Py_None);
    Py_XDECREF(error);
    return result;
}

static PyMethodDef record_methods[] = {
    {"frame", frame, METH_VARARGS,
     "frame(data, start, position, verify_crc, max_batches, cls) -> (batches, legacy count, next start, error)"},
    {"set_decompress", set_decompress, METH_O, "set_decompress(fn): the codec function BatchView iteration uses"},
    {NULL, NULL, 0, NULL},
};

int tk_records_init(PyObject *module) {
    if (PyType_Ready(&RecordType) < 0 || PyType_Ready(&BatchViewType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "BatchView", (PyObject *)&BatchViewType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "Record", (PyObject *)&RecordType) < 0) return -1;
    return PyModule_AddFunctions(module, record_methods);
}
