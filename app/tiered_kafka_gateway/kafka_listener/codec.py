"""Kafka's message schemas, read from Kafka's own JSON, and the one codec that reads and writes them.

The files in ``messages/`` are copied verbatim from Apache Kafka
(``clients/src/main/resources/common/message/*.json``, Apache License 2.0): ``FetchRequest.json``,
``MetadataResponse.json`` and so on, with Kafka's ``//`` comments. A schema names each field's
``type`` and the ``versions`` it exists in; this module interprets them rather than hand-writing each
message, so a field's layout is Kafka's by construction (the Kafka protocol guide, "Protocol
Primitive Types"):

    int8/int16/int32/int64/uint16   big-endian; bool one byte; float64 IEEE 754
    uuid                            16 bytes
    string / bytes / records        non-flexible: int16 (strings) or int32 length, -1 for null;
                                    flexible (``flexibleVersions``): unsigned varint length + 1, 0 for null
    []T                             non-flexible: int32 count (-1 null); flexible: unsigned varint count + 1
    struct                          its fields in order; flexible: then its tagged fields
                                    (unsigned varint count, then per field: varint tag, varint size, value)
    nullable struct field           int8 -1 (null) or 1, then the struct

A message decodes to a ``dict`` of field name -> value (structs as dicts, arrays as lists, records as
``bytes``). Encoding takes the same ``dict``; a missing field takes the schema's ``default`` (or the
type's zero). ``records`` may be given as a list of ``bytes`` chunks: they are written as they are,
never copied into one buffer (``Writer.parts``), so a Fetch response forwards segment bytes as read.
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tiered_kafka.errors import TieredKafkaError

MESSAGES = Path(__file__).parent / "messages"


class KafkaProtocolError(TieredKafkaError):
    """A Kafka-protocol frame that does not parse as its schema says (the listener closes the connection, as Kafka does)."""


@dataclass(frozen=True)
class Versions:
    low: int
    high: int  # inclusive; a large number for "N+"

    @staticmethod
    def parse(text: str | None) -> Versions:
        if text is None or text == "none":
            return Versions(1, 0)  # empty
        if text.endswith("+"):
            return Versions(int(text[:-1]), 1 << 15)
        if "-" in text:
            low, high = text.split("-")
            return Versions(int(low), int(high))
        return Versions(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


@dataclass
class Field:
    name: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any
    fields: list[Field] = field(default_factory=list)  # a struct's, or an array of structs'

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:]


@dataclass
class Schema:
    name: str
    api_key: int | None
    valid: Versions
    flexible: Versions
    fields: list[Field]


_PRIMITIVES = {"int8", "int16", "int32", "int64", "uint16", "bool", "float64", "uuid", "string", "bytes", "records"}


def _zero(type_: str, default: Any, nullable_default: bool) -> Any:
    if default == "null" or nullable_default:
        return None
    if type_ in ("int8", "int16", "int32", "int64", "uint16"):
        return int(default, 0) if isinstance(default, str) and default else 0
    if type_ == "bool":
        return default == "true"
    if type_ == "float64":
        return float(default) if default else 0.0
    if type_ == "string":
        return default or ""
    if type_ == "uuid":
        return bytes(16)
    if type_ in ("bytes", "records"):
        return b""
    return [] if type_.startswith("[]") else {}


def _field(spec: dict[str, Any], common: dict[str, list[dict[str, Any]]]) -> Field:
    sub = spec.get("fields")
    type_ = spec["type"]
    base = type_[2:] if type_.startswith("[]") else type_
    if sub is None and base not in _PRIMITIVES:
        sub = common[base]
    return Field(
        name=spec["name"], type=type_, versions=Versions.parse(spec.get("versions")),
        nullable=Versions.parse(spec.get("nullableVersions")), tagged=Versions.parse(spec.get("taggedVersions")),
        tag=spec.get("tag"), default=spec.get("default"), fields=[_field(f, common) for f in sub or []],
    )


@cache
def schema(name: str) -> Schema:
    """``messages/{name}.json`` (e.g. ``FetchRequest``), parsed once."""
    text = (MESSAGES / f"{name}.json").read_text()
    spec = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    return Schema(spec["name"], spec.get("apiKey"), Versions.parse(spec["validVersions"]),
                  Versions.parse(spec.get("flexibleVersions")), [_field(f, common) for f in spec["fields"]])


# -- reading --------------------------------------------------------------------------------
class Reader:
    def __init__(self, data: bytes | memoryview, offset: int = 0) -> None:
        self.data = memoryview(data)
        self.pos = offset

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise KafkaProtocolError(f"frame ends before its {n} bytes at {self.pos}")
        view = self.data[self.pos : self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack_from(fmt, self.take(size))[0]

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self.take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise KafkaProtocolError("unsigned varint longer than 5 bytes")


_FORMATS = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H", "float64": ">d"}


def _length(reader: Reader, flexible: bool, short: bool) -> int:
    """A string's, bytes' or array's length; -1 for null."""
    if flexible:
        return reader.uvarint() - 1
    return reader.unpack(">h" if short else ">i")


