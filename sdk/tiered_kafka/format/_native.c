/*
 * tiered_kafka.format._native: record batches decoded in C (issue #14). Plain C against the CPython API.
 *
 * The batch header layout is documented once, in tiered_kafka/format/record_batch.py (Java
 * DefaultRecordBatch); the offsets below are the same constants. The record layout inside a magic 2
 * batch (Java org.apache.kafka.common.record.DefaultRecord), varints zigzag-encoded as in Java ByteUtils:
 *
 *   length          varint   bytes of the record after this field
 *   attributes      int8     unused
 *   timestampDelta  varlong  record timestamp - baseTimestamp
 *   offsetDelta     varint   record offset - baseOffset
 *   keyLength       varint   -1 = null key
 *   key             bytes
 *   valueLength     varint   -1 = null value
 *   value           bytes
 *   headersCount    varint
 *   headers         [headerKeyLength varint (>= 0), headerKey UTF-8, headerValueLength varint (-1 = null), value]
 *
 * decode_columnar(data, position, include_headers, decompress) fills Arrow buffers (see columnar.py for
 * the columns); frame(...) walks and validates the framing and CRCs for record_batch.iter_batches;
 * decode_records(batch, position, decompress) turns one magic 2 batch into Record objects for
 * record_batch's per-record path (_records.c); index_batches/build_messages make the consumer's
 * confluent_kafka Messages straight from a range's bytes (_messages.c). Shared batch/record parsing: _batch.c.
 * A magic 0/1 batch raises LegacyMagic: the callers take the Python path for it.
 *
 * The checks (stricter than Java's DefaultRecord.readFrom in places, e.g. a length below -1 or an offsetDelta
 * outside 0..lastOffsetDelta is corrupt, as are offsets and timestamps past int64) are listed in
 * tiered_kafka/format/default_record.py, the pure-Python reference that makes the same ones with the same
 * messages. No signed arithmetic here may overflow: tk_check_header bounds baseOffset + lastOffsetDelta and
 * tk_check_record adds timestamps with __builtin_add_overflow.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_native.h"

PyObject *CorruptRecordError, *TruncatedRecordError, *UnsupportedCodecError, *LegacyMagic;

/* -- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): SSE4.2 when the CPU has it, else slicing-by-8 */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++) crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
}

static uint32_t crc32c_soft(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n && ((uintptr_t)p & 7)) { c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8); n--; }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4); memcpy(&hi, p + 4, 4);  /* little-endian hosts only: see the check in module init */
        lo ^= c;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8; n -= 8;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(const uint8_t *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    while (n && ((uintptr_t)p & 7)) { c = _mm_crc32_u8((uint32_t)c, *p++); n--; }
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c = _mm_crc32_u64(c, w); p += 8; n -= 8; }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c ^ 0xFFFFFFFFu;
}
#define HAVE_SSE42_PATH 1
#endif

static uint32_t (*crc32c_impl)(const uint8_t *, size_t) = crc32c_soft;
static const char *crc_impl_name = "slicing-by-8";

uint32_t tk_crc32c(const uint8_t *p, size_t n) { return crc32c_impl(p, n); }

/* -- errors --------------------------------------------------------------------------------------------- */

/* Raise cls(message, position=..., base_offset=...); base_offset omitted when has_base is 0. */
PyObject *tk_raise(PyObject *cls, long long position, int has_base, long long base_offset, const char *fmt, ...) {
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    PyObject *kwargs = has_base ? Py_BuildValue("{s:L,s:L}", "position", position, "base_offset", base_offset)
                                : Py_BuildValue("{s:L}", "position", position);
    PyObject *msg_args = Py_BuildValue("(s)", message);
    if (kwargs && msg_args) {
        PyObject *exc = PyObject_Call(cls, msg_args, kwargs);
        if (exc) { PyErr_SetObject((PyObject *)Py_TYPE(exc), exc); Py_DECREF(exc); }
    }
    Py_XDECREF(kwargs);
    Py_XDECREF(msg_args);
    return NULL;
}

/* -- framing ---------------------------------------------------------------------------------------------- */

/* Validate the batch starting at data[pos] (framing, magic, and for magic 2 the CRC when verify; the
 * same checks and messages as record_batch.iter_batches); set *end and *magic_out. Returns 0, or -1
 * with an exception set. A magic 0/1 batch passes with its framing checked: the caller decides. */
