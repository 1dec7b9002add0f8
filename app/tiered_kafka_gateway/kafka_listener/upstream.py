"""The listener's own connections to the cluster's Kafka brokers (asyncio, Kafka's protocol).

What the listener asks Kafka: the brokers' ApiVersions (to advertise the group APIs' common
versions), Metadata (topic ids, partition counts, leaders), ListOffsets, Fetch for offsets beyond
remote storage (``ApiVersionsRequest``, ``MetadataRequest`` v12, ``ListOffsetsRequest`` v7 and
``FetchRequest`` v12, which every Kafka 3.x and 4.x broker answers), FindCoordinator for a group,
and the group requests it forwards byte for byte (``groups``).

Connections: a Kafka broker answers one request of a connection at a time, in order, so a Fetch
that waits ``max_wait_ms`` would hold up everything behind it. Each request therefore takes a
connection of its own from a per-broker free list and gives it back when answered (new ones are
opened on demand, at most ``POOL_LIMIT`` kept idle per broker). Forwarded group requests use
the client connection's own upstream connections (``groups``), never these.

Security: plaintext only (``security.protocol`` PLAINTEXT, the default). A cluster whose
``kafka_security`` asks for more is refused when the listener starts (``check_supported``), with a
message saying so, rather than connecting in a way the operator did not configure.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tiered_kafka.errors import ConfigError, TieredKafkaError
from tiered_kafka_gateway.kafka_listener.codec import Writer, decode, encode
from tiered_kafka_gateway.kafka_listener.framing import request_frame, response_header

POOL_LIMIT = 8
CLIENT_ID = "tiered-kafka-listener"
METADATA_TTL_S = 5.0
CONNECT_TIMEOUT_S = 10.0


class KafkaUpstreamError(TieredKafkaError):
    """The listener's connection to Kafka failed, or Kafka answered out of protocol (retriable)."""

    retriable = True


def check_supported(security: Mapping[str, str]) -> None:
    protocol = security.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        raise ConfigError(f"the Kafka listener reaches Kafka over PLAINTEXT only; this cluster's kafka_security asks for {protocol}")


class Connection:
    """One TCP connection to a broker; requests one at a time (module docstring)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._ids = itertools.count(1)

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=1 << 20), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as err:
            raise KafkaUpstreamError(f"cannot connect to Kafka at {host}:{port}: {err}") from err
        return cls(reader, writer)

    async def _roundtrip(self, data: bytes, timeout_s: float) -> bytes:
        try:
            self.writer.write(data)
            await self.writer.drain()
            size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout_s))[0]
            return await asyncio.wait_for(self.reader.readexactly(size), timeout_s)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as err:
            self.close()
            raise KafkaUpstreamError(f"Kafka connection failed: {err!r}") from err

    async def request(self, api_key: int, name: str, version: int, values: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        """Request ``name`` (e.g. "Fetch") at ``version``; the decoded response body."""
        correlation_id = next(self._ids)
        frame = request_frame(api_key, version, correlation_id, CLIENT_ID, encode(name + "Request", version, values))
        body = await self._roundtrip(frame, timeout_s)
        offset = len(response_header(api_key, version, correlation_id))
        if struct.unpack_from(">i", body)[0] != correlation_id:
            self.close()
            raise KafkaUpstreamError("Kafka answered another request")
        return decode(name + "Response", version, body, offset)[0]

    async def forward(self, frame: bytes | memoryview, timeout_s: float) -> bytes:
        """A client's request frame (size excluded) with our correlation id; the response without its size,
        its correlation id still ours (``groups`` restores the client's)."""
        correlation_id = next(self._ids)
        data = bytearray(struct.pack(">i", len(frame)))
        data += frame
        struct.pack_into(">i", data, 8, correlation_id)  # size(4) api_key(2) api_version(2) correlation_id(4)
        return await self._roundtrip(bytes(data), timeout_s)

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()

    @property
    def closed(self) -> bool:
        return self.writer.is_closing()


@dataclass
class TopicMeta:
    topic_id: bytes
    partitions: dict[int, tuple[int, int]]  # partition -> (leader node id, leader epoch)
    error_code: int = 0


@dataclass
class ClusterMeta:
    cluster_id: str | None
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicMeta]
    fetched_at: float = field(default_factory=time.monotonic)


