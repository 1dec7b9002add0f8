"""Issue 36's findings over a real stack (the session's Kafka broker, Redis, SeaweedFS, the agent's
uploads): every registry entry's object key checked on every path, with or without the partition's
``info`` hash; ``/offsets`` decoding within ``max_decoded_bytes``; the Kafka-proxied ``/records``
counting headers in its byte bound; topic names Kafka forbids refused at once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from confluent_kafka import Producer
from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tests.support.agent_env import agent_settings, only_topics, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.gateway_env import gateway_settings, uploaded_partition
from tests.support.kafka_clients import create_topic
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.agent import Agent
from tiered_kafka_dev.services._process import free_ports
from tiered_kafka_gateway.app import create_app

pytestmark = pytest.mark.integration

MIB = 2**20


def test_every_path_checks_every_object_key_also_without_the_info_hash(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    """The review's attack: an entry pointing at another topic's key, and the partition's info hash
    deleted; /offsets?timestamp=0 then made the gateway GET the other topic's .timeindex."""
    topic, victim = unique_topic("keys"), unique_topic("victim")
    broker, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, 600)
    registry = registry_for(settings)
    segment = registry.segments(topic, 0)[0]
    keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
    hostile = keyspace.segment_key(victim, 0, 0, FileKind.LOG)
    keys = registry.keys(topic, 0)
    registry.client.hset(keys.segment(segment.first), mapping={"object_key": hostile, "files": "log,index,timeindex,txnindex"})
    assert registry.client.delete(keys.info) == 1
    app = create_app(gateway_settings(settings, s3_server))
    touched: list[str] = []
    with TestClient(app, base_url=LOCAL_URL) as client:
        objects = app.state.readers[settings.cluster].objects
        real_get, real_presign = objects.get, objects.presign
        objects.get = lambda key, byte_range=None: touched.append(key) or real_get(key, byte_range)
        objects.presign = lambda key, *args: touched.append(key) or real_presign(key, *args)
        base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
        asked = [
            (base + "/offsets", {"timestamp": 0}),
            (base + "/offsets", {"timestamp": 0, "isolation_level": "read_committed"}),
            (base + "/plan", {"offset": segment.first}),
            (base + "/records", {"offset": segment.first, "mode": "REMOTE_ONLY"}),
            (base + "/records", {"offset": segment.first, "mode": "REMOTE_ONLY", "isolation_level": "read_committed"}),
            (base + "/time-ranges", {"from_timestamp": 0, "to_timestamp": 2**62}),
            (f"/ui/clusters/{settings.cluster}/topics/{topic}/partitions/0", {}),
        ]
        for path, params in asked:
            response = client.get(path, params=params)
            assert response.status_code == 500, (path, params, response.status_code, response.text[:300])
            error = response.json()["error"]
            assert error["code"] == "corrupt_registry_data" and f"{topic}-0" in error["message"], (path, error)
            assert victim not in response.text, (path, response.text[:300])
    partition_prefix = keyspace.partition_prefix(topic, 0)
    assert all(key.startswith(partition_prefix) for key in touched), [k for k in touched if not k.startswith(partition_prefix)]


def _uploaded_topic(kafka_server, redis_server, s3_server, bucket, topic, write) -> object:
    """``write(producer)`` into a new one-partition topic of 100 kB segments, rolled by filler records, uploaded by the agent."""
    create_topic(kafka_server.bootstrap_servers, topic, 1, **{"segment.bytes": "100000"})
    write()
    filler = Producer({"bootstrap.servers": kafka_server.bootstrap_servers, "batch.size": 15000, "linger.ms": 0})
    for i in range(150):  # uncompressed records to roll the first segment
        filler.produce(topic, value=bytes([i % 251]) * 1000, partition=0)
    filler.flush(30)
    settings = agent_settings(kafka_server.log_dir, redis_server, s3_server, bucket, topics=only_topics(topic))
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated_bases(kafka_server.log_dir / f"{topic}-0"), what="uploaded")
    return settings


