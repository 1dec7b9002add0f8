"""What TieredConsumer asks the two tiers about a partition: their offsets, and auto.offset.reset.

Kafka answers through the wrapped confluent-kafka ``Consumer`` (watermarks: log start offset and
high watermark, ListOffsets), remote storage through the gateway's partition endpoint. A partition
the gateway does not know (404 ``unknown_topic_or_partition``) has nothing remote. A topic the
caller may not read is the gateway's 403, ``TopicAuthorizationError``, which is raised: it is never
"nothing remote" (``tiered_kafka.modes``, TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from tiered_kafka import modes
from tiered_kafka.errors import ConfigError, GatewayRequestError, TopicAuthorizationError
from tiered_kafka.client.gateway import GatewayClient, PartitionExtent
from tiered_kafka.modes import Mode

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TierRange:
    """Offsets ``first..last`` (inclusive) that one tier holds."""

    tier: str  # "Kafka" or "remote storage"
    first: int
    last: int

    def holds(self, offset: int) -> bool:
        return self.first <= offset <= self.last

    def overlaps(self, first: int, last: int) -> bool:
        return self.first <= last and first <= self.last

    def clip(self, first: int, last: int) -> TierRange:
        return TierRange(self.tier, max(self.first, first), min(self.last, last))


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

    def held_ranges(self, tp: TP, mode: Mode | None = None) -> list[TierRange]:
        """What each tier holds of ``tp``: of those ``mode`` reads, or (None) of every tier this
        consumer can ask (Kafka with bootstrap.servers, remote storage with a gateway). Remote
        storage's recorded gaps are not subtracted: they are the remote reader's to meet."""
        ranges = []
        if (self.inner is not None) if mode is None else modes.reads_kafka(mode):
            low, high = self.watermarks(tp)
            if high > low:
                ranges.append(TierRange("Kafka", low, high - 1))
        if (self.gateway is not None) if mode is None else modes.reads_remote(mode):
            remote = self.remote_range(tp)
            if remote is not None:
                ranges.append(TierRange("remote storage", remote[0], remote[1]))
        return ranges

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
        past the end, the same (as Kafka resets to its log start); from a position a tier the mode
        reads holds, that position (the refusal was stale: reading goes on there, nothing is
        passed); from a position no tier the mode reads holds (retention, or data lost between the
        tiers), the first offset after it that one holds: forward, never back to re-read.
        Telling the application what a forward move passed is ``Positions``' (``_report_skip``).
        """
        if policy == "earliest":
            if offset is None or offset >= self.latest(mode, tp):  # past the end: from the start, as Kafka does
                return self.earliest(mode, tp)
            read = self.held_ranges(tp, mode)
            if any(r.holds(offset) for r in read):
                return offset
            ahead = [first for first in self.first_offsets(mode, tp) if first > offset]
            return min(ahead) if ahead else self.latest(mode, tp)
        if policy == "latest":
            return self.latest(mode, tp)
        return None
