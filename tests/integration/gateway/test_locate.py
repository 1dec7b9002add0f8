"""Read plans over real Redis, SeaweedFS and segments the agent uploaded."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

from tests.support.gateway_env import gateway_client, unique_topic, uploaded_partition
from tests.support.agent_env import registry_for
from tiered_kafka.format.record_batch import iter_batches

pytestmark = pytest.mark.integration


def fetch(url: str, range_header: str) -> bytes:
    return urllib.request.urlopen(urllib.request.Request(url, headers={"Range": range_header}), timeout=10).read()


@pytest.fixture
def served(kafka_server, tmp_path, redis_server, s3_server, s3_bucket):
    """A topic of its own on the shared broker, uploaded; (topic, agent settings, gateway client)."""
    topic = unique_topic("planned")
    broker, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic)
    return topic, settings, gateway_client(settings, s3_server, broker.bootstrap_servers)


def test_plans_at_segment_starts_middles_and_ends_decode_to_their_offsets(served) -> None:
    topic, settings, client = served
    entries = registry_for(settings).segments(topic, 0)
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
    for entry in entries[:4]:
        for offset in (entry.base_offset, (entry.base_offset + entry.last_offset) // 2, entry.last_offset):
            for max_bytes in (1, 30_000, 1_000_000):
                response = client.get(f"{base}/plan", params={"offset": offset, "max_bytes": max_bytes})
                assert response.status_code == 200, response.text
                plan = response.json()
                assert plan["segment"]["object_key"] == entry.object_key
                ranges = plan["ranges"]
                assert ranges[0]["first_offset"] <= offset <= ranges[0]["last_offset"]
                for r in ranges:  # fetched through the presigned URL, each range decodes to exactly its offsets
                    batches = list(iter_batches(fetch(r["url"], r["range_header"])))
                    assert (batches[0].base_offset, batches[-1].last_offset) == (r["first_offset"], r["last_offset"])
                assert plan["next_offset"] == ranges[-1]["last_offset"] + 1


def test_partition_detail_and_topic_listing(served) -> None:
    topic, settings, client = served
    entries = registry_for(settings).segments(topic, 0)
    detail = client.get(f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0").json()
    assert detail["remote"]["earliest_offset"] == 0 and detail["remote"]["latest_offset"] == entries[-1].last_offset
    assert detail["kafka"] == {"log_start_offset": 0, "high_watermark": 2000}
    topics = client.get(f"/v1/clusters/{settings.cluster}/topics").json()
    assert topics["topics"] == [{"name": topic, "partitions": [0]}]
    assert client.get("/v1/clusters").json() == {"clusters": [settings.cluster]}


def test_offsets_outside_remote_storage_and_bad_input_are_clear_4xx(served) -> None:
    topic, settings, client = served
    latest = registry_for(settings).partition_info(topic, 0).latest_offset
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
    cases = [
        (f"{base}/plan?offset={latest + 1}", 416, "offset_not_in_remote_storage"),
        (f"{base}/plan?offset=-1", 422, "invalid_request"),
        (f"{base}/plan?offset=abc", 422, "invalid_request"),
        (f"{base}/plan?offset=0&max_bytes=0", 422, "invalid_request"),
        (f"{base}/plan?offset=0&max_bytes=99999999999", 422, "invalid_request"),
        (f"/v1/clusters/nope/topics/{topic}/partitions/0/plan?offset=0", 404, "unknown_cluster"),
        (f"/v1/clusters/{settings.cluster}/topics/other/partitions/0/plan?offset=0", 404, "unknown_topic_or_partition"),
        (f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/7/plan?offset=0", 404, "unknown_topic_or_partition"),
        (f"/v1/clusters/{settings.cluster}/topics/bad$name/partitions/0/plan?offset=0", 422, "invalid_request"),
    ]
    for url, status, code in cases:
        response = client.get(url)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), url


def test_offset_for_timestamp_without_downloading_segments(served) -> None:
    topic, settings, client = served
    registry = registry_for(settings)
    entries = registry.segments(topic, 0)
    target = entries[2]
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
    found = client.get(f"{base}/offsets", params={"timestamp": target.max_timestamp}).json()
    assert found["offset"] is not None and found["record_timestamp"] >= target.max_timestamp
    assert found["offset"] <= target.last_offset
    assert client.get(f"{base}/offsets", params={"timestamp": 0}).json()["offset"] == 0
    assert client.get(f"{base}/offsets", params={"timestamp": int(time.time() * 1000) + 10**7}).json()["offset"] is None


def test_expired_and_tampered_urls_are_refused_by_s3(served, s3_server) -> None:
    topic, settings, client = served
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
    plan = client.get(f"{base}/plan", params={"offset": 5, "max_bytes": 10_000}).json()
    r = plan["ranges"][0]
    assert fetch(r["url"], r["range_header"])
    key_name = plan["segment"]["object_key"].rsplit("/", 1)[1]
    for url, header in (
        (r["url"].replace("X-Amz-Signature=", "X-Amz-Signature=0"), r["range_header"]),
        (r["url"], f"bytes=0-{r['end'] + 100}"),  # another range than the one signed
        (r["url"].replace(key_name, key_name.replace(".log", ".index")), r["range_header"]),  # another object
    ):
        with pytest.raises(urllib.error.HTTPError) as err:
            fetch(url, header)
        assert err.value.code == 403
    short_lived = gateway_client(settings, s3_server, presign_ttl_s=1)
    r = short_lived.get(f"{base}/plan", params={"offset": 5, "max_bytes": 10_000}).json()["ranges"][0]
    time.sleep(2.5)
    with pytest.raises(urllib.error.HTTPError) as err:
        fetch(r["url"], r["range_header"])
    assert err.value.code == 403


def test_metrics_report_latency_caches_presigns_and_kafka_use(served) -> None:
    topic, settings, client = served
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
    for _ in range(3):
        assert client.get(f"{base}/plan", params={"offset": 10}).status_code == 200
    assert client.get(base).status_code == 200  # asks Kafka for its watermarks
    body = client.get("/metrics").text
    assert 'tiered_kafka_gateway_request_seconds_count{route="/v1/clusters/{cluster}/topics/{topic}/partitions/{partition}/plan",status="200"} 3.0' in body
    assert f'tiered_kafka_gateway_presigned_urls_total{{cluster="{settings.cluster}"}}' in body
    assert f'tiered_kafka_gateway_cache_hit_ratio{{cache="index",cluster="{settings.cluster}"}}' in body
    kafka_line = next(line for line in body.splitlines() if line.startswith("tiered_kafka_gateway_kafka_proxy_calls_total{"))
    assert float(kafka_line.rsplit(" ", 1)[1]) >= 1
