"""The gateway's Kafka side: a bounded pool of confluent-kafka consumers per cluster.

Used for the broker's log start offset and high watermark, and for reads of offsets not yet in
remote storage. At most ``kafka.max_concurrency`` calls run at once per cluster (a caller waits
up to ``kafka.timeout_s`` for a slot, then gets 503); consumers are reused, never shared by two
calls at once, and never join a group (no commits, no rebalances).

Their Fetch requests wait at most :data:`FETCH_WAIT_MAX_MS` for data. A Kafka broker holds a Fetch
that finds less than ``fetch.min.bytes`` until ``fetch.max.wait.ms`` (librdkafka's
``fetch.wait.max.ms``, 500 ms by default) has passed, and it answers the requests of one connection
one at a time, in order. With the default, every read that reached the partition's end waited
500 ms for the empty Fetch that tells librdkafka it is there (partition EOF), and the next call's
ListOffsets (the watermarks) waited behind the Fetch still in flight from the call before: 1 to
1.5 s for a read of the last records.

A secured Kafka: the cluster's ``kafka_security`` (``config``: ``security.protocol``, ``sasl.*``,
``ssl.*``) is added to each consumer's configuration as is. Those values are secrets: the pool keeps
them in a private attribute, never logs them, and a pool's repr names only its bootstrap servers.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import uuid
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tiered_kafka_gateway.errors import ErrorCode, GatewayError

if TYPE_CHECKING:
    from tiered_kafka_gateway.sources import ClusterSource

_POOLS: dict[str, KafkaPool] = {}
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_POOLS_LOCK = threading.Lock()
_ALL_POOLS: list[KafkaPool] = []  # every pool made, including replaced ones, for close_pools
FETCH_WAIT_MAX_MS = 10
CONSUME_WAIT_S = 0.02


class KafkaPool:
    def __init__(self, bootstrap_servers: str, max_concurrency: int, timeout_s: float, security: Mapping[str, str] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._security = dict(security or {})  # librdkafka's security settings, secrets revealed (module docstring)
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self.calls = 0
        self._idle: dict[str, queue.SimpleQueue[Consumer]] = {level: queue.SimpleQueue() for level in ISOLATION_LEVELS}
        self._closed = False
        _ALL_POOLS.append(self)

    @contextmanager
    def consumer(self, isolation_level: str = "read_committed") -> Iterator[Consumer]:
        """A consumer of the given isolation level (librdkafka's default: read_committed)."""
        idle = self._idle[isolation_level]
        self.calls += 1
        if not self._slots.acquire(timeout=self.timeout_s):
            raise GatewayError(ErrorCode.KAFKA_UNAVAILABLE, "too many concurrent Kafka reads; retry later")
        try:
            try:
                consumer = idle.get_nowait()
            except queue.Empty:
                consumer = Consumer(
                    {
                        "bootstrap.servers": self.bootstrap_servers,
                        "group.id": f"tiered-kafka-gateway-{uuid.uuid4().hex[:8]}",
                        "enable.auto.commit": False,
                        "enable.partition.eof": True,
                        "auto.offset.reset": "error",
                        "isolation.level": isolation_level,
                        "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,  # a consumer fetches only during a call (module docstring)
                        "socket.timeout.ms": int(self.timeout_s * 1000),
                        "logger": _quiet_logger(),
                        **self._security,
                    }
                )
            try:
                yield consumer
            finally:
                consumer.unassign()
                if self._closed:  # the pool was closed meanwhile: nobody would close this one
                    with contextlib.suppress(Exception):
                        consumer.close()
                else:
                    idle.put(consumer)
        finally:
            self._slots.release()


    def __repr__(self) -> str:
        return f"KafkaPool({self.bootstrap_servers!r})"

    def close(self) -> None:
        """Close the idle consumers; one in use is closed when its call ends."""
        self._closed = True
        for idle in self._idle.values():
            while True:
                try:
                    consumer = idle.get_nowait()
                except queue.Empty:
                    break
                with contextlib.suppress(Exception):
                    consumer.close()


def _close_at_exit() -> None:
    # brokers of a finished process are often gone: librdkafka's reconnect attempts while closing are noise
    _quiet_logger().disabled = True
    close_pools()


def close_pools(cluster_names: Iterable[str] | None = None) -> None:
    """Close the consumers of the pools of ``cluster_names`` (every pool when None): on the app's
    shutdown (``app.lifespan``, its own clusters), and at interpreter exit (every pool).

    A consumer left to Python's finalization is destroyed by librdkafka while the interpreter is
    shutting down, which was seen to spin forever (``rd_kafka_consumer_close`` from
    ``Consumer_dealloc``), so that a process that used the pool never exited. A later call for a
    closed cluster makes a new pool (another app of the same process may still serve it)."""
    with _POOLS_LOCK:
        if cluster_names is None:
            pools = list(_ALL_POOLS)
            _POOLS.clear()
            _ALL_POOLS.clear()
        else:
            pools = [pool for name in cluster_names if (pool := _POOLS.pop(name, None)) is not None]
            for pool in pools:
                _ALL_POOLS.remove(pool)
    for pool in pools:
        pool.close()


atexit.register(_close_at_exit)


def _quiet_logger() -> Any:
    import logging

    return logging.getLogger("tiered_kafka_gateway.librdkafka")


def calls(cluster_name: str) -> int:
    """How many Kafka calls this process made for a cluster (for the metrics)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(cluster_name)
        return 0 if pool is None else pool.calls


def pool_for(cluster: ClusterSource) -> KafkaPool:
    if not cluster.bootstrap_servers:
        raise GatewayError(ErrorCode.KAFKA_NOT_CONFIGURED, f"cluster {cluster.name} has no Kafka bootstrap servers configured")
    with _POOLS_LOCK:
        pool = _POOLS.get(cluster.name)
        if pool is None or pool.bootstrap_servers != cluster.bootstrap_servers:
            if pool is not None:
                pool.close()
                _ALL_POOLS.remove(pool)
            kafka = cluster.settings.kafka
            security = cluster.settings.kafka_client_config(cluster.name)
            pool = KafkaPool(cluster.bootstrap_servers, kafka.max_concurrency, kafka.timeout_s, security)
            _POOLS[cluster.name] = pool
        return pool


def watermarks(cluster: ClusterSource, topic: str, partition: int) -> tuple[int, int]:
    """(log start offset, high watermark) from the partition's leader."""
    pool = pool_for(cluster)
    with pool.consumer() as consumer:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=pool.timeout_s, cached=False)
        except KafkaException as err:
            raise _translate(err, topic, partition) from err


