"""What TieredConsumer asks the two tiers about a partition: their offsets, and auto.offset.reset.

Kafka answers through the wrapped confluent-kafka ``Consumer`` (watermarks: log start offset and
high watermark, ListOffsets), remote storage through the gateway's partition endpoint. A partition
the gateway does not know (404 ``unknown_topic_or_partition``) has nothing remote. A topic the
caller may not read is the gateway's 403, ``TopicAuthorizationError``, which is raised: it is never
"nothing remote" (``tiered_kafka.modes``, TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, TopicPartition

from tiered_kafka import modes
from tiered_kafka.errors import ConfigError, GatewayRequestError, TopicAuthorizationError
from tiered_kafka.client.gateway import GatewayClient, PartitionExtent
from tiered_kafka.modes import Mode

log = logging.getLogger(__name__)
TP = tuple[str, int]


def is_authorization_failure(err: BaseException) -> bool:
    """The gateway's 403 ``topic_authorization_failed`` (Kafka's TOPIC_AUTHORIZATION_FAILED)."""
    return isinstance(err, TopicAuthorizationError) or (isinstance(err, GatewayRequestError) and err.code == "topic_authorization_failed")


class Tiers:
    """Offsets of both tiers for one consumer (``inner``: Kafka, None without bootstrap.servers)."""

    def __init__(self, inner: Consumer | None, gateway: GatewayClient | None) -> None:
        self.inner = inner
        self.gateway = gateway

    def extent(self, tp: TP) -> PartitionExtent:
        if self.gateway is None:
            raise ConfigError("remote storage needs tiered.gateway.url and tiered.cluster")
        try:
            return self.gateway.partition(*tp)
        except GatewayRequestError as err:
            if is_authorization_failure(err):
                raise
            if err.code == "unknown_topic_or_partition":  # the gateway knows no such partition: nothing remote
                return PartitionExtent(None, None, None)
            raise

    def remote_range(self, tp: TP) -> tuple[int, int] | None:
        """Remote storage's (earliest, latest) offsets, None when it holds nothing."""
        remote = self.extent(tp).remote
        return None if remote is None else (remote.earliest_offset, remote.latest_offset)

    def remote_holds(self, tp: TP, offset: int) -> bool:
        remote = self.extent(tp).remote
        return remote is not None and remote.holds(offset)

    def watermarks(self, tp: TP, timeout: float = 30) -> tuple[int, int]:
        if self.inner is None:
            raise ConfigError("Kafka's watermarks need bootstrap.servers")
        low, high = self.inner.get_watermark_offsets(TopicPartition(*tp), timeout=timeout, cached=False)
        return low, high

    def first_offsets(self, mode: Mode, tp: TP) -> list[int]:
        """The first offset of each tier the mode reads (Kafka's log start, remote storage's earliest)."""
        firsts = []
        if modes.reads_kafka(mode):
            firsts.append(self.watermarks(tp)[0])
        if modes.reads_remote(mode):
            remote = self.remote_range(tp)
            if remote is not None:
                firsts.append(remote[0])
        return firsts

    def earliest(self, mode: Mode, tp: TP) -> int:
        return min(self.first_offsets(mode, tp), default=0)

    def latest(self, mode: Mode, tp: TP) -> int:
        if modes.reads_kafka(mode):
            return self.watermarks(tp)[1]
        remote = self.remote_range(tp)
        return 0 if remote is None else remote[1] + 1

    def reset_target(self, mode: Mode, tp: TP, policy: str, offset: int | None) -> int | None:
        """auto.offset.reset (``policy``: earliest or latest; None for 'error') for a partition
        without a valid position.

        earliest: with no position, the earliest offset of the tiers the mode reads; from a position
        neither tier holds (remote retention, or data lost between the tiers), the first offset after
        it that a tier holds: forward, as Kafka resets to its log start, never back to re-read.
        """
        if policy == "earliest":
            if offset is None or offset >= self.latest(mode, tp):  # past the end: from the start, as Kafka does
                return self.earliest(mode, tp)
            ahead = [o for o in self.first_offsets(mode, tp) if o > offset]
            target = min(ahead) if ahead else self.latest(mode, tp)
            log.warning("%s-%d: offsets %d..%d are in no tier; continuing at %d", tp[0], tp[1], offset, target - 1, target)
            return target
        if policy == "latest":
            return self.latest(mode, tp)
        return None
