/* The consumer's path (issue #14): a fetched range indexed once (every check done, the GIL released while
 * uncompressed batches are walked), then its records made into confluent_kafka.Message objects a slice at a
 * time, straight from the range's bytes: one bytes object per key and value, copied once.
 *
 * index_batches(data, position, decompress, max_control)
 *     -> (index, payloads, info)   every magic 2 batch framed, CRC-32C checked, its records parsed and
 *        checked as tk_each_record does (so building Messages later cannot fail on the data); a compressed
 *        batch is decompressed here, once (payloads[i] is its records; payloads is None when no batch is
 *        compressed). index: the batches as an opaque bytes object of Entry structs. info: (batches, rows,
 *        plain, first_offset, last_offset, last_base_offset, key_value_bytes, bad_control), plain when no
 *        batch is transactional or a control batch, bad_control None or (position, base_offset, type) of the
 *        first control batch whose type is above max_control. A magic 0/1 batch raises LegacyMagic.
 * batch_rows(index) -> [(base_offset, last_offset, producer_id, transactional, control, row_count)]
 * build_messages(data, index, payloads, start, min_rows, message_type, topic, partition, timestamp_types)
 *     -> (messages, next)   Messages of the records of batches start.. (control batches give none) until at
 *        least min_rows are made or the batches end; next is the batch after the last one used.
 *        message_type is called with (topic, partition, offset, key, value, headers, None, (type, ms)):
 *        headers None when the record has none, else a list of (str, bytes | None); type is
 *        timestamp_types[0] for CreateTime, [1] for LogAppendTime (whose ms is the batch's maxTimestamp);
 *        ms is -1 when the record has no timestamp (Java RecordBatch.NO_TIMESTAMP). */
#include "_native.h"

typedef struct {
    int64_t base_offset, last_offset, producer_id, base_timestamp, max_timestamp;
    Py_ssize_t records, records_end;  /* the records' bytes: in data, or in payloads[payload] */
    Py_ssize_t payload;               /* -1: uncompressed */
    Py_ssize_t pos;                   /* the batch's first byte in data */
    int32_t record_count;
    int8_t control, transactional, timestamp_type;
} Entry;

typedef struct {
    Entry *items;
    Py_ssize_t n, cap;
} Entries;

static int entries_push(Entries *e, const Entry *item) {  /* no Python calls: usable without the GIL */
    if (e->n == e->cap) {
        Py_ssize_t cap = e->cap ? e->cap * 2 : 256;
        Entry *items = PyMem_RawRealloc(e->items, (size_t)cap * sizeof(Entry));
        if (!items) return -1;
        e->items = items;
        e->cap = cap;
    }
    e->items[e->n++] = *item;
    return 0;
}

static void fill_entry(Entry *out, const tk_batch *b) {
    out->base_offset = b->base_offset;
    out->last_offset = b->base_offset + b->last_offset_delta;
    out->producer_id = b->producer_id;
    out->base_timestamp = b->base_timestamp;
    out->max_timestamp = b->max_timestamp;
    out->record_count = b->record_count;
    out->transactional = (b->attributes & TK_ATTR_TRANSACTIONAL) != 0;
    out->timestamp_type = (b->attributes & TK_ATTR_TIMESTAMP_TYPE) ? 1 : 0;
    out->control = -1;
    out->payload = -1;
}

/* Records of an opened batch, checked as tk_each_record checks them; 0, or -1 (nothing raised). Also sums
 * the keys' and values' bytes. Plain C: runs without the GIL. */
static int check_records(const tk_batch *b, Py_ssize_t *kv_bytes) {
    const uint8_t *p = b->records;
    tk_record r;
    const char *err;
    Py_ssize_t sum = 0;
    for (int32_t i = 0; i < b->record_count; i++) {
        if (tk_parse_record(&p, b->records_end, &r, &err) < 0 || tk_check_record(b, &r) != 0) return -1;
        sum += (r.key_len > 0 ? r.key_len : 0) + (r.value_len > 0 ? r.value_len : 0);
    }
    if (p != b->records_end) return -1;
    *kv_bytes += sum;
    return 0;
}

/* One uncompressed magic 2 batch at data[pos], every check passed: its entry, 0. Anything else (a failed
 * check, a compressed batch, a control batch, magic 0/1): -1, for the path that holds the GIL to redo and
 * raise. No Python call. */