@dataclass(frozen=True)
class KafkaRead:
    """Messages read from the broker, from the requested offset on, in offset order."""

    messages: list[Any]  # confluent_kafka.Message, each without error
    log_start_offset: int
    high_watermark: int
    #: where the next read starts: past the last message, and past what the consumer skipped
    #: (control batches, and aborted records under read_committed) up to the partition's end
    next_offset: int


def read(
    cluster: ClusterSource,
    topic: str,
    partition: int,
    offset: int,
    max_records: int,
    max_bytes: int,
    timeout_s: float | None = None,
    isolation_level: str = "read_uncommitted",
) -> KafkaRead:
    """Up to ``max_records`` messages from ``offset``: a consumer of the pool is assigned the
    partition at that offset (no group join, no commit) and consumes until ``max_records``,
    ``max_bytes`` of keys, values and headers (``message_bytes``; at least one message), the
    partition's end (EOF) or the timeout.

    The watermarks are asked first, so that an unknown partition is a 404 and an offset outside
    [log start, high watermark] a 416 ``offset_out_of_range`` whose details say which side
    (``log_start_offset``, ``high_watermark``) — the consumption modes fall back to remote
    storage below the log start.
    """
    pool = pool_for(cluster)
    timeout = pool.timeout_s if timeout_s is None else timeout_s
    with pool.consumer(isolation_level) as consumer:
        tp = TopicPartition(topic, partition)
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        except KafkaException as err:
            raise _translate(err, topic, partition) from err
        if offset < low or offset > high:
            raise _out_of_range(topic, partition, offset, low, high)
        messages: list[Any] = []
        if offset == high:
            return KafkaRead(messages, low, high, offset)
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        size = 0
        done = False
        end_of_partition: int | None = None
        while not done and len(messages) < max_records and size < max_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            # librdkafka's consume() waits for the whole count until its timeout, even after the
            # partition's end (EOF) arrived: short waits, so that a read of the last records ends at once
            for message in consumer.consume(min(max_records - len(messages), 1000), min(remaining, CONSUME_WAIT_S)):
                error = message.error()
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        end_of_partition = message.offset()  # librdkafka reports the end offset it reached
                        done = True
                        break
                    if code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
                        low, high = _watermarks_or(consumer, tp, timeout, (low, high))
                        raise _out_of_range(topic, partition, offset, low, high)
                    raise _translate(KafkaException(error), topic, partition)
                if message.offset() < offset:
                    continue
                messages.append(message)
                size += message_bytes(message)
                if len(messages) >= max_records or size >= max_bytes:
                    done = True
                    break
                if message.offset() + 1 >= high:
                    high = message.offset() + 1
        next_offset = messages[-1].offset() + 1 if messages else offset
        if end_of_partition is not None and end_of_partition > next_offset:
            next_offset = end_of_partition  # trailing markers or aborted records were skipped
        return KafkaRead(messages, low, high, next_offset)


def message_bytes(message: Any) -> int:
    """What a message counts against ``max_bytes``: its key, value, and every header's key and value
    (the bytes the JSON answer carries; issue 36: headers were left out, so a read of small values
    with large headers passed the bound)."""
    headers = message.headers() or ()
    return len(message.key() or b"") + len(message.value() or b"") + sum(len(k.encode() if isinstance(k, str) else k) + len(v or b"") for k, v in headers)


def _watermarks_or(consumer: Consumer, tp: TopicPartition, timeout: float, known: tuple[int, int]) -> tuple[int, int]:
    try:
        return consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
    except KafkaException:
        return known


def _out_of_range(topic: str, partition: int, offset: int, low: int, high: int) -> GatewayError:
    side = "below the log start" if offset < low else "past the high watermark"
    return GatewayError(
        ErrorCode.OFFSET_OUT_OF_RANGE,
        f"offset {offset} of {topic}-{partition} is {side}: Kafka holds {low}..{high - 1}",
        log_start_offset=low,
        high_watermark=high,
    )


def _translate(err: KafkaException, topic: str, partition: int) -> GatewayError:
    error = err.args[0] if err.args else None
    code = error.code() if isinstance(error, KafkaError) else None
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
        return GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Kafka does not know {topic}-{partition}")
    return GatewayError(ErrorCode.KAFKA_UNAVAILABLE, f"Kafka is unavailable: {err}")
