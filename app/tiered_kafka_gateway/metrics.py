"""Gateway metrics: request latency by route, cache hit ratios, presigns, S3 GETs, Kafka proxy use.

Counts kept by the cluster readers and the Kafka pools are copied into gauges at each scrape."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram

from tiered_kafka_gateway import kafka_offsets

PREFIX = "tiered_kafka_gateway"


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            f"{PREFIX}_request_seconds", "Request latency by route", ["route", "status"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=self.registry,
        )
        self.presigns = Gauge(f"{PREFIX}_presigned_urls", "Presigned range URLs handed out by this process", ["cluster"], registry=self.registry)
        self.kafka_calls = Gauge(f"{PREFIX}_kafka_proxy_calls", "Calls to Kafka (reads and offsets) by this process", ["cluster"], registry=self.registry)
        self.cache_hit_ratio = Gauge(f"{PREFIX}_cache_hit_ratio", "Hits / lookups of an in-memory cache", ["cluster", "cache"], registry=self.registry)
        self.s3_gets = Gauge(f"{PREFIX}_s3_gets", "S3 GET requests made by this process", ["cluster"], registry=self.registry)

    def refresh(self, readers: dict[str, Any]) -> None:
        for name, reader in readers.items():
            for cache_name, cache in (("index", reader.indexes), ("headers", reader.headers), ("batch_index", reader.batch_indexes)):
                lookups = cache.hits + cache.misses
                self.cache_hit_ratio.labels(name, cache_name).set(cache.hits / lookups if lookups else 0.0)
            self.s3_gets.labels(name).set(reader.s3_gets)
            self.presigns.labels(name).set(reader.presigns)
            self.kafka_calls.labels(name).set(kafka_offsets.calls(name))
