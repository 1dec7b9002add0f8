/* Magic 2 batches and DefaultRecords (layouts in _native.c and record_batch.py), shared by the columnar
 * decoder (_columnar.c) and the per-record path (_records.c). Checks follow Java DefaultRecordBatch and
 * DefaultRecord.readFrom: every length within the record, the record's length covering exactly its
 * fields, recordCount records and nothing after them. */
#include "_native.h"

/* Zigzag varint of at most max_bytes bytes (5 for varint, 10 for varlong, Java ByteUtils). */
static inline int read_varlong(const uint8_t **pp, const uint8_t *end, int max_bytes, int64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0, shift = 0; i < max_bytes; i++, shift += 7) {
        if (p >= end) return -1;
        uint8_t byte = *p++;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *pp = p;
            *out = (int64_t)((v >> 1) ^ (0 - (v & 1)));
            return 0;
        }
    }
    return -2;
}

static inline int read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out) {
    int64_t v;
    int rc = read_varlong(pp, end, 5, &v);
    if (rc < 0) return rc;
    if (v < INT32_MIN || v > INT32_MAX) return -2;
    *out = (int32_t)v;
    return 0;
}

/* Strict UTF-8 as CPython's decoder (and so the reference's .decode()) judges it: no overlong forms, no
 * surrogates, nothing past U+10FFFF. Plain C: record parsing runs without the GIL (_messages.c). */
static int valid_utf8(const uint8_t *p, int32_t n) {
    const uint8_t *end = p + n;
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) { p++; continue; }
        int more;
        uint8_t lo = 0x80, hi = 0xBF;  /* the allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) { more = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { more = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return 0;
        if (end - p <= more) return 0;
        if (p[1] < lo || p[1] > hi) return 0;
        for (int i = 2; i <= more; i++)
            if ((p[i] & 0xC0) != 0x80) return 0;
        p += more + 1;
    }
    return 1;
}

#define FAIL(message) do { *err = (message); return -1; } while (0)
#define VARINT(target, what)                                                   \
    do {                                                                       \
        int rc_ = read_varint(&p, end, &(target));                             \
        if (rc_ == -1) FAIL("record ends inside its " what);                   \
        if (rc_ < 0) FAIL("invalid varint for the record's " what);            \
    } while (0)

int tk_parse_record(const uint8_t **pp, const uint8_t *data_end, tk_record *r, const char **err) {
    const uint8_t *p = *pp, *end = data_end;
    int32_t length;
    VARINT(length, "length");
    if (length < TK_MIN_RECORD_SIZE - 1) FAIL("record length is below the smallest record");
    if (length > end - p) FAIL("record length runs past the end of the batch");
    end = p + length;  /* from here on everything must lie within the record */
    p++;               /* attributes int8, unused */
    int rc = read_varlong(&p, end, 10, &r->timestamp_delta);
    if (rc == -1) FAIL("record ends inside its timestampDelta");
    if (rc < 0) FAIL("invalid varlong for the record's timestampDelta");
    VARINT(r->offset_delta, "offsetDelta");
    VARINT(r->key_len, "key length");
    if (r->key_len < -1) FAIL("negative key length below -1");
    r->key = p;
    if (r->key_len > 0) {
        if (r->key_len > end - p) FAIL("key runs past the end of the record");
        p += r->key_len;
    }
    VARINT(r->value_len, "value length");
    if (r->value_len < -1) FAIL("negative value length below -1");
    r->value = p;
    if (r->value_len > 0) {
        if (r->value_len > end - p) FAIL("value runs past the end of the record");
        p += r->value_len;
    }
    VARINT(r->header_count, "header count");
    if (r->header_count < 0) FAIL("negative header count");
    if (r->header_count > end - p) FAIL("header count exceeds the record's bytes");
    r->headers = p;
    for (int32_t i = 0; i < r->header_count; i++) {
        int32_t key_len, value_len;
        VARINT(key_len, "header key length");
        if (key_len < 0) FAIL("negative header key length");
        if (key_len > end - p) FAIL("header key runs past the end of the record");
        if (!valid_utf8(p, key_len)) FAIL("header key is not valid UTF-8");
        p += key_len;
        VARINT(value_len, "header value length");
        if (value_len < -1) FAIL("negative header value length below -1");
        if (value_len > 0) {
            if (value_len > end - p) FAIL("header value runs past the end of the record");
            p += value_len;
        }
    }
    if (p != end) FAIL("record length does not match its fields");
    *pp = p;
    return 0;
}