def _read_value(reader: Reader, f: Field, type_: str, version: int, flexible: bool) -> Any:
    if type_ in _FORMATS:
        return reader.unpack(_FORMATS[type_])
    if type_ == "bool":
        return reader.take(1)[0] != 0
    if type_ == "uuid":
        return bytes(reader.take(16))
    if type_ in ("string", "bytes", "records"):
        n = _length(reader, flexible, type_ == "string")
        if n < 0:
            return None
        raw = reader.take(n)
        if type_ == "string":
            try:
                return str(raw, "utf-8")
            except UnicodeDecodeError as err:
                raise KafkaProtocolError(f"{f.name} is not UTF-8") from err
        return bytes(raw)
    if type_.startswith("[]"):
        count = _length(reader, flexible, False)
        if count < 0:
            return None
        if count > len(reader.data) - reader.pos:  # every element takes at least a byte
            raise KafkaProtocolError(f"{f.name}: {count} elements cannot fit in the frame")
        return [_read_value(reader, f, type_[2:], version, flexible) for _ in range(count)]
    # a struct
    return _read_struct(reader, f.fields, version, flexible)


def _read_struct(reader: Reader, fields: list[Field], version: int, flexible: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tagged: dict[int, Field] = {}
    for f in fields:
        if version not in f.versions:
            out[f.name] = _zero(f.type, f.default, False)
            continue
        if flexible and version in f.tagged:
            tagged[f.tag] = f  # type: ignore[index]
            out[f.name] = _zero(f.type, f.default, False)
            continue
        if version in f.nullable and not f.is_array and f.type not in _PRIMITIVES:
            if reader.unpack(">b") < 0:
                out[f.name] = None
                continue
        out[f.name] = _read_value(reader, f, f.type, version, flexible)
    if flexible:
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            body = reader.take(size)
            if tag in tagged:
                f = tagged[tag]
                out[f.name] = _read_value(Reader(body), f, f.type, version, True)
    return out


def decode(name: str, version: int, data: bytes | memoryview, offset: int = 0) -> tuple[dict[str, Any], int]:
    """Message ``name`` at ``version`` from ``data[offset:]``: (fields, offset after it)."""
    s = schema(name)
    reader = Reader(data, offset)
    try:
        return _read_struct(reader, s.fields, version, version in s.flexible), reader.pos
    except (struct.error, IndexError) as err:
        raise KafkaProtocolError(f"{name} v{version}: {err}") from err


# -- writing --------------------------------------------------------------------------------
class Writer:
    """Bytes as a list of parts (``parts``): large ``records`` are appended, never copied."""

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self.size = 0

    def put(self, data: bytes | memoryview) -> None:
        self.parts.append(data)
        self.size += len(data)

    def uvarint(self, value: int) -> None:
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self.put(bytes(out))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


def _write_length(w: Writer, n: int, flexible: bool, short: bool) -> None:
    if flexible:
        w.uvarint(n + 1)
    else:
        w.put(struct.pack(">h" if short else ">i", n))


def _write_value(w: Writer, f: Field, type_: str, value: Any, version: int, flexible: bool) -> None:
    if type_ in _FORMATS:
        w.put(struct.pack(_FORMATS[type_], value))
    elif type_ == "bool":
        w.put(b"\x01" if value else b"\x00")
    elif type_ == "uuid":
        w.put(value.bytes if isinstance(value, uuid.UUID) else bytes(value))
    elif type_ in ("string", "bytes", "records"):
        if value is None:
            _write_length(w, -1, flexible, type_ == "string")
            return
        if type_ == "string":
            value = value.encode()
        if isinstance(value, list):  # records as chunks
            _write_length(w, sum(len(c) for c in value), flexible, False)
            for chunk in value:
                w.put(chunk)
            return
        _write_length(w, len(value), flexible, type_ == "string")
        w.put(value)
    elif type_.startswith("[]"):
        if value is None:
            _write_length(w, -1, flexible, False)
            return
        _write_length(w, len(value), flexible, False)
        for item in value:
            _write_value(w, f, type_[2:], item, version, flexible)
    else:
        _write_struct(w, f.fields, value, version, flexible)


def _write_struct(w: Writer, fields: list[Field], values: dict[str, Any], version: int, flexible: bool) -> None:
    tagged: list[tuple[int, Field, Any]] = []
    for f in fields:
        if version not in f.versions:
            continue
        value = values.get(f.name, _MISSING)
        if value is _MISSING:
            value = _zero(f.type, f.default, False)
        if flexible and version in f.tagged:
            if value is not None and value != _zero(f.type, f.default, False) and value != {} and value != []:
                tagged.append((f.tag, f, value))  # type: ignore[arg-type]
            continue
        if version in f.nullable and not f.is_array and f.type not in _PRIMITIVES:
            if value is None:
                w.put(b"\xff")
                continue
            w.put(b"\x01")
        elif value is None and f.type not in _PRIMITIVES and not f.is_array:
            value = {}
        _write_value(w, f, f.type, value, version, flexible)
    if flexible:
        w.uvarint(len(tagged))
        for tag, f, value in sorted(tagged, key=lambda t: t[0]):
            inner = Writer()
            _write_value(inner, f, f.type, value, version, True)
            w.uvarint(tag)
            w.uvarint(inner.size)
            for part in inner.parts:
                w.put(part)


_MISSING = object()


def encode(name: str, version: int, values: dict[str, Any], w: Writer | None = None) -> Writer:
    """Message ``name`` at ``version`` from ``values`` (module docstring), appended to ``w``."""
    s = schema(name)
    w = w or Writer()
    _write_struct(w, s.fields, values, version, version in s.flexible)
    return w