static int fast_batch(const uint8_t *data, Py_ssize_t size, Py_ssize_t pos, Entry *out, Py_ssize_t *end,
                      Py_ssize_t *kv_bytes) {
    if (size - pos < TK_HEADER_V2_SIZE || data[pos + TK_MAGIC_OFFSET] != 2) return -1;
    int32_t length = (int32_t)tk_be32(data + pos + 8);
    if (length < TK_V2_MIN_BATCH_LENGTH || length > TK_MAX_BATCH_LENGTH || (Py_ssize_t)length > size - pos - TK_LOG_OVERHEAD)
        return -1;
    Py_ssize_t stop = pos + TK_LOG_OVERHEAD + length;
    const uint8_t *batch = data + pos;
    int attributes = tk_be16(batch + TK_ATTRIBUTES_OFFSET);
    int32_t count = (int32_t)tk_be32(batch + TK_RECORD_COUNT_OFFSET);
    if ((attributes & (TK_ATTR_CODEC_MASK | TK_ATTR_CONTROL)) || count < 0 ||
        (int64_t)count * TK_MIN_RECORD_SIZE > stop - pos - TK_HEADER_V2_SIZE)
        return -1;
    if (tk_be32(batch + TK_CRC_OFFSET) != tk_crc32c(batch + TK_ATTRIBUTES_OFFSET, (size_t)(stop - pos - TK_ATTRIBUTES_OFFSET)))
        return -1;
    tk_batch b = {
        .position = pos, .base_offset = (int64_t)tk_be64(batch), .attributes = attributes,
        .last_offset_delta = (int32_t)tk_be32(batch + TK_LAST_OFFSET_DELTA_OFFSET),
        .base_timestamp = (int64_t)tk_be64(batch + TK_BASE_TIMESTAMP_OFFSET),
        .max_timestamp = (int64_t)tk_be64(batch + TK_MAX_TIMESTAMP_OFFSET),
        .producer_id = (int64_t)tk_be64(batch + TK_PRODUCER_ID_OFFSET), .record_count = count,
        .records = batch + TK_HEADER_V2_SIZE, .records_end = data + stop, .owner = NULL,
    };
    char message[200];
    if (tk_check_header(&b, message, sizeof message) < 0 || check_records(&b, kv_bytes) < 0) return -1;
    fill_entry(out, &b);
    out->records = pos + TK_HEADER_V2_SIZE;
    out->records_end = stop;
    out->pos = pos;
    *end = stop;
    return 0;
}

static int no_record(void *ctx, const tk_batch *b, const tk_record *r) { return 0; }

/* The batch at data[pos] with the GIL held: the checks of the columnar decoder, raising what it raises. */
static int slow_batch(const uint8_t *data, Py_ssize_t size, Py_ssize_t pos, long long position, PyObject *decompress,
                      PyObject **payloads, Entry *out, Py_ssize_t *end, Py_ssize_t *kv_bytes) {
    int magic;
    if (tk_frame_one(data, size, pos, position, 1, end, &magic) < 0) return -1;
    if (magic != 2) {
        PyErr_Format(LegacyMagic, "magic %d batch at position %lld", magic, position + pos);
        return -1;
    }
    tk_batch b;
    if (tk_open_batch(data + pos, *end - pos, position + pos, decompress, &b) < 0) return -1;
    fill_entry(out, &b);
    out->pos = pos;
    int rc = 0;
    if (b.attributes & TK_ATTR_CONTROL) {
        int type = tk_control_type(&b);
        rc = type < 0 ? -1 : 0;
        out->control = (int8_t)type;
        out->record_count = 0;
    } else if (check_records(&b, kv_bytes) < 0) {
        rc = tk_each_record(&b, no_record, NULL);  /* raises the precise error (the callback is never reached) */
        if (rc == 0) { PyErr_SetString(PyExc_RuntimeError, "index_batches: a record check disagreed"); rc = -1; }
    }
    if (rc == 0 && b.owner) {  /* keep the decompressed records */
        if (!*payloads && !(*payloads = PyList_New(0))) rc = -1;
        else {
            out->payload = PyList_GET_SIZE(*payloads);
            out->records = 0;
            out->records_end = PyBytes_GET_SIZE(b.owner);
            if (PyList_Append(*payloads, b.owner) < 0) rc = -1;
        }
    } else if (rc == 0) {
        out->records = b.records - data;
        out->records_end = b.records_end - data;
    }
    tk_close_batch(&b);
    return rc;
}

