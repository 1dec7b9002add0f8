/* decode_columnar: a buffer of record batches into raw Arrow buffers (columns described in columnar.py).
 * Each buffer grows as a bytes object (resized in place) and is handed to Python without a copy; the value
 * data is a RecvBuffer (pooled memory, _recv.c) sized to the input up front. */
#include "_native.h"

typedef struct {
    PyObject *obj;
    char *p;
    Py_ssize_t len, cap;
    int pooled;  /* obj is a RecvBuffer (_recv.c: the value data), else a bytes object */
} Buf;

static int buf_init(Buf *b, Py_ssize_t cap) {
    b->obj = PyBytes_FromStringAndSize(NULL, cap);
    b->p = b->obj ? PyBytes_AS_STRING(b->obj) : NULL;
    b->len = 0;
    b->cap = cap;
    b->pooled = 0;
    return b->obj ? 0 : -1;
}

/* A buffer in pooled memory (a RecvBuffer): for the value data, sized up front to the input's size, which
 * uncompressed batches cannot exceed; new memory of that size would be pages the kernel faults in and zeroes. */
static int buf_init_pooled(Buf *b, Py_ssize_t cap) {
    b->obj = tk_recv_new(cap);
    b->p = b->obj ? tk_recv_mem(b->obj) : NULL;
    b->len = 0;
    b->cap = cap;
    b->pooled = 1;
    return b->obj ? 0 : -1;
}

static int buf_grow(Buf *b, Py_ssize_t extra) {
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->len + extra) cap = b->len + extra;
    if (b->pooled) {  /* (compressed batches) a bigger one, the bytes so far copied */
        PyObject *bigger = tk_recv_new(cap);
        if (!bigger) return -1;
        memcpy(tk_recv_mem(bigger), b->p, (size_t)b->len);
        Py_SETREF(b->obj, bigger);
        b->p = tk_recv_mem(bigger);
        b->cap = cap;
        return 0;
    }
    if (_PyBytes_Resize(&b->obj, cap) < 0) { b->p = NULL; return -1; }
    b->p = PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    return (b->len + extra <= b->cap) ? 0 : buf_grow(b, extra);
}

static PyObject *buf_finish(Buf *b) {
    if (b->pooled) {
        tk_recv_truncate(b->obj, b->len);
        PyObject *out = b->obj;
        b->obj = NULL;
        return out;
    }
    if (_PyBytes_Resize(&b->obj, b->len) < 0) return NULL;
    PyObject *out = b->obj;
    b->obj = NULL;
    return out;
}

#define PUT(buf, type, v) do { *(type *)((buf)->p + (buf)->len) = (v); (buf)->len += sizeof(type); } while (0)

/* A validity bitmap (bit set = valid); dropped (None) when nothing is null. */
typedef struct {
    Buf b;
    Py_ssize_t n, nulls;
} Bitmap;

static inline int bitmap_reserve(Bitmap *m, Py_ssize_t extra) {
    Py_ssize_t need = (m->n + extra + 7) / 8;
    if (need > m->b.cap && buf_grow(&m->b, need - m->b.len) < 0) return -1;
    return 0;
}

static inline void bitmap_put(Bitmap *m, int valid) {
    Py_ssize_t byte = m->n >> 3;
    if ((m->n & 7) == 0) m->b.p[byte] = 0;
    if (valid) m->b.p[byte] |= (char)(1 << (m->n & 7));
    else m->nulls++;
    m->n++;
    m->b.len = byte + 1;
}

static PyObject *bitmap_finish(Bitmap *m) {
    if (m->nulls == 0) { Py_CLEAR(m->b.obj); Py_RETURN_NONE; }
    return buf_finish(&m->b);
}

