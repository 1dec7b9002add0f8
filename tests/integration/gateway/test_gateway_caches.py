"""The gateway's caches stay within their bytes whatever callers ask, and /metrics shows them
(real Redis, SeaweedFS, broker, agent)."""

from __future__ import annotations

import re

import pytest

from tests.support.gateway_env import gateway_client, unique_topic, uploaded_partition

pytestmark = pytest.mark.integration
BOUND = 8192


@pytest.fixture
def served(kafka_server, tmp_path, redis_server, s3_server, s3_bucket):
    """A topic of its own on the shared broker, uploaded; (topic, agent settings, gateway client)."""
    topic = unique_topic("cached")
    _, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, count=300)
    return topic, settings, gateway_client(settings, s3_server, cache={"listing_bytes": BOUND, "segment_bytes": 2 * BOUND})


def _metric(body: str, name: str, cluster: str, cache: str) -> float:
    match = re.search(rf'^{name}{{cache="{cache}",cluster="{re.escape(cluster)}"}} (\S+)$', body, re.M)
    assert match, f"{name} for cache {cache} missing from /metrics"
    return float(match.group(1))


def test_hammering_unknown_partitions_keeps_the_negative_cache_within_its_bytes(served) -> None:
    topic, settings, client = served
    reader = client.app.state.readers[settings.cluster]
    listings = next(c for c in reader.caches if c.name == "listing")
    assert listings.capacity_bytes == BOUND
    for i in range(300):  # every one unknown: a listing that finds nothing, remembered (negative cache)
        asked, partition = (f"nope-{i}", 0) if i % 2 else (topic, 1000 + i)
        response = client.get(f"/v1/clusters/{settings.cluster}/topics/{asked}/partitions/{partition}/plan", params={"offset": 0})
        assert response.status_code == 404 and response.json()["error"]["code"] == "unknown_topic_or_partition"
        assert listings.bytes <= BOUND
    assert 0 < len(listings) < 300 and listings.evictions >= 300 - len(listings) - 1 and listings.misses >= 300
    body = client.get("/metrics").text
    assert _metric(body, "tiered_kafka_gateway_cache_bytes", settings.cluster, "listing") <= BOUND
    assert _metric(body, "tiered_kafka_gateway_cache_capacity_bytes", settings.cluster, "listing") == BOUND
    assert _metric(body, "tiered_kafka_gateway_cache_evictions_total", settings.cluster, "listing") == listings.evictions
    assert _metric(body, "tiered_kafka_gateway_cache_misses_total", settings.cluster, "listing") == listings.misses


def test_every_cache_is_bounded_by_bytes_and_exported(served) -> None:
    topic, settings, client = served
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"
    for offset in (0, 0, 5, 100):
        assert client.get(f"{base}/plan", params={"offset": offset}).status_code == 200
    reader = client.app.state.readers[settings.cluster]
    names = {c.name for c in reader.caches}
    assert names == {"index", "headers", "batch_index", "sparse_index", "txn_index", "listing", "segments", "last_entry", "segment_list"}
    assert reader.wait_for_background_loads()
    body = client.get("/metrics").text
    for cache in reader.caches:
        assert 0 <= cache.bytes <= cache.capacity_bytes
        for name in ("hits_total", "misses_total", "evictions_total", "bytes", "capacity_bytes", "entries", "hit_ratio"):
            _metric(body, f"tiered_kafka_gateway_cache_{name}", settings.cluster, cache.name)
    # the first plan of the segment fetched its batch index, whose sparse digest the cache keeps (registry layout 2)
    assert _metric(body, "tiered_kafka_gateway_cache_entries", settings.cluster, "sparse_index") >= 1
    assert _metric(body, "tiered_kafka_gateway_cache_entries", settings.cluster, "batch_index") >= 1
