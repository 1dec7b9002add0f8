"""Authorization, gaps, Pinterest-layout buckets, and unavailable dependencies."""

from __future__ import annotations

import socket

import pytest

from tests.support.agent_env import agent_settings, registry_for, rotated_bases, wait_for
from tests.support.fixtures import FIXTURES, MANIFEST
from tests.support.gateway_env import gateway_client, uploaded_partition
from tests.support.kafka_clients import create_topic, produce, value_for
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration

READER = "r" * 24
OUTSIDER = "o" * 24


@pytest.fixture
def served(start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket):
    broker, settings = uploaded_partition(start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket, "guarded", count=600)
    return settings


def test_tokens_see_only_their_topics(served, s3_server) -> None:
    client = gateway_client(served, s3_server, auth={"enabled": True, "tokens": {READER: ["guard.*"], OUTSIDER: ["other-.*"]}})
    plan = f"/v1/clusters/{served.cluster}/topics/guarded/partitions/0/plan?offset=0"
    assert client.get(plan).status_code == 401
    assert client.get(plan, headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
    assert client.get(plan, headers={"Authorization": f"Bearer {READER}"}).status_code == 200
    assert client.get(plan, headers={"X-API-Key": READER}).status_code == 200
    denied = client.get(plan, headers={"Authorization": f"Bearer {OUTSIDER}"})
    assert denied.status_code == 404 and denied.json()["error"]["code"] == "unknown_topic_or_partition"  # as if absent
    listing = client.get(f"/v1/clusters/{served.cluster}/topics", headers={"X-API-Key": OUTSIDER}).json()
    assert listing["topics"] == []
    assert [t["name"] for t in client.get(f"/v1/clusters/{served.cluster}/topics", headers={"X-API-Key": READER}).json()["topics"]] == ["guarded"]


def test_a_plan_for_an_offset_in_a_gap_starts_after_it(start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    broker = start_dev_broker(tmp_path / "logs")
    create_topic(broker.broker.bootstrap_servers, "holey", 1, **{"segment.bytes": "40000"})
    produce(broker.broker.bootstrap_servers, "holey", [(0, None, value_for(i)) for i in range(600)], **{"linger.ms": 1, "batch.num.messages": 5})
    directory = tmp_path / "logs" / "holey-0"
    rotated = rotated_bases(directory)
    for path in directory.glob(f"{rotated[2]:020d}.*"):
        path.unlink()
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: len(registry.segments("holey", 0)) == len(rotated) - 1, what="the rest uploaded")
    client = gateway_client(settings, s3_server)
    plan = client.get(f"/v1/clusters/{settings.cluster}/topics/holey/partitions/0/plan", params={"offset": rotated[2] + 1}).json()
    assert plan["gap"]["start_offset"] == rotated[2] and plan["gap"]["end_offset"] == rotated[3] - 1
    assert plan["segment"]["base_offset"] == rotated[3] and plan["ranges"][0]["first_offset"] == rotated[3]


def test_a_bucket_in_pinterests_layout_is_served_without_a_registry(redis_server, s3_server, s3_bucket) -> None:
    """Segments uploaded by Pinterest's uploader: only the keyspace and the Kafka files, no registry."""
    cluster = "pinterestCluster"
    keyspace = Keyspace("custom-prefix", cluster, 5)
    client_s3 = s3_server.client()
    logs = sorted(MANIFEST["test_topic_a-0"])[:4]
    for name in logs:
        base = int(name[:20])
        for kind in (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX):
            body = (FIXTURES / "test_topic_a-0" / f"{name[:20]}.{kind.value}").read_bytes()
            client_s3.put_object(Bucket=s3_bucket, Key=keyspace.segment_key("test_topic_a", 0, base, kind), Body=body)
    settings = agent_settings(FIXTURES, redis_server, s3_server, s3_bucket, cluster=cluster, s3={"prefix": "custom-prefix", "entropy_bits": 5})
    client = gateway_client(settings, s3_server)
    base_url = f"/v1/clusters/{cluster}/topics/test_topic_a/partitions/0"
    detail = client.get(base_url).json()
    last = MANIFEST["test_topic_a-0"][logs[-1]]["last_offset"]
    assert detail["remote"]["earliest_offset"] == 0 and detail["remote"]["latest_offset"] == last
    for offset in (0, 361, 362, 700, last):
        plan = client.get(f"{base_url}/plan", params={"offset": offset, "max_bytes": 20_000}).json()
        r = plan["ranges"][0]
        data = client_s3.get_object(Bucket=s3_bucket, Key=plan["segment"]["object_key"], Range=r["range_header"])["Body"].read()
        batches = list(iter_batches(data))
        assert batches[0].base_offset == r["first_offset"] <= offset <= r["last_offset"] == batches[-1].last_offset


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_redis_or_s3_down_is_a_503_never_a_500_or_a_hang(served, s3_server) -> None:
    plan = f"/v1/clusters/{served.cluster}/topics/guarded/partitions/0/plan?offset=0"
    no_redis = gateway_client(served.model_copy(update={"redis": served.redis.model_copy(update={"url": f"redis://127.0.0.1:{_closed_port()}/0"})}), s3_server, timeouts={"redis_s": 0.5, "s3_s": 0.5})
    response = no_redis.get(plan)
    assert response.status_code == 503 and response.json()["error"]["code"] == "registry_unavailable"
    assert no_redis.get("/readyz").status_code == 503

    class DeadS3:
        endpoint_url = f"http://127.0.0.1:{_closed_port()}"
        access_key, secret_key, region = s3_server.access_key, s3_server.secret_key, s3_server.region

    no_s3 = gateway_client(served, DeadS3(), timeouts={"redis_s": 0.5, "s3_s": 0.5})
    response = no_s3.get(plan)
    assert response.status_code == 503 and response.json()["error"]["code"] == "storage_unavailable"
    assert no_s3.get("/readyz").status_code == 503
    assert no_s3.get("/healthz").status_code == 200
