"""The gateway's Kafka side: a bounded pool of confluent-kafka consumers per cluster.

Used for the broker's log start offset and high watermark, and for reads of offsets not yet in
remote storage. At most ``kafka.max_concurrency`` calls run at once per cluster (a caller waits
up to ``kafka.timeout_s`` for a slot, then gets 503); consumers are reused, never shared by two
calls at once, and never join a group (no commits, no rebalances).
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tiered_kafka_gateway.errors import ErrorCode, GatewayError

if TYPE_CHECKING:
    from tiered_kafka_gateway.remote import ClusterReader

_POOLS: dict[str, KafkaPool] = {}
_POOLS_LOCK = threading.Lock()


class KafkaPool:
    def __init__(self, bootstrap_servers: str, max_concurrency: int, timeout_s: float) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._idle: queue.SimpleQueue[Consumer] = queue.SimpleQueue()

    @contextmanager
    def consumer(self) -> Iterator[Consumer]:
        if not self._slots.acquire(timeout=self.timeout_s):
            raise GatewayError(ErrorCode.KAFKA_UNAVAILABLE, "too many concurrent Kafka reads; retry later")
        try:
            try:
                consumer = self._idle.get_nowait()
            except queue.Empty:
                consumer = Consumer(
                    {
                        "bootstrap.servers": self.bootstrap_servers,
                        "group.id": f"tiered-kafka-gateway-{uuid.uuid4().hex[:8]}",
                        "enable.auto.commit": False,
                        "enable.partition.eof": True,
                        "auto.offset.reset": "error",
                        "socket.timeout.ms": int(self.timeout_s * 1000),
                        "logger": _quiet_logger(),
                    }
                )
            try:
                yield consumer
            finally:
                consumer.unassign()
                self._idle.put(consumer)
        finally:
            self._slots.release()


def _quiet_logger() -> Any:
    import logging

    return logging.getLogger("tiered_kafka_gateway.librdkafka")


def pool_for(cluster: ClusterReader) -> KafkaPool:
    if not cluster.bootstrap_servers:
        raise GatewayError(ErrorCode.KAFKA_NOT_CONFIGURED, f"cluster {cluster.name} has no Kafka bootstrap servers configured")
    with _POOLS_LOCK:
        pool = _POOLS.get(cluster.name)
        if pool is None or pool.bootstrap_servers != cluster.bootstrap_servers:
            kafka = cluster.settings.kafka
            pool = KafkaPool(cluster.bootstrap_servers, kafka.max_concurrency, kafka.timeout_s)
            _POOLS[cluster.name] = pool
        return pool


def watermarks(cluster: ClusterReader, topic: str, partition: int) -> tuple[int, int]:
    """(log start offset, high watermark) from the partition's leader."""
    pool = pool_for(cluster)
    with pool.consumer() as consumer:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=pool.timeout_s, cached=False)
        except KafkaException as err:
            raise _translate(err, topic, partition) from err


def _translate(err: KafkaException, topic: str, partition: int) -> GatewayError:
    error = err.args[0] if err.args else None
    code = error.code() if isinstance(error, KafkaError) else None
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
        return GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Kafka does not know {topic}-{partition}")
    return GatewayError(ErrorCode.KAFKA_UNAVAILABLE, f"Kafka is unavailable: {err}")
