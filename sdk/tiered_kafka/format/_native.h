/* Shared declarations of tiered_kafka.format._native (see _native.c for the record layout). */
#ifndef TK_NATIVE_H
#define TK_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>

/* Batch header offsets: the same constants as record_batch.py (layout documented there). */
#define TK_LOG_OVERHEAD 12             /* baseOffset int64, batchLength int32 */
#define TK_PARTITION_LEADER_EPOCH_OFFSET 12
#define TK_MAGIC_OFFSET 16
#define TK_CRC_OFFSET 17
#define TK_ATTRIBUTES_OFFSET 21        /* the CRC covers from here to the end of the batch */
#define TK_LAST_OFFSET_DELTA_OFFSET 23
#define TK_BASE_TIMESTAMP_OFFSET 27
#define TK_MAX_TIMESTAMP_OFFSET 35
#define TK_PRODUCER_ID_OFFSET 43
#define TK_RECORD_COUNT_OFFSET 57
#define TK_HEADER_V2_SIZE 61
#define TK_V2_MIN_BATCH_LENGTH (TK_HEADER_V2_SIZE - TK_LOG_OVERHEAD)
#define TK_LEGACY_MIN_SIZE0 14
#define TK_LEGACY_MIN_SIZE1 22
#define TK_MAX_BATCH_LENGTH (0x7FFFFFFF - TK_LOG_OVERHEAD)
#define TK_ATTR_CODEC_MASK 0x07
#define TK_ATTR_TIMESTAMP_TYPE 0x08
#define TK_ATTR_TRANSACTIONAL 0x10
#define TK_ATTR_CONTROL 0x20
#define TK_NO_TIMESTAMP (-1)
/* The smallest DefaultRecord: one byte each for length, attributes, timestampDelta, offsetDelta,
 * keyLength, valueLength, headersCount. Bounds recordCount against the bytes present. */
#define TK_MIN_RECORD_SIZE 7

extern PyObject *CorruptRecordError, *TruncatedRecordError, *UnsupportedCodecError, *LegacyMagic;

static inline uint64_t tk_be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}
static inline uint32_t tk_be32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}
static inline uint16_t tk_be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

/* 0 when position (the absolute position of data[0]) is >= 0 and position + size fits int64; else -1 with
 * ValueError set. */
static inline int tk_check_position(long long position, Py_ssize_t size) {
    if (position < 0 || position > INT64_MAX - (long long)size) {
        PyErr_Format(PyExc_ValueError, "position %lld: must be 0 or more, and position + %zd bytes must fit int64",
                     position, size);
        return -1;
    }
    return 0;
}

uint32_t tk_crc32c(const uint8_t *p, size_t n);
PyObject *tk_raise(PyObject *cls, long long position, int has_base, long long base_offset, const char *fmt, ...);
int tk_frame_one(const uint8_t *data, Py_ssize_t size, Py_ssize_t pos, long long position, int verify,
                 Py_ssize_t *end, int *magic_out);

/* One magic 2 batch opened for reading its records (decompressed if needed). */
typedef struct {
    long long position;  /* absolute position of the batch, for errors */
    int64_t base_offset;
    int attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp, max_timestamp, producer_id;
    int32_t record_count;
    const uint8_t *records, *records_end;
    PyObject *owner;     /* the decompressed bytes, or NULL */
} tk_batch;

/* One DefaultRecord, validated (headers included) by tk_parse_record. */
typedef struct {
    int64_t timestamp_delta;
    int32_t offset_delta;
    int64_t offset, timestamp;    /* set by tk_check_record */
    const uint8_t *key, *value;
    int32_t key_len, value_len;  /* -1 = null */
    int32_t header_count;
    const uint8_t *headers;       /* the first header; walk with tk_next_header */
} tk_record;

/* The header checks of a magic 2 batch beyond its framing (plain C, no GIL needed): 0, or -1 with a message
 * naming the field in msg. recordCount >= 0, lastOffsetDelta >= 0, 0 <= baseOffset <= INT64_MAX -
 * lastOffsetDelta (baseOffset is outside the CRC: one flipped bit must not give negative offsets). */
int tk_check_header(const tk_batch *b, char *msg, size_t msg_size);
int tk_open_batch(const uint8_t *batch, Py_ssize_t len, long long position, PyObject *decompress, tk_batch *b);
void tk_close_batch(tk_batch *b);
/* Parse the record at *pp (< end); 0 on success, -1 with *err set to a static message. */
int tk_parse_record(const uint8_t **pp, const uint8_t *end, tk_record *r, const char **err);
/* Read the header at *pp (already validated by tk_parse_record). */
void tk_next_header(const uint8_t **pp, const uint8_t **key, int32_t *key_len, const uint8_t **value,
                    int32_t *value_len);
/* A key or value as bytes (None for length -1); a new reference, NULL with an exception set. */
PyObject *tk_bytes_or_none(const uint8_t *p, int32_t len);
/* A record's headers as a new list of (str key, bytes-or-None value) tuples (the keys were checked
 * to be UTF-8 when the record was parsed); NULL with an exception set. */
PyObject *tk_headers_list(const tk_record *r);
/* Check a parsed record against its batch and set r->offset and r->timestamp (plain C): 0, or
 * TK_BAD_OFFSET_DELTA (offsetDelta outside 0..lastOffsetDelta), TK_BAD_TIMESTAMP (baseTimestamp +
 * timestampDelta overflows int64). */
#define TK_BAD_OFFSET_DELTA 1
#define TK_BAD_TIMESTAMP 2
int tk_check_record(const tk_batch *b, tk_record *r);
/* Decode and check all records of b, calling on_record for each; 0 or -1 with an exception set. */
typedef int (*tk_record_fn)(void *ctx, const tk_batch *b, const tk_record *r);
int tk_each_record(const tk_batch *b, tk_record_fn fn, void *ctx);
/* The control type (key: version int16, type int16) of an opened control batch, or -1 with an exception. */
int tk_control_type(const tk_batch *b);

PyObject *tk_decode_columnar(PyObject *self, PyObject *args);
PyObject *tk_decode_records(PyObject *self, PyObject *args);
int tk_records_init(PyObject *module);
int tk_messages_init(PyObject *module);
int tk_recv_init(PyObject *module);  /* _recv.c: RecvBuffer, the pooled receive memory */
PyObject *tk_recv_new(Py_ssize_t size);                /* a RecvBuffer of size bytes (pooled memory) */
char *tk_recv_mem(PyObject *buffer);                   /* its memory */
void tk_recv_truncate(PyObject *buffer, Py_ssize_t size);  /* its length cut to size (no smaller than 0) */

#endif
