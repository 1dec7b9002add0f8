"""The listener's connections: frames in, answers out, within bounds; one asyncio server per cluster.

Per connection, as a Kafka broker: one request at a time, answered in order (a client's pipelined
requests wait in the socket), so a connection holds at most one request frame (at most
``max_request_bytes``, Kafka's socket.request.max.bytes) and one response (at most
``max_response_bytes`` of records, plus headers).

Bad input (nothing of it disturbs another connection; each is counted in
``..._errors_total{api="frame"}``):

- a size below a header's 8 bytes or above ``max_request_bytes``, a frame that does not parse as its
  schema, an unknown API key, a version not implemented: the connection is closed, as Kafka closes
  it (it cannot frame an answer the client would read), except
- ApiVersions at a version not implemented: answered in v0 with UNSUPPORTED_VERSION and the versions
  implemented (KIP-511), so the client retries with one it shares;
- a client silent for ``idle_timeout_s`` (Kafka's connections.max.idle.ms), or that starts a frame and
  does not finish it, or does not read its answer, within ``request_timeout_s``: closed;
- past ``max_connections`` open connections, a new one is closed as it is accepted;
- an unexpected failure answering a request: logged with an id, the connection closed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from tiered_kafka_gateway.deps import Access
from tiered_kafka_gateway.kafka_listener import errors as kafka_errors
from tiered_kafka_gateway.kafka_listener import fetch, groups, metadata, offsets, sasl
from tiered_kafka_gateway.kafka_listener.codec import KafkaProtocolError, Writer, decode, encode
from tiered_kafka_gateway.kafka_listener.context import ListenerContext
from tiered_kafka_gateway.kafka_listener.framing import (
    API_VERSIONS, API_VERSIONS_KEY, GROUP_APIS, SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, RequestHeader, UnsupportedRequest,
    frame as response_frame, parse_header, response_header,
)
from tiered_kafka_gateway.kafka_listener.upstream import Connection, KafkaUpstreamError

log = logging.getLogger(__name__)


@dataclass
class ConnectionState:
    access: Access | None
    handshake_version: int | None = None  # SaslHandshake v0: the next frame is the raw PLAIN token
    group_conns: dict[tuple[str, int], Connection] = field(default_factory=dict)
    coordinators: dict[str, Any] = field(default_factory=dict)
    failed: bool = False  # SASL authentication failed: answered, then closed


class Listener:
    """One cluster's Kafka-protocol server (module docstring)."""

    def __init__(self, ctx: ListenerContext, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ctx = ctx
        self.ssl_context = ssl_context
        self.server: asyncio.base_events.Server | None = None
        self.open = 0
        self.port = 0
        self.versions: dict[int, tuple[int, int]] = {k: (low, high) for k, (_n, low, high) in API_VERSIONS.items()}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> int:
        settings = self.ctx.settings
        if self.ctx.upstream is not None:
            try:
                kafka = await self.ctx.upstream.versions()
            except KafkaUpstreamError as err:
                log.warning("kafka listener %s: Kafka's ApiVersions unavailable (%s): group APIs not advertised", self.ctx.name, err)
                kafka = {}
        else:
            kafka = {}
        for key in GROUP_APIS:
            ours = self.versions[key]
            theirs = kafka.get(key)
            if theirs is None or max(ours[0], theirs[0]) > min(ours[1], theirs[1]):
                del self.versions[key]
            else:
                self.versions[key] = (max(ours[0], theirs[0]), min(ours[1], theirs[1]))
        self.server = await asyncio.start_server(self._serve, settings.host, settings.port, ssl=self.ssl_context, reuse_port=True,
                                                 limit=64 * 1024)
        self.port = self.server.sockets[0].getsockname()[1]
        self.ctx.advertised = settings.advertised(self.port)
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.server.wait_closed()
        if self.ctx.upstream is not None:
            self.ctx.upstream.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ctx, settings = self.ctx, self.ctx.settings
        if self.open >= settings.max_connections:
            ctx.metrics.accepted.labels(ctx.name, "refused").inc()
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.open += 1
        ctx.metrics.accepted.labels(ctx.name, "accepted").inc()
        ctx.metrics.connections.labels(ctx.name).inc()
        state = ConnectionState(access=Access(None) if ctx.authenticate is None else None)
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(4), settings.idle_timeout_s)
                size = struct.unpack(">i", head)[0]
                if size < 8 and state.handshake_version != 0 or size < 0 or size > settings.max_request_bytes:
                    self._refused("size", f"a frame of {size} bytes (bound {settings.max_request_bytes})")
                    break
                data = await asyncio.wait_for(reader.readexactly(size), settings.request_timeout_s)
                ctx.metrics.bytes.labels(ctx.name, "in", "frames").inc(4 + size)
                parts = await self._answer(state, data)
                if parts is None:
                    break
                writer.writelines(parts)
                await asyncio.wait_for(writer.drain(), settings.request_timeout_s)
                ctx.metrics.bytes.labels(ctx.name, "out", "frames").inc(sum(len(p) for p in parts))
                if state.failed:
                    break
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self.open -= 1
            ctx.metrics.connections.labels(ctx.name).dec()
            for conn in state.group_conns.values():
                conn.close()
            writer.close()
            self._tasks.discard(task)

    def _refused(self, why: str, detail: str) -> None:
        self.ctx.metrics.errors.labels(self.ctx.name, "frame", why).inc()
        log.info("kafka listener %s: closing a connection: %s", self.ctx.name, detail)

    async def _answer(self, state: ConnectionState, data: bytes) -> list[bytes | memoryview] | None:
        """The response frame's parts for one request frame; None: close the connection."""
        ctx = self.ctx
        if state.handshake_version == 0 and state.access is None:  # SaslHandshake v0: a raw PLAIN token
            assert ctx.authenticate is not None
            state.access = sasl.authenticate(ctx.authenticate, ctx.name, data)
            state.handshake_version = None
            return None if state.access is None else [struct.pack(">i", 0)]
        try:
            header = parse_header(data)
        except UnsupportedRequest as err:
            if err.header.api_key == API_VERSIONS_KEY:  # KIP-511: answer in v0, with what we support
                body = self._api_versions(0, kafka_errors.UNSUPPORTED_VERSION)
                return response_frame(response_header(API_VERSIONS_KEY, 0, err.header.correlation_id), body)
            self._refused("unsupported", str(err))
            return None
        except KafkaProtocolError as err:
            self._refused("malformed", str(err))
            return None
        if state.access is None and header.api_key not in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            self._refused("unauthenticated", f"{header.name} before SASL authentication")
            return None
        if header.api_key not in self.versions or not self.versions[header.api_key][0] <= header.api_version <= self.versions[header.api_key][1]:
            self._refused("unsupported", f"{header.name} v{header.api_version} is not advertised")
            return None
        ctx.metrics.requests.labels(ctx.name, header.name).inc()
        try:
            if header.api_key in GROUP_APIS:
                forwarded = await groups.forward(ctx, header, data, state.group_conns, state.coordinators, state.access)
                if forwarded is None:
                    self._refused("coordinator", f"{header.name}: Kafka's group coordinator unreachable")
                    return None
                return [struct.pack(">i", len(forwarded)), forwarded]
            request, end = decode(header.name + "Request", header.api_version, data, header.body_offset)
            response = await self._dispatch(state, header, request)
        except KafkaProtocolError as err:
            self._refused("malformed", f"{header.name}: {err}")
            return None
        except Exception:  # noqa: BLE001 - one failed request closes its connection only (module docstring)
            error_id = uuid.uuid4().hex[:12]
            log.exception("kafka listener %s: %s failed (error id %s)", ctx.name, header.name, error_id)
            self._refused("internal", f"error id {error_id}")
            return None
        if response is None:
            return None
        if isinstance(response, Writer):
            body = response
        else:
            body = encode(header.name + "Response", header.api_version, response)
        return response_frame(response_header(header.api_key, header.api_version, header.correlation_id), body)

    def _api_versions(self, version: int, error: int = 0) -> Writer:
        keys = [{"ApiKey": k, "MinVersion": low, "MaxVersion": high} for k, (low, high) in sorted(self.versions.items())]
        return encode("ApiVersionsResponse", version, {"ErrorCode": error, "ApiKeys": keys, "ThrottleTimeMs": 0, "SupportedFeatures": [],
                                                       "FinalizedFeaturesEpoch": -1, "FinalizedFeatures": [], "ZkMigrationReady": False})

    async def _dispatch(self, state: ConnectionState, header: RequestHeader, request: dict[str, Any]) -> dict[str, Any] | Writer | None:
        ctx, key, version = self.ctx, header.api_key, header.api_version
        if key == API_VERSIONS_KEY:
            return self._api_versions(version)
        if key == SASL_HANDSHAKE_KEY:
            if ctx.authenticate is None:
                return {"ErrorCode": kafka_errors.UNSUPPORTED_SASL_MECHANISM, "Mechanisms": []}
            if request["Mechanism"] != sasl.MECHANISM:
                return {"ErrorCode": kafka_errors.UNSUPPORTED_SASL_MECHANISM, "Mechanisms": [sasl.MECHANISM]}
            state.handshake_version = version
            return {"ErrorCode": 0, "Mechanisms": [sasl.MECHANISM]}
        if key == SASL_AUTHENTICATE_KEY:
            if ctx.authenticate is None or state.handshake_version is None or state.access is not None:
                return {"ErrorCode": kafka_errors.ILLEGAL_SASL_STATE, "ErrorMessage": "no SASL handshake in progress", "AuthBytes": b""}
            state.access = sasl.authenticate(ctx.authenticate, ctx.name, request["AuthBytes"])
            state.handshake_version = None
            if state.access is None:
                state.failed = True  # answered, then closed (_serve)
                ctx.metrics.errors.labels(ctx.name, "SaslAuthenticate", str(kafka_errors.SASL_AUTHENTICATION_FAILED)).inc()
                return {"ErrorCode": kafka_errors.SASL_AUTHENTICATION_FAILED, "ErrorMessage": "Authentication failed: invalid token", "AuthBytes": b""}
            return {"ErrorCode": 0, "ErrorMessage": None, "AuthBytes": b"", "SessionLifetimeMs": 0}
        access = state.access
        assert access is not None
        if key == 0:  # Produce: a read replica takes no writes (framing.API_VERSIONS)
            if request["Acks"] == 0:
                return None  # no answer is read for acks=0: close, as Kafka does on a failed acks=0 produce
            ctx.metrics.errors.labels(ctx.name, "Produce", str(kafka_errors.TOPIC_AUTHORIZATION_FAILED)).inc()
            return {"ThrottleTimeMs": 0, "Responses": [
                {"Name": t["Name"], "PartitionResponses": [
                    {"Index": p["Index"], "ErrorCode": kafka_errors.TOPIC_AUTHORIZATION_FAILED, "BaseOffset": -1,
                     "ErrorMessage": "the tiered-kafka listener is a read replica: produce to Kafka"} for p in t["PartitionData"]]}
                for t in request["TopicData"]]}
        if key == 3:
            return await metadata.handle(ctx, access, version, request)
        if key == 1:
            return await fetch.handle(ctx, access, version, request)
        if key == 2:
            return await offsets.handle_list_offsets(ctx, access, version, request)
        if key == 23:
            return await offsets.handle_offset_for_leader_epoch(ctx, access, version, request)
        if key == 10:
            return await groups.find_coordinator(ctx, version, request, state.coordinators, access)
        return None