enum {
    C_OFFSET, C_TIMESTAMP, C_TIMESTAMP_TYPE, C_KEY_OFFSETS, C_KEY_DATA, C_VALUE_OFFSETS, C_VALUE_DATA,
    C_HEADER_OFFSETS, C_HKEY_OFFSETS, C_HKEY_DATA, C_HVALUE_OFFSETS, C_HVALUE_DATA,
    C_B_POSITION, C_B_BASE_OFFSET, C_B_LAST_OFFSET, C_B_PRODUCER_ID, C_B_CONTROL, C_B_ROW_START, C_B_ROW_COUNT,
    N_BUFS
};
static const char *buf_names[N_BUFS] = {
    "offset", "timestamp", "timestamp_type", "key_offsets", "key_data", "value_offsets", "value_data",
    "header_offsets", "hkey_offsets", "hkey_data", "hvalue_offsets", "hvalue_data",
    "b_position", "b_base_offset", "b_last_offset", "b_producer_id", "b_control", "b_row_start", "b_row_count",
};
enum { M_TIMESTAMP, M_KEY, M_VALUE, M_HVALUE, M_B_TRANSACTIONAL, N_MAPS };
static const char *map_names[N_MAPS] = {
    "timestamp_validity", "key_validity", "value_validity", "hvalue_validity", "b_transactional",
};

typedef struct {
    Buf bufs[N_BUFS];
    Bitmap maps[N_MAPS];
    Py_ssize_t rows, headers;
    int include_headers;
    int timestamp_type;  /* of the batch being decoded */
} Out;

static int too_large(const char *what) {
    PyErr_Format(PyExc_ValueError,
                 "more than 2 GiB - 1 of %s in one decode_columnar call (int32 Arrow offsets): decode in parts", what);
    return -1;
}

/* Append len bytes (or a null for len -1) to a binary column: offsets, data, validity. */
static inline int put_binary(Buf *offsets, Buf *data, Bitmap *validity, const uint8_t *p, int32_t len,
                             const char *what) {
    if (len > 0) {
        if (data->len + len > INT32_MAX) return too_large(what);
        if (buf_reserve(data, len) < 0) return -1;
        memcpy(data->p + data->len, p, (size_t)len);
        data->len += len;
    }
    if (validity) bitmap_put(validity, len >= 0);
    PUT(offsets, int32_t, (int32_t)data->len);
    return 0;
}

static int on_record(void *ctx, const tk_batch *b, const tk_record *r) {
    Out *o = ctx;
    int64_t timestamp = r->timestamp;  /* both checked by tk_check_record */
    PUT(&o->bufs[C_OFFSET], int64_t, r->offset);
    PUT(&o->bufs[C_TIMESTAMP], int64_t, timestamp == TK_NO_TIMESTAMP ? 0 : timestamp);
    bitmap_put(&o->maps[M_TIMESTAMP], timestamp != TK_NO_TIMESTAMP);
    PUT(&o->bufs[C_TIMESTAMP_TYPE], int32_t, o->timestamp_type);
    if (put_binary(&o->bufs[C_KEY_OFFSETS], &o->bufs[C_KEY_DATA], &o->maps[M_KEY], r->key, r->key_len, "keys") < 0 ||
        put_binary(&o->bufs[C_VALUE_OFFSETS], &o->bufs[C_VALUE_DATA], &o->maps[M_VALUE], r->value, r->value_len,
                   "values") < 0)
        return -1;
    o->rows++;
    if (!o->include_headers) return 0;
    const uint8_t *p = r->headers;
    if (o->headers + r->header_count > INT32_MAX) return too_large("headers");
    if (buf_reserve(&o->bufs[C_HKEY_OFFSETS], 4 * (Py_ssize_t)r->header_count) < 0 ||
        buf_reserve(&o->bufs[C_HVALUE_OFFSETS], 4 * (Py_ssize_t)r->header_count) < 0 ||
        bitmap_reserve(&o->maps[M_HVALUE], r->header_count) < 0)
        return -1;
    for (int32_t i = 0; i < r->header_count; i++) {
        const uint8_t *key, *value;
        int32_t key_len, value_len;
        tk_next_header(&p, &key, &key_len, &value, &value_len);
        if (put_binary(&o->bufs[C_HKEY_OFFSETS], &o->bufs[C_HKEY_DATA], NULL, key, key_len, "header keys") < 0 ||
            put_binary(&o->bufs[C_HVALUE_OFFSETS], &o->bufs[C_HVALUE_DATA], &o->maps[M_HVALUE], value, value_len,
                       "header values") < 0)
            return -1;
    }
    o->headers += r->header_count;
    PUT(&o->bufs[C_HEADER_OFFSETS], int32_t, (int32_t)o->headers);
    return 0;
}

