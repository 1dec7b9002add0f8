"""The listener's SASL/PLAIN with the gateway's tokens and scopes, its refusals of bad input, its metrics.

Authentication: a token's password opens the connection, its topic patterns scope what it sees and
reads (Metadata lists only those; TOPIC_AUTHORIZATION_FAILED outside them), a wrong token or one
for other clusters fails SASL, and a client without SASL is refused. Bad input (raw sockets): an
oversize or negative frame size, an unknown API key, a truncated body and a frame started then
abandoned close that connection only; ApiVersions at an unknown version answers v0 with
UNSUPPORTED_VERSION; past max_connections a connection is closed on accept. Each is counted in the
gateway's /metrics beside the requests and bytes served.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import struct
import time
import urllib.request
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.integration.kafka_listener.conftest import PRODUCED, TOPIC, ListenerStack, another_listener
from tests.support.stack_env import create_tiered_topic
from tiered_kafka_gateway.kafka_listener.codec import encode
from tiered_kafka_gateway.kafka_listener.framing import request_frame
from tiered_kafka_gateway.kafka_listener.upstream import Connection

pytestmark = pytest.mark.integration

TOKEN = "history-reader-token-0123456789"
OTHER_CLUSTER_TOKEN = "no-cluster-token-0123456789abc"
OTHER_TOKEN = "no-group-token-0123456789abcdef"


def sasl_consumer(address: str, password: str | None, **extra: Any) -> Consumer:
    config = {"bootstrap.servers": address, "group.id": f"sec-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False, **extra}
    if password is not None:
        config.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "reader", "sasl.password": password, **extra})
    return Consumer(config)


def test_sasl_tokens_and_topic_scopes(tiered: ListenerStack, s3_server: Any) -> None:
    hidden = f"hidden-{uuid.uuid4().hex[:6]}"
    create_tiered_topic(tiered.stack, hidden, 1)
    auth = {"enabled": True, "tokens": {TOKEN: [TOPIC], OTHER_CLUSTER_TOKEN: {"topics": [".*"], "clusters": []}}}
    with another_listener(tiered, s3_server, {"auth": auth}) as address:
        consumer = sasl_consumer(address, TOKEN)
        try:
            topics = consumer.list_topics(timeout=20).topics
            assert TOPIC in topics and hidden not in topics  # Metadata lists only what the token may read
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            first = [m for m in consumer.consume(10, 10) if m.error() is None]
            assert first and first[0].offset() == 0
            described = consumer.list_topics(hidden, timeout=20).topics[hidden]
            assert described.error is not None and described.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            assert asyncio.run(fetch_and_list(address, TOKEN, hidden)) == (29, 29)  # Fetch and ListOffsets outside the scope
        finally:
            consumer.close()
        for password in ("wrong-token-0123456789abcdef", OTHER_CLUSTER_TOKEN):
            refused = sasl_consumer(address, password)
            try:
                with pytest.raises(KafkaException) as failed:
                    refused.list_topics(timeout=10)
                assert failed.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT), failed.value
            finally:
                refused.close()
        plain = sasl_consumer(address, None)
        try:
            with pytest.raises(KafkaException):
                plain.list_topics(timeout=5)
        finally:
            plain.close()


async def sasl_connection(address: str, token: str) -> Connection:
    """A raw connection to the listener, authenticated by SASL/PLAIN with ``token``."""
    host, port = address.split(":")
    conn = await Connection.open(host, int(port))
    handshake = await conn.request(17, "SaslHandshake", 1, {"Mechanism": "PLAIN"})
    assert handshake["ErrorCode"] == 0
    authenticated = await conn.request(36, "SaslAuthenticate", 2, {"AuthBytes": b"\x00reader\x00" + token.encode()})
    assert authenticated["ErrorCode"] == 0
    return conn


async def fetch_and_list(address: str, token: str, topic: str) -> tuple[int, int]:
    """SASL/PLAIN with ``token``, then Fetch v12 and ListOffsets v7 of ``topic`` partition 0: their partition error codes."""
    conn = await sasl_connection(address, token)
    try:
        fetched = await conn.request(1, "Fetch", 12, {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 0, "MaxBytes": 1 << 20, "SessionEpoch": -1,
                                                      "Topics": [{"Topic": topic, "Partitions": [{"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}]}],
                                                      "ForgottenTopicsData": []})
        listed = await conn.request(2, "ListOffsets", 7, {"ReplicaId": -1, "Topics": [{"Name": topic, "Partitions": [{"PartitionIndex": 0, "Timestamp": -2}]}]})
        return fetched["Responses"][0]["Partitions"][0]["ErrorCode"], listed["Topics"][0]["Partitions"][0]["ErrorCode"]
    finally:
        conn.close()


async def group_requests(address: str, token: str, group: str, hidden: str) -> dict[str, Any]:
    """Through the listener with ``token`` (scoped to TOPIC): OffsetCommit v8 of TOPIC and ``hidden``, OffsetFetch v8
    of the group's every topic and of both by name, a KIP-848 heartbeat subscribing to ``hidden``."""
    conn = await sasl_connection(address, token)

    def partition0(offset: int) -> list[dict[str, Any]]:
        return [{"PartitionIndex": 0, "CommittedOffset": offset, "CommittedLeaderEpoch": -1, "CommittedMetadata": ""}]

    def offsets(answer: dict[str, Any]) -> dict[tuple[str, int], tuple[int, int]]:
        (found,) = answer["Groups"]
        return {(t["Name"], p["PartitionIndex"]): (p["CommittedOffset"], p["ErrorCode"]) for t in found["Topics"] for p in t["Partitions"]}

    try:
        committed = await conn.request(8, "OffsetCommit", 8, {"GroupId": group, "GenerationIdOrMemberEpoch": -1, "MemberId": "", "GroupInstanceId": None,
                                                              "Topics": [{"Name": TOPIC, "Partitions": partition0(5)}, {"Name": hidden, "Partitions": partition0(7)}]})
        every = await conn.request(9, "OffsetFetch", 8, {"Groups": [{"GroupId": group, "Topics": None}], "RequireStable": False})
        named = await conn.request(9, "OffsetFetch", 8, {"Groups": [{"GroupId": group, "Topics": [{"Name": TOPIC, "PartitionIndexes": [0]},
                                                                                                 {"Name": hidden, "PartitionIndexes": [0]}]}],
                                                         "RequireStable": False})
        heartbeat = await conn.request(68, "ConsumerGroupHeartbeat", 0, {"GroupId": f"{group}-848", "MemberId": uuid.uuid4().hex, "MemberEpoch": 0,
                                                                         "RebalanceTimeoutMs": 30_000, "SubscribedTopicNames": [hidden], "TopicPartitions": []})
        return {"commit": {(t["Name"], p["PartitionIndex"]): p["ErrorCode"] for t in committed["Topics"] for p in t["Partitions"]},
                "every": offsets(every), "named": offsets(named), "heartbeat": heartbeat["ErrorCode"]}
    finally:
        conn.close()


