"""One zstd frame with its content size, as the RSM writes them (zstd-jni ``ZstdCompressCtx`` with
``setContentSize(true)``) and reads them (``Zstd.decompressedSize`` then ``Zstd.decompress``).

Used for each compressed ``.log`` chunk (``CompressionChunkEnumeration`` / ``DecompressionChunkEnumeration``)
and for the variable chunk index (``TransformedChunksSerializer`` / ``TransformedChunksDeserializer``).

Frame header (RFC 8878 section 3.1.1.1), little-endian::

    Magic_Number             4 bytes   0xFD2FB528
    Frame_Header_Descriptor  1 byte    FCS_Field_Size flag (bits 7-6), Single_Segment (bit 5), Dictionary_ID flag (1-0)
    Window_Descriptor        0-1       absent when Single_Segment
    Dictionary_ID            0-4       0, 1, 2 or 4 bytes by its flag
    Frame_Content_Size       0-8       flag 0: 1 byte if Single_Segment else absent; 1: 2 bytes (+256); 2: 4; 3: 8
"""

from __future__ import annotations

import cramjam

from tiered_kafka.errors import RsmFormatError

_MAGIC = b"\x28\xb5\x2f\xfd"


def frame_content_size(frame: bytes | memoryview) -> int | None:
    """The Frame_Content_Size of a zstd frame, None when the header leaves it out; RsmFormatError if no frame."""
    if len(frame) < 5 or bytes(frame[:4]) != _MAGIC:
        raise RsmFormatError("not a zstd frame (bad magic number)")
    descriptor = frame[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    position = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if size == 0:
        return None
    if len(frame) < position + size:
        raise RsmFormatError("zstd frame header is truncated")
    value = int.from_bytes(frame[position : position + size], "little")
    return value + 256 if size == 2 else value


def decompress_frame(frame: bytes | memoryview, *, limit: int | None = None) -> bytes:
    """Decompress one frame whose header states its content size (RsmFormatError otherwise, or over ``limit``)."""
    size = frame_content_size(frame)
    if size is None:
        raise RsmFormatError("zstd frame does not state its content size (the RSM always writes it)")
    if limit is not None and size > limit:
        raise RsmFormatError(f"zstd frame claims {size} bytes, over the limit of {limit}")
    try:
        out = bytes(cramjam.zstd.decompress(bytes(frame), output_len=size))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise RsmFormatError(f"zstd frame does not decompress: {exc}") from None
    if len(out) != size:
        raise RsmFormatError(f"zstd frame decompressed to {len(out)} bytes, its header says {size}")
    return out


def compress_frame(data: bytes, level: int = 3) -> bytes:
    """One zstd frame with its content size in the header (cramjam's one-shot compression writes it)."""
    return bytes(cramjam.zstd.compress(data, level=level))
