"""Issue 29's bounds over a real stack (the session's Kafka broker, Redis, SeaweedFS, the agent's uploads):
a compressed batch that inflates a thousandfold read through /records within ``max_decoded_bytes``,
continuing exactly; a plan's presigns bounded; an object key in Redis outside its partition never
presigned; /readyz answered from its one-second cache."""

from __future__ import annotations

import base64
import tracemalloc

import pytest
from confluent_kafka import Producer
from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tests.support.agent_env import agent_settings, only_topics, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.gateway_env import gateway_client, gateway_settings, uploaded_partition
from tests.support.kafka_clients import create_topic
from tiered_kafka_agent.agent import Agent
from tiered_kafka_gateway.app import create_app

pytestmark = pytest.mark.integration

MIB = 2**20
BOMBS = 24  # batches of one record: MIB zeros each, ~100 bytes compressed
BOUND = 4 * MIB


def test_a_thousandfold_batch_is_decoded_within_the_bound_and_read_on_exactly(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    topic = unique_topic("bombs")
    create_topic(kafka_server.bootstrap_servers, topic, 1, **{"segment.bytes": "100000"})
    producer = Producer({"bootstrap.servers": kafka_server.bootstrap_servers, "compression.type": "zstd", "message.max.bytes": 4 * MIB,
                         "batch.size": 15000, "linger.ms": 0})
    for i in range(BOMBS):  # one batch each (flushed): MIB of zeros, a thousandfold and more compressed
        producer.produce(topic, key=f"bomb-{i}".encode(), value=bytes(MIB), partition=0)
        producer.flush(30)
    filler = Producer({"bootstrap.servers": kafka_server.bootstrap_servers, "batch.size": 15000, "linger.ms": 0})
    for i in range(150):  # uncompressed records to roll the segment holding the bombs
        filler.produce(topic, value=bytes([i % 251]) * 1000, partition=0)
    filler.flush(30)
    del producer, filler
    settings = agent_settings(kafka_server.log_dir, redis_server, s3_server, s3_bucket, topics=only_topics(topic))
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated_bases(kafka_server.log_dir / f"{topic}-0"), what="uploaded")
    first_segment = registry.segments(topic, 0)[0]
    assert first_segment.last_offset >= BOMBS and first_segment.size < BOMBS * MIB // 1000 + 150 * 1100  # a thousandfold
    app = create_app(gateway_settings(settings, s3_server).model_copy(update={"max_decoded_bytes": BOUND}))
    url = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0/records"
    offsets: list[int] = []
    peaks: list[int] = []
    with TestClient(app, base_url=LOCAL_URL) as client:
        offset = 0
        while offset < BOMBS:
            tracemalloc.start()
            try:
                response = client.get(url, params={"offset": offset, "max_records": 500, "max_bytes": MIB})
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            assert response.status_code == 200, response.text
            body = response.json()
            records = body["records"]
            assert records and records[0]["offset"] == offset and body["next_offset"] == records[-1]["offset"] + 1, {k: v for k, v in body.items() if k != "records"}
            decoded = sum(len(base64.b64decode(r["value"])) for r in records)
            assert decoded <= BOUND, decoded
            offsets += [r["offset"] for r in records]
            offset = body["next_offset"]
    assert offsets[:BOMBS] == list(range(BOMBS)) and len(peaks) >= BOMBS * MIB // BOUND
    # the whole request (records, their base64, the JSON body) stays a small multiple of the bound;
    # unbounded, the first request alone decoded all 24 MiB (and ~100 MiB with its JSON)
    assert max(peaks) < 6 * BOUND, [p // MIB for p in peaks]


def test_a_plan_presigns_a_bounded_number_of_ranges_and_continues_exactly(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    topic = unique_topic("ranges")
    broker, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, 1200)
    app = create_app(gateway_settings(settings, s3_server).model_copy(update={"max_ranges_per_plan": 3}))
    url = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0/plan"
    segment = registry_for(settings).segments(topic, 0)[0]
    with TestClient(app, base_url=LOCAL_URL) as client:
        reader = app.state.readers[settings.cluster]
        client.get(url, params={"offset": 0, "range_bytes": 4096})  # the first plan comes from the sparse index (coarse); exact ones follow
        assert reader.wait_for_background_loads()
        offset, covered = 0, []
        while offset <= segment.last_offset:
            before = reader.presigns
            body = client.get(url, params={"offset": offset, "max_bytes": 64 * MIB, "range_bytes": 4096}).json()
            assert 1 <= len(body["ranges"]) <= 3 and reader.presigns - before == len(body["ranges"]), body
            assert body["ranges"][0]["first_offset"] <= offset and body["next_offset"] == body["ranges"][-1]["last_offset"] + 1
            covered += [(r["start"], r["end"]) for r in body["ranges"] if r["first_offset"] <= segment.last_offset]
            offset = body["next_offset"]
    assert len(covered) > 3 and covered[0][0] == 0 and covered[-1][1] == segment.size
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))  # contiguous: nothing skipped, nothing twice


def test_an_object_key_outside_its_partition_is_refused_without_echoing_it(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    topic = unique_topic("hostile")
    broker, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, 600)
    registry = registry_for(settings)
    segment = registry.segments(topic, 0)[0]
    hostile = "other-cluster/secrets-0/00000000000000000000.log"
    registry.client.hset(registry.keys(topic, 0).segment(segment.first), "object_key", hostile)
    client = gateway_client(settings, s3_server)
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
    for path, params in (("/plan", {"offset": segment.first}), ("/records", {"offset": segment.first}), ("/offsets", {"timestamp": 0})):
        response = client.get(base + path, params=params)
        assert response.status_code == 500 and response.json()["error"]["code"] == "corrupt_registry_data", (path, response.text)
        message = response.json()["error"]["message"]
        assert f"{topic}-0" in message and f"segment {segment.first}" in message and "secrets" not in message and "other-cluster" not in message
    assert app_presigns(client, settings.cluster) == 0


def app_presigns(client: TestClient, cluster: str) -> int:
    return client.app.state.readers[cluster].presigns  # type: ignore[attr-defined,no-any-return]


def test_readyz_checks_each_dependency_at_most_once_a_second(tmp_path, redis_server, s3_server, s3_bucket) -> None:
    settings = agent_settings(tmp_path, redis_server, s3_server, s3_bucket)
    app = create_app(gateway_settings(settings, s3_server))
    with TestClient(app, base_url=LOCAL_URL) as client:
        reader = app.state.readers[settings.cluster]
        calls = []
        real = reader.check
        reader.check = lambda: calls.append(1) or real()
        answers = [client.get("/readyz") for _ in range(30)]
        assert all(a.status_code == 200 and a.json()["status"] == "ok" for a in answers)
        assert len(calls) == 1  # 30 probes, one Redis PING and one S3 HEAD
        wait_for(lambda: client.get("/readyz").status_code == 200 and len(calls) == 2, timeout_s=10, what="the cached answer to expire")