async def group_refusals(address: str, token: str, group: str) -> list[int]:
    """FindCoordinator, JoinGroup, OffsetCommit and OffsetFetch of ``group`` with ``token``: their error codes."""
    conn = await sasl_connection(address, token)
    try:
        found = await conn.request(10, "FindCoordinator", 4, {"KeyType": 0, "CoordinatorKeys": [group]})
        joined = await conn.request(11, "JoinGroup", 7, {"GroupId": group, "SessionTimeoutMs": 30_000, "RebalanceTimeoutMs": 30_000, "MemberId": "",
                                                         "GroupInstanceId": None, "ProtocolType": "consumer", "Protocols": [{"Name": "range", "Metadata": b""}]})
        committed = await conn.request(8, "OffsetCommit", 8, {"GroupId": group, "GenerationIdOrMemberEpoch": -1, "MemberId": "", "GroupInstanceId": None,
                                                              "Topics": [{"Name": TOPIC, "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 9,
                                                                                                          "CommittedLeaderEpoch": -1, "CommittedMetadata": ""}]}]})
        fetched = await conn.request(9, "OffsetFetch", 8, {"Groups": [{"GroupId": group, "Topics": None}], "RequireStable": False})
        return [found["Coordinators"][0]["ErrorCode"], joined["ErrorCode"], committed["Topics"][0]["Partitions"][0]["ErrorCode"],
                fetched["Groups"][0]["ErrorCode"]]
    finally:
        conn.close()


