"""The agent's Prometheus metrics (one registry per Agent, so tests can run several).

    tiered_kafka_agent_upload_lag_offsets{topic,partition}     rotated offsets not yet registered
    tiered_kafka_agent_upload_lag_seconds{topic,partition}     age of the oldest rotated segment not yet registered
    tiered_kafka_agent_watermark_age_seconds{topic,partition}  time since offset.wm last moved
    tiered_kafka_agent_segments_awaiting_high_watermark{topic,partition}  rotated segments ending above Kafka's checkpointed high watermark
    tiered_kafka_agent_uploaded_bytes_total{topic}             bytes uploaded (all files of all segments)
    tiered_kafka_agent_segments_uploaded_total{topic}          segments uploaded and registered
    tiered_kafka_agent_upload_failures_total{topic}            segment attempts that failed after their retries
    tiered_kafka_agent_upload_retries_total{topic}             retried S3/Redis calls
    tiered_kafka_agent_gaps_total{topic}                       segments lost before they could be uploaded
    tiered_kafka_agent_s3_request_errors_total                 failed S3 HTTP attempts (botocore retries them first)
    tiered_kafka_agent_roll_to_registered_seconds              histogram: segment roll seen -> registered
    tiered_kafka_agent_led_partitions                          partitions this agent uploads
    tiered_kafka_agent_leadership_failures_total               failed ZooKeeper watches and rebuilds, lost sessions, failed KRaft polls
    tiered_kafka_agent_leadership_healthy                      1 while the leadership map follows the cluster, 0 while a failure is retried
    tiered_kafka_agent_symlinks_refused_total{kind}           symbolic links met in log.dir and not followed (kind: partition_dir, segment_file), per pass

The two leadership figures are read from the watcher's ``health()`` at each scrape (``observe_leadership``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from tiered_kafka_agent.leadership import LeadershipWatcher

PREFIX = "tiered_kafka_agent"


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        tp = ["topic", "partition"]
        self.lag_offsets = Gauge(f"{PREFIX}_upload_lag_offsets", "Rotated offsets not yet registered", tp, registry=self.registry)
        self.lag_seconds = Gauge(f"{PREFIX}_upload_lag_seconds", "Age of the oldest rotated segment not yet registered", tp, registry=self.registry)
        self.watermark_age = Gauge(f"{PREFIX}_watermark_age_seconds", "Seconds since offset.wm last moved", tp, registry=self.registry)
        self.awaiting_high_watermark = Gauge(
            f"{PREFIX}_segments_awaiting_high_watermark", "Rotated segments ending above the high watermark Kafka last checkpointed", tp, registry=self.registry
        )
        self.uploaded_bytes = Counter(f"{PREFIX}_uploaded_bytes", "Bytes uploaded to S3", ["topic"], registry=self.registry)
        self.segments = Counter(f"{PREFIX}_segments_uploaded", "Segments uploaded and registered", ["topic"], registry=self.registry)
        self.failures = Counter(f"{PREFIX}_upload_failures", "Segment uploads that failed after retries", ["topic"], registry=self.registry)
        self.retries = Counter(f"{PREFIX}_upload_retries", "Retried S3 or Redis calls", ["topic"], registry=self.registry)
        self.gaps = Counter(f"{PREFIX}_gaps", "Segments deleted before they could be uploaded", ["topic"], registry=self.registry)
        self.roll_to_registered = Histogram(
            f"{PREFIX}_roll_to_registered_seconds",
            "From seeing a rolled segment to its registration",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.s3_request_errors = Counter(f"{PREFIX}_s3_request_errors", "Failed S3 HTTP attempts", registry=self.registry)
        self.symlinks_refused = Counter(
            f"{PREFIX}_symlinks_refused", "Symbolic links in log.dir not followed, counted on each pass that meets one", ["kind"], registry=self.registry
        )
        self.led_partitions = Gauge(f"{PREFIX}_led_partitions", "Partitions this agent uploads", registry=self.registry)

    def observe_leadership(self, watcher: LeadershipWatcher) -> None:
        """Publish ``watcher.health()``: its failures counted and whether it is healthy now."""
        self.registry.register(_LeadershipCollector(watcher))

    def observe_s3_client(self, client: object) -> None:
        """Count every failed S3 attempt, including those botocore retries by itself."""

        def on_needs_retry(response: object = None, caught_exception: object = None, **_: object) -> None:
            status = response[1].get("ResponseMetadata", {}).get("HTTPStatusCode", 0) if isinstance(response, tuple) else 0
            if caught_exception is not None or status >= 500:
                self.s3_request_errors.inc()

        client.meta.events.register("needs-retry.s3", on_needs_retry)  # type: ignore[attr-defined]

    def serve(self, host: str, port: int) -> None:
        """Expose /metrics over HTTP (port 0: not served)."""
        if port:
            start_http_server(port, addr=host, registry=self.registry)

    def forget_partition(self, topic: str, partition: int) -> None:
        for gauge in (self.lag_offsets, self.lag_seconds, self.watermark_age, self.awaiting_high_watermark):
            try:
                gauge.remove(topic, str(partition))
            except KeyError:
                pass

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (tests and the CLI's status output)."""
        result = self.registry.get_sample_value(name, labels)
        return 0.0 if result is None else result


class _LeadershipCollector(Collector):
    """The leadership watcher's health, read at each scrape."""

    def __init__(self, watcher: LeadershipWatcher) -> None:
        self.watcher = watcher

    def collect(self) -> Iterator[Metric]:
        health = self.watcher.health()
        yield CounterMetricFamily(f"{PREFIX}_leadership_failures", "Failed ZooKeeper watches and rebuilds, lost sessions, failed KRaft polls", value=health.failures)
        yield GaugeMetricFamily(f"{PREFIX}_leadership_healthy", "1 while the leadership map follows the cluster, 0 while a failure is retried", value=1 if health.ok else 0)
