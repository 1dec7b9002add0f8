"""Kafka wire protocol framing on top of kio's generated request and response types.

A request on the wire (Kafka protocol guide, "Common Request and Response Structure")::

    Size          int32    bytes that follow
    RequestHeader          api_key int16, api_version int16, correlation_id int32,
                           client_id nullable string (v1+), tagged fields (v2, flexible APIs)
    Request body           the API's schema at api_version

and a response::

    Size           int32
    ResponseHeader         correlation_id int32, tagged fields (v1, flexible APIs)
    Response body

The header version follows the body's flexibility, except that an ApiVersions response always
uses header v0 (KIP-511), which kio's schemas already encode. kio supplies every schema and the
(de)serializers; this module only frames, picks schemas, and builds response entities from
plain values (``build``), so that handlers can be written once for every API version.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

REQUEST_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
SIZE = struct.Struct(">i")


class ProtocolError(Exception):
    """A request that cannot be parsed; the broker closes the connection, as Kafka does."""


@dataclasses.dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str


def peek_header(payload: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request payload (after the size field)."""
    if len(payload) < REQUEST_PREFIX.size:
        raise ProtocolError(f"request of {len(payload)} bytes is shorter than a request header")
    return REQUEST_PREFIX.unpack_from(payload)


def parse_request(payload: bytes, api_key: int, api_version: int) -> tuple[Any, Any]:
    """(header, body) of a request whose api key and version the broker supports."""
    schema = load_request_schema(api_key, api_version)
    try:
        header, header_size = entity_reader(schema.__header_schema__)(payload, 0)
        body, body_size = entity_reader(schema)(payload, header_size)
        end = header_size + body_size
    except Exception as err:  # kio raises assorted errors on malformed bytes
        raise ProtocolError(f"malformed {schema.__name__} v{api_version}: {type(err).__name__}: {err}") from err
    # Bytes after the last field are ignored, as Java Kafka does: librdkafka 2.16 leaves 3 of them
    # in an all-topics Metadata request at v9+ (a 4-byte count reserved, a 1-byte compact one used).
    if end > len(payload):
        raise ProtocolError(f"{schema.__name__} v{api_version} runs {end - len(payload)} bytes past its frame")
    return header, body


def encode_response(api_key: int, api_version: int, correlation_id: int, values: Mapping[str, Any]) -> bytes:
    """Size-prefixed response bytes for ``values`` built into the API's response schema."""
    schema = load_response_schema(api_key, api_version)
    body = build(schema, values)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_schema = schema.__header_schema__
    entity_writer(header_schema)(buffer, header_schema(correlation_id=correlation_id))
    entity_writer(schema)(buffer, body)
    data = buffer.getbuffer()
    SIZE.pack_into(data, 0, len(data) - SIZE.size)
    return bytes(data)


# -- building kio entities from plain values ---------------------------------------------------


def build(entity_type: type, values: Mapping[str, Any]) -> Any:
    """An instance of a kio entity from a mapping of plain values.

    Keys that the entity (at this version) does not have are ignored, so one handler serves
    every version; fields missing from ``values`` take their schema default. Nested entities
    are built from mappings, error codes from ints, durations from milliseconds and
    timestamps from epoch milliseconds (-1 meaning none).
    """
    kwargs = {}
    for name, convert in _converters(entity_type):
        if name in values:
            kwargs[name] = convert(values[name])
    return entity_type(**kwargs)


@functools.cache
def _converters(entity_type: type) -> list[tuple[str, Callable[[Any], Any]]]:
    hints = typing.get_type_hints(entity_type)
    return [(f.name, _converter(hints[f.name], f.metadata.get("kafka_type"))) for f in dataclasses.fields(entity_type)]


def _converter(hint: Any, kafka_type: str | None) -> Callable[[Any], Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        convert = _converter(inner[0], kafka_type)
        return lambda v: None if v is None else convert(v)
    if origin is tuple:
        item = _converter(args[0], kafka_type)
        return lambda v: tuple(item(x) for x in v)
    if dataclasses.is_dataclass(hint):
        return lambda v: v if isinstance(v, hint) else build(hint, v)
    match kafka_type:
        case "error_code":
            return lambda v: ErrorCode(int(v))
        case "timedelta_i32" | "timedelta_i64":
            return lambda v: v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)
        case "datetime_i64":
            return _datetime
        case "records" | "bytes":
            return lambda v: None if v is None else bytes(v)
    return lambda v: v


def _datetime(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime) or value is None:
        return value
    if value < 0:
        return None
    return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)


def millis(value: datetime.timedelta | int) -> int:
    """Milliseconds of a kio duration field."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)
