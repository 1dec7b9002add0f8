"""Primitives of Kafka's generated messages in flexible versions (``org.apache.kafka.common.protocol.Readable`` /
``Writable``, ``ByteUtils``), as ``__remote_log_metadata`` records use them (remote_log_metadata.py has the layout):

* ``int8/int32/int64`` big-endian; ``uuid`` 16 bytes (most significant long first);
* unsigned varint: 7 bits per byte, least significant group first, high bit = more (at most 5 bytes for an int);
* compact string: unsigned varint (length + 1), UTF-8; 0 would be null, refused for a non-nullable string;
* compact nullable bytes: unsigned varint (length + 1), 0 = null;
* tagged fields: unsigned varint count, then per field unsigned varint tag, unsigned varint size, the bytes.

Also Kafka's ``Utils.murmur2`` (the ``__remote_log_metadata`` partitioner hashes with it).
"""

from __future__ import annotations

import struct

from tiered_kafka.errors import RsmFormatError
from tiered_kafka.rsm.keys import uuid_from_bytes, uuid_to_bytes


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RsmFormatError(f"{what}: needs {n} bytes at position {self.pos}, the record has {len(self.data)}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uvarint(self, what: str) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise RsmFormatError(f"{what}: unsigned varint runs past the end of the record")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RsmFormatError(f"{what}: unsigned varint longer than 5 bytes")

    def int(self, fmt: str, what: str) -> int:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size, what))[0]

    def uuid(self, what: str) -> str:
        return uuid_from_bytes(self.take(16, what))

    def string(self, what: str) -> str:
        n = self.uvarint(what)
        if n == 0:
            raise RsmFormatError(f"{what}: null for a non-nullable string")
        try:
            return self.take(n - 1, what).decode("utf-8")
        except UnicodeDecodeError:
            raise RsmFormatError(f"{what}: not UTF-8") from None

    def nullable_bytes(self, what: str) -> bytes | None:
        n = self.uvarint(what)
        return None if n == 0 else self.take(n - 1, what)

    def tagged_fields(self, what: str) -> None:
        for _ in range(self.uvarint(f"{what} tagged field count")):
            self.uvarint(f"{what} tag")
            self.take(self.uvarint(f"{what} tagged field size"), f"{what} tagged field")


class Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def uvarint(self, value: int) -> None:
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self.parts.append(bytes(out))

    def int(self, fmt: str, value: int) -> None:
        self.parts.append(struct.pack(fmt, value))

    def uuid(self, text: str) -> None:
        self.parts.append(uuid_to_bytes(text))

    def string(self, text: str) -> None:
        raw = text.encode("utf-8")
        self.uvarint(len(raw) + 1)
        self.parts.append(raw)

    def nullable_bytes(self, value: bytes | None) -> None:
        if value is None:
            self.uvarint(0)
        else:
            self.uvarint(len(value) + 1)
            self.parts.append(value)

    def tagged_fields(self) -> None:
        self.uvarint(0)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as an unsigned 32-bit value."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(length // 4):
        k = int.from_bytes(data[i * 4 : i * 4 + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h
