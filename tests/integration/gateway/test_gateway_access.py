"""Authorization, gaps, Pinterest-layout buckets, and unavailable dependencies."""

from __future__ import annotations

import shutil
import socket

import httpx
import pytest
import redis

from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, registry_for, rotated_bases, wait_for
from tests.support.fixtures import FIXTURES
from tests.support.gateway_env import gateway_client, pinterest_bucket, unique_topic, uploaded_partition
from tests.support.kafka_clients import create_topic, produce, value_for
from tests.support.stack_env import gateway_server
from tiered_kafka.errors import GatewayRequestError
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration

READER = "r" * 24
SCRAPER = "s" * 24  # a Prometheus scrape token: metrics, no topic
OUTSIDER = "o" * 24


@pytest.fixture
def served(kafka_server, tmp_path, redis_server, s3_server, s3_bucket):
    """A topic of its own on the shared broker (``guarded-…``), uploaded; (topic, agent settings)."""
    topic = unique_topic("guarded")
    _, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, count=600)
    return topic, settings


TOPIC_PATHS = ["", "/plan?offset=0", "/records?offset=0", "/offsets?timestamp=0"]  # partition, locate, records, offsets-for-timestamp
UNAUTHENTICATED = {"error": {"code": "unauthorized", "message": "a valid bearer token or X-API-Key is required"}}


def test_a_topic_the_token_does_not_cover_is_403_topic_authorization_failed_on_every_topic_path(served, s3_server) -> None:
    topic, settings = served
    client = gateway_client(settings, s3_server, auth={"enabled": True, "tokens": {READER: ["guard.*"], OUTSIDER: ["other-.*"]}})
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
    for suffix in TOPIC_PATHS:
        for headers in ({"Authorization": f"Bearer {READER}"}, {"X-API-Key": READER}):
            allowed = client.get(base + suffix, headers=headers)
            assert allowed.status_code == 200, (suffix, allowed.text)
        denied = client.get(base + suffix, headers={"Authorization": f"Bearer {OUTSIDER}"})
        assert denied.status_code == 403, (suffix, denied.text)
        error = denied.json()["error"]
        assert (error["code"], error["topic"], error["kafka_error_code"]) == ("topic_authorization_failed", topic, 29), suffix
        assert topic in error["message"]
    # whether or not the topic exists, as Kafka answers TOPIC_AUTHORIZATION_FAILED
    nowhere = client.get(f"/v1/clusters/{settings.cluster}/topics/nowhere/partitions/0", headers={"X-API-Key": OUTSIDER})
    assert (nowhere.status_code, nowhere.json()["error"]["code"]) == (403, "topic_authorization_failed")
    # a covered topic that holds nothing is the only 404
    absent = client.get(f"/v1/clusters/{settings.cluster}/topics/guardian/partitions/0", headers={"X-API-Key": READER})
    assert (absent.status_code, absent.json()["error"]["code"]) == (404, "unknown_topic_or_partition")
    # listings are filtered to what the caller may read (not an answer about one topic)
    listing = client.get(f"/v1/clusters/{settings.cluster}/topics", headers={"X-API-Key": OUTSIDER}).json()
    assert listing["topics"] == [] and listing["complete"] is True
    assert [t["name"] for t in client.get(f"/v1/clusters/{settings.cluster}/topics", headers={"X-API-Key": READER}).json()["topics"]] == [topic]


def test_without_a_valid_token_every_path_answers_the_same_401(served, s3_server) -> None:
    """Unauthenticated probing cannot tell an existing cluster, topic or route from others."""
    topic, settings = served
    client = gateway_client(settings, s3_server, auth={"enabled": True, "tokens": {READER: ["guard.*"], SCRAPER: {"topics": [], "metrics": True}}})
    cluster = settings.cluster
    paths = [
        "/v1/clusters",
        f"/v1/clusters/{cluster}/topics",
        "/v1/clusters/no-such-cluster/topics",
        f"/v1/clusters/{cluster}/topics/{topic}/partitions/0",
        f"/v1/clusters/no-such-cluster/topics/{topic}/partitions/0",
        f"/v1/clusters/{cluster}/topics/{topic}/partitions/0/plan?offset=0",
        f"/v1/clusters/no-such-cluster/topics/{topic}/partitions/0/plan?offset=0",
        f"/v1/clusters/{cluster}/topics/bad$name/partitions/x/plan?offset=-1",  # would be a 422
        "/v1/no-such-route",
        "/no-such-route",
        "/metrics",
    ]
    answers = {}
    for path in paths:
        for headers in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"X-API-Key": "wrong"}, {"Authorization": f"Basic {READER}"}):
            response = client.get(path, headers=headers)
            answers[(path, str(headers))] = (response.status_code, response.json(), response.headers.get("www-authenticate"))
    answers[("POST plan", "")] = (lambda r: (r.status_code, r.json(), r.headers.get("www-authenticate")))(client.post(paths[5]))  # would be a 405
    assert set(map(str, answers.values())) == {str((401, UNAUTHENTICATED, "Bearer"))}, answers
    # the probes answer without a token, and /readyz names no cluster to an unauthenticated caller
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ok", "clusters": {}}
    assert list(client.get("/readyz", headers={"X-API-Key": READER}).json()["clusters"]) == [cluster]
    assert client.get("/metrics", headers={"X-API-Key": READER}).status_code == 403  # /metrics: a token that names it (issue 36)
    assert client.get("/metrics", headers={"X-API-Key": SCRAPER}).status_code == 200