/* Room for n more rows in every per-row buffer (n is bounded by the batch's bytes). */
static int reserve_rows(Out *o, Py_ssize_t n) {
    static const int widths[] = {[C_OFFSET] = 8, [C_TIMESTAMP] = 8, [C_TIMESTAMP_TYPE] = 4, [C_KEY_OFFSETS] = 4,
                                 [C_VALUE_OFFSETS] = 4, [C_HEADER_OFFSETS] = 4};
    for (int i = 0; i <= C_HEADER_OFFSETS; i++)
        if (widths[i] && buf_reserve(&o->bufs[i], widths[i] * n) < 0) return -1;
    if (o->rows + n > INT32_MAX) return too_large("rows");
    for (int i = M_TIMESTAMP; i <= M_VALUE; i++)
        if (bitmap_reserve(&o->maps[i], n) < 0) return -1;
    return 0;
}

static int decode_batch(Out *o, const uint8_t *batch, Py_ssize_t len, long long position, PyObject *decompress) {
    tk_batch b;
    if (tk_open_batch(batch, len, position, decompress, &b) < 0) return -1;
    int control = -1, rc = 0;
    Py_ssize_t row_start = o->rows;
    if (b.attributes & TK_ATTR_CONTROL) {
        control = tk_control_type(&b);
        rc = control < 0 ? -1 : 0;
    } else {
        o->timestamp_type = (b.attributes & TK_ATTR_TIMESTAMP_TYPE) ? 1 : 0;
        rc = reserve_rows(o, b.record_count);
        if (rc == 0) rc = tk_each_record(&b, on_record, o);
    }
    tk_close_batch(&b);
    if (rc < 0) return -1;
    if (buf_reserve(&o->bufs[C_B_POSITION], 8) < 0 || buf_reserve(&o->bufs[C_B_BASE_OFFSET], 8) < 0 ||
        buf_reserve(&o->bufs[C_B_LAST_OFFSET], 8) < 0 || buf_reserve(&o->bufs[C_B_PRODUCER_ID], 8) < 0 ||
        buf_reserve(&o->bufs[C_B_CONTROL], 1) < 0 || buf_reserve(&o->bufs[C_B_ROW_START], 8) < 0 ||
        buf_reserve(&o->bufs[C_B_ROW_COUNT], 8) < 0 || bitmap_reserve(&o->maps[M_B_TRANSACTIONAL], 1) < 0)
        return -1;
    PUT(&o->bufs[C_B_POSITION], int64_t, position);
    PUT(&o->bufs[C_B_BASE_OFFSET], int64_t, b.base_offset);
    PUT(&o->bufs[C_B_LAST_OFFSET], int64_t, b.base_offset + b.last_offset_delta);  /* bounded by tk_check_header */
    PUT(&o->bufs[C_B_PRODUCER_ID], int64_t, b.producer_id);
    PUT(&o->bufs[C_B_CONTROL], int8_t, (int8_t)control);
    PUT(&o->bufs[C_B_ROW_START], int64_t, row_start);
    PUT(&o->bufs[C_B_ROW_COUNT], int64_t, o->rows - row_start);
    bitmap_put(&o->maps[M_B_TRANSACTIONAL], (b.attributes & TK_ATTR_TRANSACTIONAL) != 0);
    return 0;
}