void tk_next_header(const uint8_t **pp, const uint8_t **key, int32_t *key_len, const uint8_t **value,
                    int32_t *value_len) {
    const uint8_t *p = *pp, *end = p + 20;  /* validated already: the bounds cannot be hit */
    read_varint(&p, end, key_len);
    *key = p;
    p += *key_len;
    end = p + 5;
    read_varint(&p, end, value_len);
    *value = p;
    if (*value_len > 0) p += *value_len;
    *pp = p;
}

PyObject *tk_bytes_or_none(const uint8_t *p, int32_t len) {
    if (len < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p, len);
}

PyObject *tk_headers_list(const tk_record *r) {
    PyObject *list = PyList_New(r->header_count);
    const uint8_t *p = r->headers;
    for (int32_t i = 0; list && i < r->header_count; i++) {
        const uint8_t *key, *value;
        int32_t key_len, value_len;
        tk_next_header(&p, &key, &key_len, &value, &value_len);
        PyObject *k = PyUnicode_DecodeUTF8((const char *)key, key_len, "strict");  /* validated already */
        PyObject *v = k ? tk_bytes_or_none(value, value_len) : NULL;
        PyObject *pair = v ? PyTuple_Pack(2, k, v) : NULL;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (!pair) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, pair);
    }
    return list;
}

static PyObject *decompress_payload(const tk_batch *b, const uint8_t *payload, Py_ssize_t len, int codec,
                                    PyObject *decompress) {
    if (decompress == NULL || decompress == Py_None) {
        PyErr_SetString(PyExc_ValueError, "a compressed batch needs a decompress function");
        return NULL;
    }
    PyObject *view = PyMemoryView_FromMemory((char *)payload, len, PyBUF_READ);
    if (!view) return NULL;
    PyObject *out = PyObject_CallFunction(decompress, "iO", codec, view);
    Py_DECREF(view);
    if (!out) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        char message[300];
        PyObject *text = value ? PyObject_Str(value) : NULL;
        snprintf(message, sizeof message, "cannot decode records (decompression failed, %s: %.200s)",
                 type ? ((PyTypeObject *)type)->tp_name : "?", text ? PyUnicode_AsUTF8(text) : "");
        if (!text || !PyUnicode_AsUTF8(text)) PyErr_Clear();
        Py_XDECREF(text);
        tk_raise(CorruptRecordError, b->position, 1, b->base_offset, "%s", message);
        if (value) {  /* chain like `raise ... from err` */
            PyObject *t2, *v2, *tb2;
            PyErr_Fetch(&t2, &v2, &tb2);
            PyErr_NormalizeException(&t2, &v2, &tb2);
            if (v2) PyException_SetCause(v2, Py_NewRef(value));
            PyErr_Restore(t2, v2, tb2);
        }
        Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
        return NULL;
    }
    if (!PyBytes_Check(out)) {
        PyObject *copy = PyBytes_FromObject(out);
        Py_DECREF(out);
        out = copy;
    }
    return out;
}

int tk_check_header(const tk_batch *b, char *msg, size_t msg_size) {
    if (b->record_count < 0) {
        snprintf(msg, msg_size, "negative recordCount %d", b->record_count);
        return -1;
    }
    if (b->last_offset_delta < 0) {
        snprintf(msg, msg_size, "negative lastOffsetDelta %d", b->last_offset_delta);
        return -1;
    }
    if (b->base_offset < 0) {
        snprintf(msg, msg_size, "negative baseOffset %lld", (long long)b->base_offset);
        return -1;
    }
    if (b->base_offset > INT64_MAX - b->last_offset_delta) {
        snprintf(msg, msg_size, "baseOffset %lld + lastOffsetDelta %d is past the largest offset (int64)",
                 (long long)b->base_offset, b->last_offset_delta);
        return -1;
    }
    return 0;
}