def test_a_plan_for_an_offset_in_a_gap_starts_after_it(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    """A segment's files gone from the log.dir before the agent uploaded them. Kafka itself only deletes
    a log's oldest segments, so the agent runs on a copy of the partition directory Kafka wrote, with
    the third segment removed (the shared broker's own files stay untouched)."""
    topic = unique_topic("holey")
    create_topic(kafka_server.bootstrap_servers, topic, 1, **{"segment.bytes": "40000"})
    produce(kafka_server.bootstrap_servers, topic, [(0, None, value_for(i)) for i in range(600)], **{"linger.ms": 1, "batch.num.messages": 5})
    directory = tmp_path / "logs" / f"{topic}-0"
    shutil.copytree(kafka_server.log_dir / f"{topic}-0", directory)
    rotated = rotated_bases(directory)
    for path in directory.glob(f"{rotated[2]:020d}.*"):
        path.unlink()
    checkpoint_high_watermarks(tmp_path / "logs")  # the copy's records are all acknowledged
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: len(registry.segments(topic, 0)) == len(rotated) - 1, what="the rest uploaded")
    client = gateway_client(settings, s3_server)
    plan = client.get(f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0/plan", params={"offset": rotated[2] + 1}).json()
    assert plan["gap"]["start_offset"] == rotated[2] and plan["gap"]["end_offset"] == rotated[3] - 1
    assert plan["segment"]["base_offset"] == rotated[3] and plan["ranges"][0]["first_offset"] == rotated[3]
    # the partition endpoint reports the recorded gap, with its reason
    detail = client.get(f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0").json()
    assert [(g["start_offset"], g["end_offset"]) for g in detail["gaps"]] == [(rotated[2], rotated[3] - 1)]
    assert detail["gaps"][0]["reason"].startswith("deleted before upload")


def test_a_bucket_in_pinterests_layout_is_served_without_a_registry(redis_server, s3_server, s3_bucket) -> None:
    """Segments uploaded by Pinterest's uploader: only the keyspace and the Kafka files, no registry."""
    cluster = "pinterestCluster"
    last = pinterest_bucket(s3_server, s3_bucket, Keyspace("custom-prefix", cluster, 5), "test_topic_a")
    settings = agent_settings(FIXTURES, redis_server, s3_server, s3_bucket, cluster=cluster, s3={"prefix": "custom-prefix", "entropy_bits": 5})
    client = gateway_client(settings, s3_server)
    client_s3 = s3_server.client()
    base_url = f"/v1/clusters/{cluster}/topics/test_topic_a/partitions/0"
    detail = client.get(base_url).json()
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
    topic, settings = served
    plan = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0/plan?offset=0"
    no_redis = gateway_client(settings.model_copy(update={"redis": settings.redis.model_copy(update={"url": f"redis://127.0.0.1:{_closed_port()}/0"})}), s3_server, timeouts={"redis_s": 0.5, "s3_s": 0.5})
    response = no_redis.get(plan)
    assert response.status_code == 503 and response.json()["error"]["code"] == "registry_unavailable"
    assert no_redis.get("/readyz").status_code == 503

    class DeadS3:
        endpoint_url = f"http://127.0.0.1:{_closed_port()}"
        access_key, secret_key, region = s3_server.access_key, s3_server.secret_key, s3_server.region

    no_s3 = gateway_client(settings, DeadS3(), timeouts={"redis_s": 0.5, "s3_s": 0.5})
    response = no_s3.get(plan)  # a first plan reads the segment's batch index (the registry keeps no sparse index: issue 34)
    assert response.status_code == 503 and response.json()["error"]["code"] == "storage_unavailable"
    assert no_s3.get("/readyz").status_code == 503
    assert no_s3.get("/healthz").status_code == 200


def test_corrupt_registry_data_is_a_500_that_clients_do_not_retry(served, s3_server) -> None:
    """Issue 26's live bug: a malformed registry entry was answered 503 ``registry_unavailable``,
    which the SDK retries as transient, so corrupt data was retried forever instead of reported.
    It is now 500 ``corrupt_registry_data`` naming the key and field, asked once by the SDK."""
    topic, settings = served
    registry = registry_for(settings)
    key = registry.keys(topic, 0).segment(0)
    registry_client = redis.Redis.from_url(settings.redis.url)
    try:
        assert registry_client.hset(key, "last_offset", "not-a-number") == 0  # an existing field, overwritten
    finally:
        registry_client.close()
    response = gateway_client(settings, s3_server).get(f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0/plan", params={"offset": 0})
    body = response.json()
    assert (response.status_code, body["error"]["code"]) == (500, "corrupt_registry_data"), body
    assert key in body["error"]["message"] and "last_offset" in body["error"]["message"], body

    requests: list[str] = []

    class Counting(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            requests.append(request.url.path)
            return super().handle_request(request)

    with gateway_server(settings, s3_server) as url, GatewayClient(url, settings.cluster, retries=5, backoff_s=0.05, transport=Counting()) as client:
        with pytest.raises(GatewayRequestError, match="corrupt_registry_data"):
            client.plan(topic, 0, 0, max_bytes=1 << 20)
    assert requests == [f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0/plan"]