def test_group_requests_keep_to_the_token_scope(tiered: ListenerStack, s3_server: Any) -> None:
    """A read token commits no offset of a topic outside its scope, sees none, and subscribes to none by name;
    a token uses only the groups its grant names (none by default)."""
    hidden = f"hidden-{uuid.uuid4().hex[:6]}"
    create_tiered_topic(tiered.stack, hidden, 1)
    group = f"scoped-{uuid.uuid4().hex[:6]}"
    direct = Consumer({"bootstrap.servers": tiered.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        direct.commit(offsets=[TopicPartition(hidden, 0, 3)], asynchronous=False)  # Kafka's own: the listener must neither move nor show it
        auth = {"enabled": True, "tokens": {TOKEN: {"topics": [TOPIC], "groups": ["scoped-.*"]}, OTHER_TOKEN: [TOPIC]}}
        with another_listener(tiered, s3_server, {"auth": auth}) as address:
            got = asyncio.run(group_requests(address, TOKEN, group, hidden))
            # a token whose grant names no group uses none: GROUP_AUTHORIZATION_FAILED before Kafka is asked
            assert asyncio.run(group_refusals(address, OTHER_TOKEN, group)) == [KafkaError.GROUP_AUTHORIZATION_FAILED] * 4
            consumer = sasl_consumer(address, OTHER_TOKEN, **{"group.id": group})
            try:
                consumer.subscribe([TOPIC])
                errors = [m.error() for m in consumer.consume(5, 15) if m.error() is not None]
                assert any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors), errors
            finally:
                consumer.close()
        assert got["commit"] == {(TOPIC, 0): 0, (hidden, 0): KafkaError.TOPIC_AUTHORIZATION_FAILED}
        assert got["every"] == {(TOPIC, 0): (5, 0)}
        assert got["named"] == {(TOPIC, 0): (5, 0), (hidden, 0): (-1, KafkaError.TOPIC_AUTHORIZATION_FAILED)}
        assert got["heartbeat"] == KafkaError.TOPIC_AUTHORIZATION_FAILED
        committed = direct.committed([TopicPartition(TOPIC, 0), TopicPartition(hidden, 0)], timeout=10)
        assert {tp.topic: tp.offset for tp in committed} == {TOPIC: 5, hidden: 3}
    finally:
        direct.close()


def frame(api_key: int, version: int, body: bytes = b"", correlation_id: int = 7) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return True


def answer(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)


def test_bad_input_closes_only_that_connection(tiered: ListenerStack, s3_server: Any) -> None:
    with another_listener(tiered, s3_server, max_request_bytes=4096, max_connections=8, request_timeout_s=1.0) as address:
        host, port = address.split(":")
        good = socket.create_connection((host, int(port)), timeout=10)
        bad_inputs = [
            struct.pack(">i", 1 << 20),  # above max_request_bytes
            struct.pack(">i", -5),
            frame(999, 0),  # unknown API key
            frame(1, 4, b"\x00\x01"),  # Fetch v4, its body cut short
            frame(3, 99),  # Metadata at a version nobody has
            struct.pack(">i", 100) + b"\x00\x12",  # a frame started and abandoned: closed after request_timeout_s
        ]
        for data in bad_inputs:
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(data)
                assert closed(sock), data
        with socket.create_connection((host, int(port)), timeout=10) as sock:  # KIP-511: v0 with UNSUPPORTED_VERSION
            sock.sendall(frame(18, 99))
            body = answer(sock)
            correlation_id, error = struct.unpack_from(">ih", body)
            assert (correlation_id, error) == (7, 35)
        good.sendall(frame(18, 0))  # the connection opened before is untouched
        assert struct.unpack_from(">ih", answer(good)) == (7, 0)
        held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(7)]  # 8 with `good`
        try:
            time.sleep(0.2)
            with socket.create_connection((host, int(port)), timeout=10) as extra:
                assert closed(extra)  # max_connections
        finally:
            for sock in held:
                sock.close()
            good.close()


def fetch_frame(correlation_id: int, offset: int = 0, max_wait_ms: int = 0) -> bytes:
    body = encode("FetchRequest", 12, {"ReplicaId": -1, "MaxWaitMs": max_wait_ms, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionEpoch": -1, "ForgottenTopicsData": [],
                                       "Topics": [{"Topic": TOPIC, "Partitions": [{"Partition": 0, "FetchOffset": offset, "PartitionMaxBytes": 1 << 20}]}]})
    return request_frame(1, 12, correlation_id, "slow", body)