def test_offsets_for_a_timestamp_decode_within_max_decoded_bytes(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """The review's case: a small gzip batch refused by /records inflated whole in /offsets."""
    topic = unique_topic("gzip-bomb")

    def write() -> None:
        producer = Producer({"bootstrap.servers": kafka_server.bootstrap_servers, "compression.type": "gzip", "message.max.bytes": 8 * MIB, "linger.ms": 0})
        producer.produce(topic, key=b"bomb", value=bytes(3 * MIB), partition=0)  # ~3 kB of gzip
        producer.flush(30)

    settings = _uploaded_topic(kafka_server, redis_server, s3_server, s3_bucket, topic, write)
    first = registry_for(settings).segments(topic, 0)[0]
    assert first.size < 200_000  # the bomb is small on disk
    with TestClient(create_app(gateway_settings(settings, s3_server, max_decoded_bytes=MIB)), base_url=LOCAL_URL) as client:
        base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
        for level in ("read_uncommitted", "read_committed"):
            response = client.get(base + "/offsets", params={"timestamp": 0, "isolation_level": level})
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error["code"] == "batch_too_large" and "max_decoded_bytes" in error["message"] and error["offset"] == 0, error
        records = client.get(base + "/records", params={"offset": 0, "mode": "REMOTE_ONLY"})
        assert records.status_code == 422 and records.json()["error"]["code"] == "batch_too_large"  # one rule for both
        later = client.get(base + "/offsets", params={"timestamp": 0}).json()  # unchanged on a second ask (no cache hides it)
        assert later["error"]["code"] == "batch_too_large"


def test_kafka_proxied_records_count_headers_in_max_bytes(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    topic = unique_topic("headers")
    create_topic(kafka_server.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": kafka_server.bootstrap_servers, "linger.ms": 0})
    for i in range(10):  # tiny values, 100 kB of headers each
        producer.produce(topic, value=b"v%d" % i, headers=[("big", bytes(100_000))], partition=0)
    producer.flush(30)
    settings = agent_settings(tmp_path, redis_server, s3_server, s3_bucket)
    with TestClient(create_app(gateway_settings(settings, s3_server, kafka_server.bootstrap_servers)), base_url=LOCAL_URL) as client:
        url = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0/records"
        body = client.get(url, params={"offset": 0, "max_bytes": 250_000, "max_records": 100, "mode": "KAFKA_ONLY"}).json()
    assert body["source"] == "kafka", body.get("error")
    offsets = [r["offset"] for r in body["records"]]
    # the bound is reached by the third record's headers (3 x 100 kB >= 250 kB): the answer stops there
    assert offsets == [0, 1, 2] and body["next_offset"] == 3, (offsets, body["next_offset"])


@pytest.mark.parametrize("name", ["%2E", "%2E%2E", "a" * 250, "bad%20name", "caf%C3%A9"])
def test_topic_names_kafka_forbids_are_refused_at_once(name, kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    """The review's case: ``..`` hung 10 s on the Kafka proxy and answered 503; ``.`` got no answer."""
    settings = agent_settings(tmp_path, redis_server, s3_server, s3_bucket)
    with TestClient(create_app(gateway_settings(settings, s3_server, kafka_server.bootstrap_servers)), base_url=LOCAL_URL) as client:
        base = f"/v1/clusters/{settings.cluster}/topics/{name}"
        for path in ("/partitions/0", "/partitions/0/records", "/partitions/0/plan?offset=0", "/partitions/0/offsets?timestamp=0"):
            started = time.monotonic()
            response = client.get(base + path)
            assert time.monotonic() - started < 2, path
            assert response.status_code == 422, (path, response.status_code, response.text[:200])
            error = response.json()["error"]
            assert error["code"] == "invalid_request" and "topic" in response.text, (path, error)
        page = client.get(f"/ui/clusters/{settings.cluster}/topics/{name}")
        assert page.status_code == 422, page.text[:200]


def _address_beyond_loopback() -> str:
    """An address of this host's that is not loopback (the route to a documentation address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.254", 9))  # no packet is sent: only the route is looked up
        address = probe.getsockname()[0]
    assert not address.startswith("127."), f"this host has no address beyond loopback ({address}): the test needs one"
    return address


def test_uvicorn_on_every_address_without_authentication_answers_loopback_only(tmp_path) -> None:
    """The review's case: ``uvicorn tiered_kafka_gateway.asgi:app --host 0.0.0.0`` skipped the
    exposure check that only ``tiered-kafka-gateway`` ran; the app now checks each request."""
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"clusters": {"c1": {"redis_url": "redis://127.0.0.1:1/0", "s3": {"bucket": "b", "endpoint_url": "http://127.0.0.1:1"}}}}))
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_GATEWAY_")} | {"TIERED_KAFKA_GATEWAY_CONFIG": str(config)}
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "tiered_kafka_gateway.asgi:app", "--host", "0.0.0.0", "--port", str(port)],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: _status(f"http://127.0.0.1:{port}/healthz") == 200, timeout_s=30, what="uvicorn up")
        assert httpx.get(f"http://127.0.0.1:{port}/v1/clusters").json() == {"clusters": ["c1"]}  # loopback: served
        outside = httpx.get(f"http://{_address_beyond_loopback()}:{port}/v1/clusters")
        assert outside.status_code == 403 and outside.json()["error"]["code"] == "anonymous_beyond_loopback", outside.text
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert b"beyond loopback" in stderr  # said once in the log, at ERROR


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None