class Upstream:
    """The cluster's Kafka as the listener reaches it (module docstring)."""

    def __init__(self, bootstrap_servers: str, timeout_s: float = 10.0) -> None:
        self.bootstrap = [(h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1])) for h in bootstrap_servers.split(",") if h.strip()]
        self.timeout_s = timeout_s
        self._idle: dict[tuple[str, int], list[Connection]] = {}
        self._meta: ClusterMeta | None = None
        self._meta_lock = asyncio.Lock()
        self.api_versions: dict[int, tuple[int, int]] | None = None
        self.calls = 0

    async def _call(self, address: tuple[str, int], api_key: int, name: str, version: int, values: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        idle = self._idle.setdefault(address, [])
        conn = None
        while idle and conn is None:
            candidate = idle.pop()
            conn = None if candidate.closed else candidate
        conn = conn or await Connection.open(*address)
        self.calls += 1
        response = await conn.request(api_key, name, version, values, timeout_s or self.timeout_s)
        if not conn.closed and len(idle) < POOL_LIMIT:
            idle.append(conn)
        else:
            conn.close()
        return response

    async def _any(self, api_key: int, name: str, version: int, values: dict[str, Any]) -> dict[str, Any]:
        errors = []
        addresses = list(self.bootstrap) + ([] if self._meta is None else list(self._meta.brokers.values()))
        for address in dict.fromkeys(addresses):
            try:
                return await self._call(address, api_key, name, version, values)
            except KafkaUpstreamError as err:
                errors.append(str(err))
        raise KafkaUpstreamError("; ".join(errors) or "no Kafka broker configured")

    async def versions(self) -> dict[int, tuple[int, int]]:
        if self.api_versions is None:
            response = await self._any(18, "ApiVersions", 3, {"ClientSoftwareName": CLIENT_ID, "ClientSoftwareVersion": "1"})
            self.api_versions = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in response["ApiKeys"]}
        return self.api_versions

    async def metadata(self, *, refresh: bool = False) -> ClusterMeta:
        """Every topic's id, partitions and leaders, cached for METADATA_TTL_S."""
        meta = self._meta
        if meta is not None and not refresh and time.monotonic() - meta.fetched_at < METADATA_TTL_S:
            return meta
        async with self._meta_lock:
            if self._meta is not None and self._meta is not meta and not refresh:
                return self._meta
            response = await self._any(3, "Metadata", 12, {"Topics": None, "AllowAutoTopicCreation": False})
            brokers = {b["NodeId"]: (b["Host"], b["Port"]) for b in response["Brokers"]}
            topics = {
                t["Name"]: TopicMeta(t["TopicId"], {p["PartitionIndex"]: (p["LeaderId"], p["LeaderEpoch"]) for p in t["Partitions"]}, t["ErrorCode"])
                for t in response["Topics"]
                if t["Name"] is not None
            }
            self._meta = ClusterMeta(response["ClusterId"], brokers, topics)
            return self._meta

    async def leader(self, topic: str, partition: int) -> tuple[str, int] | None:
        meta = await self.metadata()
        found = meta.topics.get(topic)
        if found is None or partition not in found.partitions:
            return None
        address = meta.brokers.get(found.partitions[partition][0])
        return address

    async def list_offset(self, topic: str, partition: int, timestamp: int, isolation_level: int) -> tuple[int, int, int, int]:
        """(error code, offset, timestamp, leader epoch) of ListOffsets v7 for one partition."""
        address = await self.leader(topic, partition)
        if address is None:
            return 3, -1, -1, -1  # UNKNOWN_TOPIC_OR_PARTITION
        response = await self._call(address, 2, "ListOffsets", 7, {
            "ReplicaId": -1, "IsolationLevel": isolation_level,
            "Topics": [{"Name": topic, "Partitions": [{"PartitionIndex": partition, "CurrentLeaderEpoch": -1, "Timestamp": timestamp}]}],
        })
        p = response["Topics"][0]["Partitions"][0]
        if p["ErrorCode"] in (6, 74, 75):  # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH: stale leaders
            await self.metadata(refresh=True)
        return p["ErrorCode"], p["Offset"], p["Timestamp"], p["LeaderEpoch"]

    async def fetch(self, address: tuple[str, int], topics: dict[str, list[dict[str, Any]]], *, max_wait_ms: int, min_bytes: int,
                    max_bytes: int, isolation_level: int) -> dict[tuple[str, int], dict[str, Any]]:
        """Fetch v12 (sessionless) from one broker; each partition's PartitionData by (topic, partition).
        ``topics``: topic -> [{"Partition", "FetchOffset", "PartitionMaxBytes"}]."""
        request = {
            "ReplicaId": -1, "MaxWaitMs": max_wait_ms, "MinBytes": min_bytes, "MaxBytes": max_bytes, "IsolationLevel": isolation_level,
            "SessionId": 0, "SessionEpoch": -1,
            "Topics": [{"Topic": t, "Partitions": [{"CurrentLeaderEpoch": -1, "LastFetchedEpoch": -1, "LogStartOffset": -1, **p} for p in parts]}
                       for t, parts in topics.items()],
            "ForgottenTopicsData": [], "RackId": "",
        }
        response = await self._call(address, 1, "Fetch", 12, request, timeout_s=self.timeout_s + max_wait_ms / 1000)
        out = {}
        for t in response["Responses"]:
            for p in t["Partitions"]:
                out[(t["Topic"], p["PartitionIndex"])] = p
                if p["ErrorCode"] in (6, 74, 75):
                    self._meta = None
        return out

    async def find_coordinator(self, key: str) -> tuple[int, tuple[str, int] | None, int]:
        """(error code, the group coordinator's address, its node id) by FindCoordinator v3."""
        response = await self._any(10, "FindCoordinator", 3, {"Key": key, "KeyType": 0})
        if response["ErrorCode"]:
            return response["ErrorCode"], None, -1
        return 0, (response["Host"], response["Port"]), response["NodeId"]

    def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