def test_slow_idle_and_vanishing_clients(tiered: ListenerStack, s3_server: Any) -> None:
    """A client that never reads its answers is closed after request_timeout_s, having been sent no more than
    the sockets buffer; a silent one after idle_timeout_s; one that leaves with a Fetch waiting at the live end
    disturbs no one (``good``, opened first, is answered throughout)."""
    def ping(sock: socket.socket) -> None:
        sock.sendall(frame(18, 0))
        assert struct.unpack_from(">ih", answer(sock)) == (7, 0)

    with another_listener(tiered, s3_server, request_timeout_s=1.0, idle_timeout_s=4.0) as address:
        host, port = address.split(":")
        good = socket.create_connection((host, int(port)), timeout=10)
        good.sendall(fetch_frame(1))
        one = len(answer(good))  # the size of one answer at offset 0
        requests = 300
        assert requests * one > 3 * (4 << 20), one  # far beyond what the two sockets can buffer (tcp_wmem's 4 MiB)
        with socket.socket() as never_reads:
            never_reads.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            never_reads.connect((host, int(port)))
            never_reads.sendall(b"".join(fetch_frame(i) for i in range(requests)))
            time.sleep(3)  # not reading: the listener's drain times out (1 s) and it closes the connection
            never_reads.settimeout(10)
            received = 0
            while chunk := never_reads.recv(1 << 16):
                received += len(chunk)
            assert 0 < received < requests * one // 2, (received, one)  # closed early: the rest never sent
        ping(good)
        with socket.create_connection((host, int(port)), timeout=10) as silent:
            started = time.monotonic()
            time.sleep(2)
            ping(good)
            assert closed(silent)
            assert 3.5 <= time.monotonic() - started < 10  # idle_timeout_s
        ping(good)
        with socket.create_connection((host, int(port)), timeout=10) as leaving:
            leaving.sendall(fetch_frame(1, offset=len(PRODUCED[0]), max_wait_ms=5_000))  # waits at the live end (Kafka's)
        ping(good)
        good.close()


def test_metrics_count_requests_bytes_errors_connections(tiered: ListenerStack) -> None:
    consumer = Consumer({"bootstrap.servers": tiered.listener, "group.id": "metrics", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        assert [m for m in consumer.consume(100, 10) if m.error() is None]
        with socket.create_connection(tuple(tiered.listener.split(":")), timeout=10) as sock:  # type: ignore[arg-type]
            sock.sendall(frame(999, 0))
            assert closed(sock)
        text = urllib.request.urlopen(f"{tiered.gateway_url}/metrics", timeout=10).read().decode()
    finally:
        consumer.close()
    cluster = tiered.stack.cluster
    for line in (f'tiered_kafka_gateway_kafka_listener_requests_total{{api="Fetch",cluster="{cluster}"}}',
                 f'tiered_kafka_gateway_kafka_listener_bytes_total{{cluster="{cluster}",direction="out",source="remote"}}',
                 f'tiered_kafka_gateway_kafka_listener_errors_total{{api="frame",cluster="{cluster}",error="unsupported"}}',
                 f'tiered_kafka_gateway_kafka_listener_connections{{cluster="{cluster}"}}'):
        found = [row for row in text.splitlines() if row.startswith(line)]
        assert found, line
    assert float(next(r for r in text.splitlines() if r.startswith(f'tiered_kafka_gateway_kafka_listener_connections{{cluster="{cluster}"}}')).split()[-1]) >= 1


def test_sasl_over_tls(tiered: ListenerStack, s3_server: Any, tmp_path: Any) -> None:
    """SASL_SSL: the listener's TLS (tls_certfile, tls_keyfile) under the same token check."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    auth = {"enabled": True, "tokens": {TOKEN: [TOPIC]}}
    with another_listener(tiered, s3_server, {"auth": auth}, tls_certfile=str(cert), tls_keyfile=str(key)) as address:
        consumer = sasl_consumer(address, TOKEN, **{"security.protocol": "SASL_SSL", "ssl.ca.location": str(cert)})
        try:
            consumer.assign([TopicPartition(TOPIC, 1, 0)])
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < 100 and time.monotonic() < deadline:
                got += [m for m in consumer.consume(100, 1) if m.error() is None]
            assert [m.offset() for m in got[:100]] == list(range(100))
        finally:
            consumer.close()