static void out_clear(Out *o) {
    for (int i = 0; i < N_BUFS; i++) Py_CLEAR(o->bufs[i].obj);
    for (int i = 0; i < N_MAPS; i++) Py_CLEAR(o->maps[i].b.obj);
}

static PyObject *out_finish(Out *o, Py_ssize_t batches) {
    PyObject *dict = PyDict_New();
    if (!dict) return NULL;
    for (int i = 0; i < N_BUFS; i++) {
        PyObject *v = buf_finish(&o->bufs[i]);
        if (!v || PyDict_SetItemString(dict, buf_names[i], v) < 0) { Py_XDECREF(v); Py_DECREF(dict); return NULL; }
        Py_DECREF(v);
    }
    for (int i = 0; i < N_MAPS; i++) {
        /* b_transactional holds the values of a bool column, not validity: always returned */
        PyObject *v = i == M_B_TRANSACTIONAL ? buf_finish(&o->maps[i].b) : bitmap_finish(&o->maps[i]);
        if (!v || PyDict_SetItemString(dict, map_names[i], v) < 0) { Py_XDECREF(v); Py_DECREF(dict); return NULL; }
        Py_DECREF(v);
    }
    PyObject *counts = Py_BuildValue("{s:n,s:n,s:n}", "rows", o->rows, "header_count", o->headers, "batches", batches);
    if (!counts || PyDict_Update(dict, counts) < 0) { Py_XDECREF(counts); Py_DECREF(dict); return NULL; }
    Py_DECREF(counts);
    return dict;
}

PyObject *tk_decode_columnar(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long position;
    int include_headers;
    PyObject *decompress;
    if (!PyArg_ParseTuple(args, "y*LpO", &view, &position, &include_headers, &decompress)) return NULL;
    if (tk_check_position(position, view.len) < 0) { PyBuffer_Release(&view); return NULL; }
    const uint8_t *data = view.buf;
    Py_ssize_t size = view.len, pos = 0, batches = 0;
    Out o;
    memset(&o, 0, sizeof o);
    o.include_headers = include_headers;
    Py_ssize_t guess = size / 64 + 16;  /* rows; buffers grow as needed */
    int failed = 0;
    for (int i = 0; i < N_BUFS && !failed; i++)
        failed = (i == C_VALUE_DATA ? buf_init_pooled(&o.bufs[i], size)
                                    : buf_init(&o.bufs[i], i <= C_HEADER_OFFSETS ? guess * 4 : 64)) < 0;
    for (int i = 0; i < N_MAPS && !failed; i++) failed = buf_init(&o.maps[i].b, guess / 8 + 8) < 0;
    if (!failed) {  /* the leading 0 of every offsets buffer */
        PUT(&o.bufs[C_KEY_OFFSETS], int32_t, 0); PUT(&o.bufs[C_VALUE_OFFSETS], int32_t, 0);
        PUT(&o.bufs[C_HEADER_OFFSETS], int32_t, 0); PUT(&o.bufs[C_HKEY_OFFSETS], int32_t, 0);
        PUT(&o.bufs[C_HVALUE_OFFSETS], int32_t, 0);
    }
    while (!failed && pos < size) {
        Py_ssize_t end;
        int magic;
        if (tk_frame_one(data, size, pos, position, 1, &end, &magic) < 0) { failed = 1; break; }
        if (magic != 2) {
            PyErr_Format(LegacyMagic, "magic %d batch at position %lld", magic, position + pos);
            failed = 1;
            break;
        }
        if (decode_batch(&o, data + pos, end - pos, position + pos, decompress) < 0) { failed = 1; break; }
        batches++;
        pos = end;
    }
    PyBuffer_Release(&view);
    if (!failed && !include_headers) o.bufs[C_HEADER_OFFSETS].len = 0;
    PyObject *result = failed ? NULL : out_finish(&o, batches);
    out_clear(&o);
    return result;
}
