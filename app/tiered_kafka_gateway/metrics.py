"""Gateway metrics: request latency by route, caches, presigns, S3 GETs, Kafka proxy use.

Counts kept by the cluster readers and the Kafka pools are copied into gauges at each scrape.
Caches (``caches``: every one bounded by bytes) are read at scrape time by a collector, per
cluster and cache name::

    tiered_kafka_gateway_cache_hits_total, _cache_misses_total, _cache_evictions_total   counters
    tiered_kafka_gateway_cache_bytes, _cache_capacity_bytes, _cache_entries, _cache_hit_ratio   gauges

(hit ratio = hits / (hits + misses), 0 before any lookup).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tiered_kafka_gateway import kafka_offsets

PREFIX = "tiered_kafka_gateway"


class _CacheCollector(Collector):
    """The readers' caches, read when scraped."""

    def __init__(self) -> None:
        self.readers: dict[str, Any] = {}

    def collect(self) -> Iterator[Metric]:
        labels = ["cluster", "cache"]
        hits = CounterMetricFamily(f"{PREFIX}_cache_hits", "Lookups answered by an in-memory cache", labels=labels)
        misses = CounterMetricFamily(f"{PREFIX}_cache_misses", "Lookups an in-memory cache had to load", labels=labels)
        evictions = CounterMetricFamily(f"{PREFIX}_cache_evictions", "Entries evicted to keep a cache within its bytes", labels=labels)
        size = GaugeMetricFamily(f"{PREFIX}_cache_bytes", "Estimated bytes held by an in-memory cache", labels=labels)
        capacity = GaugeMetricFamily(f"{PREFIX}_cache_capacity_bytes", "The bytes an in-memory cache may hold", labels=labels)
        entries = GaugeMetricFamily(f"{PREFIX}_cache_entries", "Entries held by an in-memory cache", labels=labels)
        ratio = GaugeMetricFamily(f"{PREFIX}_cache_hit_ratio", "Hits / lookups of an in-memory cache", labels=labels)
        for name, reader in self.readers.items():
            for cache in reader.caches:
                values = [name, cache.name]
                hits.add_metric(values, cache.hits)
                misses.add_metric(values, cache.misses)
                evictions.add_metric(values, cache.evictions)
                size.add_metric(values, cache.bytes)
                capacity.add_metric(values, cache.capacity_bytes)
                entries.add_metric(values, len(cache))
                lookups = cache.hits + cache.misses
                ratio.add_metric(values, cache.hits / lookups if lookups else 0.0)
        yield from (hits, misses, evictions, size, capacity, entries, ratio)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            f"{PREFIX}_request_seconds", "Request latency by route", ["route", "status"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=self.registry,
        )
        self.presigns = Gauge(f"{PREFIX}_presigned_urls", "Presigned range URLs handed out by this process", ["cluster"], registry=self.registry)
        self.kafka_calls = Gauge(f"{PREFIX}_kafka_proxy_calls", "Calls to Kafka (reads and offsets) by this process", ["cluster"], registry=self.registry)
        self.s3_gets = Gauge(f"{PREFIX}_s3_gets", "S3 GET requests made by this process", ["cluster"], registry=self.registry)
        self._caches = _CacheCollector()
        self.registry.register(self._caches)

    def refresh(self, readers: dict[str, Any]) -> None:
        self._caches.readers = readers
        for name, reader in readers.items():
            self.s3_gets.labels(name).set(reader.s3_gets)
            self.presigns.labels(name).set(reader.presigns)
            self.kafka_calls.labels(name).set(kafka_offsets.calls(name))