int tk_open_batch(const uint8_t *batch, Py_ssize_t len, long long position, PyObject *decompress, tk_batch *b) {
    b->position = position;
    b->base_offset = (int64_t)tk_be64(batch);
    b->attributes = tk_be16(batch + TK_ATTRIBUTES_OFFSET);
    b->last_offset_delta = (int32_t)tk_be32(batch + TK_LAST_OFFSET_DELTA_OFFSET);
    b->base_timestamp = (int64_t)tk_be64(batch + TK_BASE_TIMESTAMP_OFFSET);
    b->max_timestamp = (int64_t)tk_be64(batch + TK_MAX_TIMESTAMP_OFFSET);
    b->producer_id = (int64_t)tk_be64(batch + TK_PRODUCER_ID_OFFSET);
    b->record_count = (int32_t)tk_be32(batch + TK_RECORD_COUNT_OFFSET);
    b->records = batch + TK_HEADER_V2_SIZE;
    b->records_end = batch + len;
    b->owner = NULL;
    int codec = b->attributes & TK_ATTR_CODEC_MASK;
    char message[200];
    if (tk_check_header(b, message, sizeof message) < 0) {
        tk_raise(CorruptRecordError, position, 1, b->base_offset, "%s", message);
        return -1;
    }
    if (codec > 4) {
        PyErr_Format(UnsupportedCodecError, "unknown compression codec id %d in batch with base offset %lld at position %lld",
                     codec, (long long)b->base_offset, position);
        return -1;
    }
    if (codec != 0 && b->record_count > 0) {
        b->owner = decompress_payload(b, b->records, b->records_end - b->records, codec, decompress);
        if (!b->owner) return -1;
        b->records = (const uint8_t *)PyBytes_AS_STRING(b->owner);
        b->records_end = b->records + PyBytes_GET_SIZE(b->owner);
    }
    if ((int64_t)b->record_count * TK_MIN_RECORD_SIZE > b->records_end - b->records) {
        tk_raise(CorruptRecordError, position, 1, b->base_offset,
                 "recordCount %d is more than %zd bytes of records can hold", b->record_count,
                 (Py_ssize_t)(b->records_end - b->records));
        tk_close_batch(b);
        return -1;
    }
    return 0;
}

void tk_close_batch(tk_batch *b) { Py_CLEAR(b->owner); }

int tk_check_record(const tk_batch *b, tk_record *r) {
    if (r->offset_delta < 0 || r->offset_delta > b->last_offset_delta) return TK_BAD_OFFSET_DELTA;
    r->offset = b->base_offset + r->offset_delta;  /* no overflow: tk_check_header bounds baseOffset */
    /* checked for LogAppendTime batches too (where the record's timestamp is maxTimestamp): a delta that
     * cannot be added to its own batch's baseTimestamp is corrupt either way */
    if (__builtin_add_overflow(b->base_timestamp, r->timestamp_delta, &r->timestamp)) return TK_BAD_TIMESTAMP;
    if (b->attributes & TK_ATTR_TIMESTAMP_TYPE) r->timestamp = b->max_timestamp;
    return 0;
}

static int check_only(void *ctx, const tk_batch *b, const tk_record *r) { return 0; }

int tk_each_record(const tk_batch *b, tk_record_fn fn, void *ctx) {
    const uint8_t *p = b->records;
    tk_record r;
    const char *err = NULL;
    for (int32_t i = 0; i < b->record_count; i++) {
        if (tk_parse_record(&p, b->records_end, &r, &err) < 0) {
            tk_raise(CorruptRecordError, b->position, 1, b->base_offset, "record %d of %d: %s", i, b->record_count, err);
            return -1;
        }
        int bad = tk_check_record(b, &r);
        if (bad == TK_BAD_OFFSET_DELTA) {
            tk_raise(CorruptRecordError, b->position, 1, b->base_offset,
                     "record %d: offsetDelta %d outside 0..lastOffsetDelta %d", i, r.offset_delta,
                     b->last_offset_delta);
            return -1;
        }
        if (bad == TK_BAD_TIMESTAMP) {
            tk_raise(CorruptRecordError, b->position, 1, b->base_offset,
                     "record %d: baseTimestamp %lld + timestampDelta %lld overflows int64", i,
                     (long long)b->base_timestamp, (long long)r.timestamp_delta);
            return -1;
        }
        if (fn(ctx, b, &r) < 0) return -1;
    }
    if (p != b->records_end) {
        tk_raise(CorruptRecordError, b->position, 1, b->base_offset,
                 "%zd bytes left after the batch's recordCount %d records", (Py_ssize_t)(b->records_end - p),
                 b->record_count);
        return -1;
    }
    return 0;
}

int tk_control_type(const tk_batch *b) {
    const uint8_t *p = b->records;
    tk_record r;
    const char *err = NULL;
    /* every record checked as in a data batch (the reference decodes them all the same way) */
    if (tk_each_record(b, check_only, NULL) < 0) return -1;
    if (b->record_count < 1 || tk_parse_record(&p, b->records_end, &r, &err) < 0 || r.key_len < 4) {
        tk_raise(CorruptRecordError, b->position, 1, b->base_offset, "control batch without a valid control record key");
        return -1;
    }
    int type = (int16_t)tk_be16(r.key + 2);
    if (type < 0 || type > 127) {
        tk_raise(CorruptRecordError, b->position, 1, b->base_offset, "control record type %d out of range", type);
        return -1;
    }
    return type;
}