int tk_frame_one(const uint8_t *data, Py_ssize_t size, Py_ssize_t pos, long long position, int verify,
                 Py_ssize_t *end, int *magic_out) {
    Py_ssize_t remaining = size - pos;
    long long where = position + pos;
    if (remaining < TK_LOG_OVERHEAD) {
        tk_raise(TruncatedRecordError, where, 0, 0, "%zd trailing bytes are too few for a batch header", remaining);
        return -1;
    }
    long long base_offset = (long long)tk_be64(data + pos);
    int32_t length = (int32_t)tk_be32(data + pos + 8);
    if (length < TK_LEGACY_MIN_SIZE0 || length > TK_MAX_BATCH_LENGTH) {
        tk_raise(CorruptRecordError, where, 1, base_offset, "invalid batch length %d", length);
        return -1;
    }
    if ((Py_ssize_t)length > remaining - TK_LOG_OVERHEAD) {
        tk_raise(TruncatedRecordError, where, 1, base_offset,
                 "batch length %d runs past the end of the data (%zd bytes left)", length, remaining);
        return -1;
    }
    int magic = data[pos + TK_MAGIC_OFFSET];
    *end = pos + TK_LOG_OVERHEAD + length;
    *magic_out = magic;
    if (magic == 2) {
        if (length < TK_V2_MIN_BATCH_LENGTH) {
            tk_raise(CorruptRecordError, where, 1, base_offset, "batch length %d is below the magic 2 header size",
                     length);
            return -1;
        }
        if (verify) {
            uint32_t stored = tk_be32(data + pos + TK_CRC_OFFSET);
            uint32_t computed = tk_crc32c(data + pos + TK_ATTRIBUTES_OFFSET, (size_t)(*end - pos - TK_ATTRIBUTES_OFFSET));
            if (stored != computed) {
                tk_raise(CorruptRecordError, where, 1, base_offset, "CRC mismatch: stored 0x%08x, computed 0x%08x",
                         stored, computed);
                return -1;
            }
        }
        return 0;
    }
    if (magic > 2) {
        tk_raise(CorruptRecordError, where, 1, base_offset, "unknown magic %d", magic);
        return -1;
    }
    if (length < (magic == 0 ? TK_LEGACY_MIN_SIZE0 : TK_LEGACY_MIN_SIZE1)) {
        tk_raise(CorruptRecordError, where, 1, base_offset, "message size %d is below the magic %d minimum", length,
                 magic);
        return -1;
    }
    return 0;  /* legacy: the CRC-32 is checked by the Python path */
}

static PyObject *crc32c_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    uint32_t c = tk_crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"decode_columnar", tk_decode_columnar, METH_VARARGS,
     "decode_columnar(data, position, include_headers, decompress) -> dict of Arrow buffers"},
    {"decode_records", tk_decode_records, METH_VARARGS,
     "decode_records(batch, position, decompress) -> list of the Records of one magic 2 batch"},
    {"crc32c", crc32c_py, METH_VARARGS, "crc32c(data) -> CRC-32C of data"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_native", "Record batches decoded in C.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "tiered_kafka.format._native supports little-endian hosts only");
        return NULL;
    }
    crc_init();
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) { crc32c_impl = crc32c_sse42; crc_impl_name = "sse4.2"; }
#endif
    PyObject *errors = PyImport_ImportModule("tiered_kafka.errors");
    if (!errors) return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    TruncatedRecordError = PyObject_GetAttrString(errors, "TruncatedRecordError");
    UnsupportedCodecError = PyObject_GetAttrString(errors, "UnsupportedCodecError");
    Py_DECREF(errors);
    if (!CorruptRecordError || !TruncatedRecordError || !UnsupportedCodecError) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    LegacyMagic = PyErr_NewExceptionWithDoc("tiered_kafka.format._native.LegacyMagic",
                                            "A magic 0/1 batch: decode the buffer with the Python path.", NULL, NULL);
    if (!LegacyMagic || PyModule_AddObjectRef(module, "LegacyMagic", LegacyMagic) < 0 ||
        PyModule_AddStringConstant(module, "CRC32C_IMPLEMENTATION", crc_impl_name) < 0 ||
        tk_records_init(module) < 0 || tk_messages_init(module) < 0 || tk_recv_init(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