static PyObject *index_batches(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long position;
    PyObject *decompress;
    int max_control;
    if (!PyArg_ParseTuple(args, "y*LOi", &view, &position, &decompress, &max_control)) return NULL;
    if (tk_check_position(position, view.len) < 0) { PyBuffer_Release(&view); return NULL; }
    const uint8_t *data = view.buf;
    Py_ssize_t size = view.len, pos = 0, kv_bytes = 0;
    Entries e = {NULL, 0, 0};
    PyObject *payloads = NULL, *result = NULL;
    int failed = 0, oom = 0;
    while (pos < size && !failed) {
        Py_BEGIN_ALLOW_THREADS  /* the common case: uncompressed data batches, checked without the GIL */
        Entry entry;
        Py_ssize_t end;
        while (pos < size && fast_batch(data, size, pos, &entry, &end, &kv_bytes) == 0) {
            if (entries_push(&e, &entry) < 0) { oom = 1; break; }
            pos = end;
        }
        Py_END_ALLOW_THREADS
        if (oom) { PyErr_NoMemory(); failed = 1; break; }
        if (pos >= size) break;
        Entry entry;
        Py_ssize_t end;
        if (slow_batch(data, size, pos, position, decompress, &payloads, &entry, &end, &kv_bytes) < 0 ||
            entries_push(&e, &entry) < 0) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            failed = 1;
            break;
        }
        pos = end;
    }
    if (!failed) {
        Py_ssize_t rows = 0;
        int plain = 1;
        PyObject *bad = Py_None;
        Py_INCREF(bad);
        for (Py_ssize_t i = 0; i < e.n; i++) {
            const Entry *x = &e.items[i];
            rows += x->record_count;
            if (x->transactional || x->control >= 0) plain = 0;
            if (x->control > max_control && bad == Py_None) {
                Py_DECREF(bad);
                bad = Py_BuildValue("(LLi)", position + (long long)x->pos, (long long)x->base_offset, (int)x->control);
                if (!bad) { failed = 1; break; }
            }
        }
        PyObject *index = failed ? NULL : PyBytes_FromStringAndSize((const char *)e.items, e.n * (Py_ssize_t)sizeof(Entry));
        if (index) {
            long long first = e.n ? e.items[0].base_offset : -1, last = e.n ? e.items[e.n - 1].last_offset : -1,
                      last_base = e.n ? e.items[e.n - 1].base_offset : -1;
            result = Py_BuildValue("(NO(nnOLLLnO))", index, payloads ? payloads : Py_None, e.n, rows,
                                   plain ? Py_True : Py_False, first, last, last_base, kv_bytes, bad);
        }
        Py_XDECREF(bad);
    }
    PyBuffer_Release(&view);
    PyMem_RawFree(e.items);
    Py_XDECREF(payloads);
    return result;
}

static int entries_of(PyObject *index, const Entry **items, Py_ssize_t *n) {
    if (!PyBytes_Check(index) || PyBytes_GET_SIZE(index) % (Py_ssize_t)sizeof(Entry)) {
        PyErr_SetString(PyExc_TypeError, "index: the first item index_batches returned");
        return -1;
    }
    *items = (const Entry *)PyBytes_AS_STRING(index);
    *n = PyBytes_GET_SIZE(index) / (Py_ssize_t)sizeof(Entry);
    return 0;
}

static PyObject *batch_rows(PyObject *self, PyObject *index) {
    const Entry *items;
    Py_ssize_t n;
    if (entries_of(index, &items, &n) < 0) return NULL;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        const Entry *x = &items[i];
        PyObject *row = Py_BuildValue("(LLLOii)", (long long)x->base_offset, (long long)x->last_offset,
                                      (long long)x->producer_id, x->transactional ? Py_True : Py_False, (int)x->control,
                                      (int)x->record_count);
        if (!row) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, row);
    }
    return out;
}

static PyObject *headers_of(const tk_record *r) {
    if (r->header_count == 0) Py_RETURN_NONE;  /* as confluent-kafka: no headers is None */
    return tk_headers_list(r);
}

