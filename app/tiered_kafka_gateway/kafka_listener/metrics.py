"""The listener's Prometheus metrics, registered in the gateway's own registry (``metrics.GatewayMetrics``)
so ``/metrics`` and the Grafana dashboard show them beside the HTTP side's::

    tiered_kafka_gateway_kafka_listener_requests_total      counter (cluster, api)      requests answered
    tiered_kafka_gateway_kafka_listener_errors_total        counter (cluster, api, error) partition/request errors
                                                                                         answered, and refused frames
                                                                                         (api "frame")
    tiered_kafka_gateway_kafka_listener_bytes_total         counter (cluster, direction, source)
                                                            records bytes sent from "remote" (S3) or "kafka"
                                                            (proxied), and request/response frame bytes
                                                            ("in"/"out", source "frames")
    tiered_kafka_gateway_kafka_listener_connections         gauge (cluster)             open client connections
    tiered_kafka_gateway_kafka_listener_connection_attempts_total counter (cluster, outcome) accepted / refused
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "tiered_kafka_gateway_kafka_listener"


class ListenerMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.requests = Counter(f"{PREFIX}_requests", "Kafka-protocol requests answered by the listener", ["cluster", "api"], registry=registry)
        self.errors = Counter(f"{PREFIX}_errors", "Kafka error codes answered, and frames refused", ["cluster", "api", "error"], registry=registry)
        self.bytes = Counter(f"{PREFIX}_bytes", "Bytes the listener moved", ["cluster", "direction", "source"], registry=registry)
        self.connections = Gauge(f"{PREFIX}_connections", "Open Kafka-protocol connections", ["cluster"], registry=registry,
                                 multiprocess_mode="livesum")
        self.accepted = Counter(f"{PREFIX}_connection_attempts", "Connections accepted or refused", ["cluster", "outcome"], registry=registry)
