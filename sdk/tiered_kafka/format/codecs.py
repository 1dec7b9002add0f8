"""Decompressing one batch's records block, bounded (``record_batch.decompress`` calls :func:`decompress_bounded`).

Decision: one batch may decompress to at most ``MAX_DECOMPRESSED_BATCH_BYTES`` (256 MiB); above it
the batch is corrupt and nothing larger is ever allocated. Kafka has no such
limit itself (Java's consumer inflates a batch record by record as the application iterates, bounded
in practice by what a producer's ``buffer.memory`` and ``batch.size`` let it build, and the broker's
``message.max.bytes`` on the compressed size); our decoders hold a batch's records whole, and the
columnar one keeps at most 2 GiB - 1 of keys or values per call, so the bound stops a corrupt or
hostile block (a 50 MB gzip of zeros inflates to 50 GB) long before memory runs out, and is eight
times the largest batch a default-configured producer writes (``batch.size`` 16 KiB up to
``max.request.size`` 1 MiB, times a generous compression ratio of 32).

How each codec is bounded without inflating past the limit:

* gzip (RFC 1952, possibly several members): inflated as a stream, stopping at the limit + 1 byte;
* snappy, raw (librdkafka) or xerial-framed (Java ``SnappyOutputStream``: 16-byte header, then
  blocks of int32 length + raw snappy): every raw block starts with its uncompressed length (a
  varint), summed before decoding;
* lz4 (Kafka's lz4 frame, KIP-57; LZ4 frame format 1.6): the frame header's content size when
  present, and otherwise each block counts as its uncompressed size (stored blocks) or the frame's
  block maximum size (compressed blocks);
* zstd (RFC 8878): each block counts as its size (raw and RLE blocks) or 128 KiB (the largest a
  compressed block can decompress to); the frame content size when present.

A block too malformed to walk is left to the codec, which rejects it. Errors here (ValueError for the
bound, the codecs' own for bad data) carry no position: the decoders, which call this through
``record_batch.decompress``, raise them as CorruptRecordError naming the batch's offset and position.
"""

from __future__ import annotations

import gzip
import io
import struct

from aiokafka.codec import lz4_decode, snappy_decode, zstd_decode

#: The most bytes one batch's records may decompress to (module docstring).
MAX_DECOMPRESSED_BATCH_BYTES = 256 * 2**20

_XERIAL_HEADER = b"\x82SNAPPY\x00"
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 * 2**10, 5: 256 * 2**10, 6: 2**20, 7: 4 * 2**20}
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 2**10
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from


def _too_large(size: int, limit: int) -> ValueError:
    return ValueError(f"records decompress to {size} bytes or more, above the {limit} bytes a batch may hold")


def gzip_bounded(payload: bytes | memoryview, limit: int) -> bytes:
    out = bytearray()
    with gzip.GzipFile(fileobj=io.BytesIO(payload), mode="rb") as stream:
        while len(out) <= limit:  # read(n) may return less than n before the end
            chunk = stream.read(min(limit + 1 - len(out), 2**20))
            if not chunk:
                return bytes(out)
            out += chunk
    raise _too_large(len(out), limit)


def _uvarint(data: memoryview, pos: int) -> int:
    """The unsigned varint at data[pos] (snappy's length preamble), -1 when malformed."""
    value = 0
    for shift in range(0, 35, 7):
        if pos >= len(data):
            return -1
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
    return -1


def snappy_size(payload: memoryview) -> int:
    """The uncompressed size a snappy block (or xerial stream) declares."""
    if bytes(payload[:8]) != _XERIAL_HEADER or len(payload) < 16:
        return max(0, _uvarint(payload, 0))
    total, cursor = 0, 16
    while cursor + 4 <= len(payload):
        block_size = struct.unpack_from(">i", payload, cursor)[0]
        cursor += 4
        if block_size < 0:
            break
        total += max(0, _uvarint(payload, cursor))
        cursor += block_size
    return total


def lz4_bound(payload: memoryview) -> int:
    """An upper bound of what Kafka's lz4 frame(s) decompress to."""
    total, pos, n = 0, 0, len(payload)
    while pos + 7 <= n and _U32(payload, pos)[0] == _LZ4_MAGIC:
        flg, bd = payload[pos + 4], payload[pos + 5]
        block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07, 4 * 2**20)
        pos += 6
        if flg & 0x08:  # content size
            if pos + 8 > n:
                break
            return max(total, _U64(payload, pos)[0])  # checked against the data by the decoder
        pos += (4 if flg & 0x01 else 0) + 1  # dictionary id, header checksum
        while pos + 4 <= n:
            size = _U32(payload, pos)[0]
            pos += 4
            if size == 0:  # end mark
                pos += 4 if flg & 0x04 else 0
                break
            total += size & 0x7FFFFFFF if size & 0x80000000 else block_max
            pos += (size & 0x7FFFFFFF) + (4 if flg & 0x10 else 0)
    return total


def zstd_bound(payload: memoryview) -> int:
    """An upper bound of what zstd frame(s) decompress to."""
    total, pos, n = 0, 0, len(payload)
    while pos + 5 <= n:
        magic = _U32(payload, pos)[0]
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
            if pos + 8 > n:
                break
            pos += 8 + _U32(payload, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            break
        descriptor = payload[pos + 4]
        fcs_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
        pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        if fcs_size and pos + fcs_size <= n:
            content = int.from_bytes(payload[pos : pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
            if content > MAX_DECOMPRESSED_BATCH_BYTES:
                return content
        pos += fcs_size
        while pos + 3 <= n:
            header = int.from_bytes(payload[pos : pos + 3], "little")
            last, kind, size = header & 1, (header >> 1) & 0x03, header >> 3
            pos += 3
            if kind == 3:  # reserved: the decoder rejects it
                return total
            total += size if kind < 2 else _ZSTD_BLOCK_MAX
            pos += 1 if kind == 1 else size
            if last:
                pos += 4 if descriptor & 0x04 else 0
                break
    return total


def decompress_bounded(codec_id: int, payload: bytes | memoryview, limit: int = MAX_DECOMPRESSED_BATCH_BYTES) -> bytes:
    """Codecs 1 gzip, 2 snappy, 3 lz4, 4 zstd (``record_batch.Codec``), at most ``limit`` bytes out."""
    if codec_id == 1:
        return gzip_bounded(payload, limit)
    view = memoryview(payload).cast("B") if not isinstance(payload, memoryview) else payload
    bound = {2: snappy_size, 3: lz4_bound, 4: zstd_bound}[codec_id](view)
    if bound > limit:
        raise _too_large(bound, limit)
    decode = {2: snappy_decode, 3: lz4_decode, 4: zstd_decode}[codec_id]
    out = decode(payload)
    if len(out) > limit:  # a bound that did not hold: the walk above and the codec disagree
        raise _too_large(len(out), limit)
    return out