static PyObject *build_messages(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *index, *payloads, *message_type, *topic, *partition, *types;
    Py_ssize_t start, min_rows;
    if (!PyArg_ParseTuple(args, "y*OOnnOOOO", &view, &index, &payloads, &start, &min_rows, &message_type, &topic,
                          &partition, &types))
        return NULL;
    const Entry *items;
    Py_ssize_t n, rows = 0, next = start;
    PyObject *out = NULL, *last_ts = NULL, *type_objs[2] = {NULL, NULL};
    long long last_type = -1, last_ms = 0;
    if (entries_of(index, &items, &n) < 0) goto done;
    if (!PyTuple_Check(types) || PyTuple_GET_SIZE(types) != 2) {
        PyErr_SetString(PyExc_TypeError, "timestamp_types: (CreateTime's type, LogAppendTime's type)");
        goto done;
    }
    type_objs[0] = PyTuple_GET_ITEM(types, 0);
    type_objs[1] = PyTuple_GET_ITEM(types, 1);
    if (start < 0 || start > n) { PyErr_SetString(PyExc_IndexError, "build_messages: start out of range"); goto done; }
    Py_ssize_t want = 0;
    for (Py_ssize_t i = start; i < n && want < min_rows; i++) want += items[i].record_count;
    out = PyList_New(want);
    if (!out) goto done;
    for (; next < n && rows < want; next++) {
        const Entry *x = &items[next];
        if (x->record_count == 0) continue;
        const uint8_t *p, *end;
        if (x->payload >= 0) {
            PyObject *owner;
            if (!PyList_Check(payloads) || x->payload >= PyList_GET_SIZE(payloads) ||
                !PyBytes_Check(owner = PyList_GET_ITEM(payloads, x->payload))) {
                PyErr_SetString(PyExc_TypeError, "payloads: the second item index_batches returned");
                Py_CLEAR(out);
                goto done;
            }
            p = (const uint8_t *)PyBytes_AS_STRING(owner);
        } else {
            p = view.buf;
        }
        end = p + x->records_end;
        p += x->records;
        if (x->payload < 0 && x->records_end > view.len) {
            PyErr_SetString(PyExc_ValueError, "build_messages: data is not the buffer that was indexed");
            Py_CLEAR(out);
            goto done;
        }
        for (int32_t i = 0; i < x->record_count; i++) {
            tk_record r;
            const char *err;
            if (tk_parse_record(&p, end, &r, &err) < 0) {  /* indexed already: only a different buffer gets here */
                PyErr_Format(PyExc_ValueError, "build_messages: %s (data is not the buffer that was indexed)", err);
                Py_CLEAR(out);
                goto done;
            }
            /* the record's checks passed in index_batches: no overflow (a different buffer wraps, no UB) */
            long long ms = x->timestamp_type ? x->max_timestamp
                                             : (long long)((uint64_t)x->base_timestamp + (uint64_t)r.timestamp_delta);
            if (ms == TK_NO_TIMESTAMP) ms = -1;
            if (!last_ts || ms != last_ms || x->timestamp_type != last_type) {  /* records of one ms share a tuple */
                PyObject *ms_obj = PyLong_FromLongLong(ms);
                Py_XDECREF(last_ts);
                last_ts = ms_obj ? PyTuple_Pack(2, type_objs[x->timestamp_type], ms_obj) : NULL;
                if (last_ts) PyObject_GC_UnTrack(last_ts);  /* two ints: no cycle (as CPython's own tuple untracking) */
                Py_XDECREF(ms_obj);
                last_ms = ms;
                last_type = x->timestamp_type;
            }
            PyObject *offset = last_ts ? PyLong_FromLongLong((long long)((uint64_t)x->base_offset + (uint64_t)r.offset_delta)) : NULL;
            PyObject *key = offset ? tk_bytes_or_none(r.key, r.key_len) : NULL;
            PyObject *value = key ? tk_bytes_or_none(r.value, r.value_len) : NULL;
            PyObject *headers = value ? headers_of(&r) : NULL;
            PyObject *message = NULL;
            if (headers) {
                PyObject *call[8] = {topic, partition, offset, key, value, headers, Py_None, last_ts};
                message = PyObject_Vectorcall(message_type, call, 8, NULL);
            }
            Py_XDECREF(offset);
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_XDECREF(headers);
            if (!message) { Py_CLEAR(out); goto done; }
            /* Its fields are a str, ints, bytes and None: no reference cycle is possible, so the cyclic
             * collector need not traverse it (with headers, a list the application may change: kept) */
            if (headers == Py_None && PyObject_IS_GC(message)) PyObject_GC_UnTrack(message);
            PyList_SET_ITEM(out, rows++, message);
        }
    }
done:
    Py_XDECREF(last_ts);
    PyBuffer_Release(&view);
    if (!out) return NULL;
    return Py_BuildValue("(Nn)", out, next);
}

static PyMethodDef message_methods[] = {
    {"index_batches", index_batches, METH_VARARGS,
     "index_batches(data, position, decompress, max_control) -> (index, payloads, info)"},
    {"batch_rows", batch_rows, METH_O, "batch_rows(index) -> [(base, last, producer, transactional, control, rows)]"},
    {"build_messages", build_messages, METH_VARARGS,
     "build_messages(data, index, payloads, start, min_rows, message_type, topic, partition, timestamp_types) -> (messages, next)"},
    {NULL, NULL, 0, NULL},
};

int tk_messages_init(PyObject *module) { return PyModule_AddFunctions(module, message_methods); }
