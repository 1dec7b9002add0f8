"""Kafka's framing: size-prefixed frames, request and response headers, and the APIs this listener answers.

A frame is an int32 size then that many bytes (the protocol guide, "Common Request and Response
Structure"). A request starts with ``RequestHeader.json``: RequestApiKey int16, RequestApiVersion
int16, CorrelationId int32, ClientId (int16-length nullable string, header v1+) and, in header v2
(every flexible request version), tagged fields. A response starts with ``ResponseHeader.json``:
CorrelationId int32, and tagged fields in header v1 (flexible response versions), except that an
ApiVersions response always uses header v0 (a client must read it before knowing our versions).

``API_VERSIONS`` is what the listener advertises in ApiVersions: the versions it implements of
each API, each within ``validVersions`` of Kafka's JSON in ``messages/``. The group APIs are
forwarded to Kafka's coordinator (``groups``): for them the listener advertises the intersection
with what the cluster's brokers advertise (``server.Listener.advertised``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tiered_kafka_gateway.kafka_listener.codec import KafkaProtocolError, Reader, Writer, schema

# api key -> (message name stem, min version, max version) implemented here
API_VERSIONS: dict[int, tuple[str, int, int]] = {
    0x12: ("ApiVersions", 0, 4),
    0: ("Produce", 3, 9),  # advertised because librdkafka enables record-batch v2 (and zstd) Fetch only beside Produce 3 (7);
    #                        every write is refused (``server``): this is a read replica
    3: ("Metadata", 0, 12),
    2: ("ListOffsets", 1, 10),
    1: ("Fetch", 4, 17),  # magic 2 record batches only: v4+ (Kafka 4.0 dropped the older ones too)
    23: ("OffsetForLeaderEpoch", 2, 4),
    10: ("FindCoordinator", 0, 6),
    17: ("SaslHandshake", 0, 1),
    36: ("SaslAuthenticate", 0, 2),
    # forwarded to Kafka's group coordinator (groups module)
    11: ("JoinGroup", 0, 9),
    14: ("SyncGroup", 0, 5),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    8: ("OffsetCommit", 0, 9),
    9: ("OffsetFetch", 0, 9),
    68: ("ConsumerGroupHeartbeat", 0, 1),
}
GROUP_APIS = frozenset({11, 14, 12, 13, 8, 9, 68})
API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts in the frame

    @property
    def name(self) -> str:
        return API_VERSIONS[self.api_key][0]


class UnsupportedRequest(KafkaProtocolError):
    """An unknown API key or a version this listener does not implement (Kafka closes the connection;
    ApiVersions answers v0 with UNSUPPORTED_VERSION instead, ``server``)."""

    def __init__(self, message: str, header: RequestHeader) -> None:
        super().__init__(message)
        self.header = header


def is_flexible(api_key: int, version: int, kind: str = "Request") -> bool:
    return version in schema(API_VERSIONS[api_key][0] + kind).flexible


def parse_header(frame: bytes | memoryview) -> RequestHeader:
    """The request header of ``frame``; UnsupportedRequest for an API or version not in API_VERSIONS
    (the header is still parsed, so the caller knows the correlation id)."""
    if len(frame) < 8:
        raise KafkaProtocolError(f"a request of {len(frame)} bytes has no header")
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    reader = Reader(frame, 8)
    length = reader.unpack(">h")
    client_id = None if length < 0 else str(reader.take(length), "utf-8", "replace")
    known = API_VERSIONS.get(api_key)
    header = RequestHeader(api_key, version, correlation_id, client_id, reader.pos)
    if known is None or not known[1] <= version <= known[2]:
        raise UnsupportedRequest(f"api key {api_key} version {version} is not supported", header)
    if is_flexible(api_key, version):
        for _ in range(reader.uvarint()):  # the header's tagged fields: none that we read
            reader.uvarint()
            reader.take(reader.uvarint())
        header = RequestHeader(api_key, version, correlation_id, client_id, reader.pos)
    return header


def response_header(api_key: int, version: int, correlation_id: int) -> bytes:
    """ResponseHeader v1 (tagged fields) for flexible responses, v0 otherwise and for ApiVersions."""
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, version, "Response"):
        return struct.pack(">ib", correlation_id, 0)
    return struct.pack(">i", correlation_id)


def frame(header: bytes, body: Writer) -> list[bytes | memoryview]:
    """The response frame as parts: size, header, the body's parts (records never copied)."""
    return [struct.pack(">i", len(header) + body.size), header, *body.parts]


def request_frame(api_key: int, version: int, correlation_id: int, client_id: str, body: Writer) -> bytes:
    """A request of ours (to Kafka, ``upstream``): header v1 or v2, then the body."""
    head = struct.pack(">hhi", api_key, version, correlation_id)
    cid = client_id.encode()
    head += struct.pack(">h", len(cid)) + cid
    if is_flexible(api_key, version):
        head += b"\x00"
    data = body.getvalue()
    return struct.pack(">i", len(head) + len(data)) + head + data
