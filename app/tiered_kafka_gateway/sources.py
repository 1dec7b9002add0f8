"""What the gateway reads a cluster through: the ``ClusterSource`` protocol, and the one factory.

Two sources implement it side by side, neither deriving from the other:

* ``remote.ClusterReader``: our agent's layout (the Redis registry, segment objects in S3, a
  Pinterest-layout bucket found by listing);
* ``rsm_reader.RsmClusterReader``: a KIP-405 bucket written by Aiven's RemoteStorageManager.

The routes, ``records``, ``kafka_offsets``, ``metrics`` and the coverage page ask only what the
protocol names. The clients a source reads through (Redis, S3) are made once per cluster when the
app is created (``app.create_app`` -> ``build_sources`` -> the kind's ``connect``) and handed to the
source's constructor: a unit test builds a source over fakes of them (tests/unit/gateway).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from tiered_kafka.format.txn_index import AbortedTxn
from tiered_kafka.read_plan import ByteRange
from tiered_kafka.registry import CoverageStart, Gap, PartitionInfo, PartitionSummary, SegmentEntry, partition_index_member
from tiered_kafka_gateway.caches import LRU, RemoteSegment
from tiered_kafka_gateway.config import ClusterSettings, GatewaySettings
from tiered_kafka_gateway.partition_listing import ListingPage
from tiered_kafka_gateway.plans import Plan


class ClusterSource(Protocol):
    """One cluster's remote data, as every part of the gateway reads it."""

    name: str
    settings: GatewaySettings
    bootstrap_servers: str | None

    @property
    def s3_gets(self) -> int: ...

    @property
    def presigns(self) -> int: ...

    @property
    def caches(self) -> list[LRU[Any, Any]]: ...

    def close(self) -> None: ...

    def wait_for_background_loads(self, timeout_s: float = 30.0) -> bool: ...

    def check(self) -> dict[str, str]:
        """Readiness: each dependency's "ok" or why not (``/readyz``)."""

    # -- partitions
    def topics(self) -> tuple[dict[str, list[int]], bool]:
        """Topic -> sorted partitions with remote data; and whether that list is complete."""

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None: ...

    def coverage_start(self, topic: str, partition: int) -> CoverageStart | None: ...

    def gaps(self, topic: str, partition: int) -> list[Gap]: ...

    def segments(self, topic: str, partition: int) -> list[SegmentEntry]: ...

    def segments_from(self, topic: str, partition: int, offset: int) -> Iterator[SegmentEntry]:
        """The segments by offset from the one holding ``offset`` (or the first after it), read as the
        caller iterates: a walk that stops early costs what it read."""

    def last_stable_offset(self, topic: str, partition: int, info: PartitionInfo | None = None) -> int | None:
        """The partition's remote last stable offset (``tiered_kafka.transactions``); None when unknown."""

    # -- plans and bytes
    def plan(self, topic: str, partition: int, offset: int, max_bytes: int, *, range_bytes: int | None = None) -> Plan: ...

    def read_range(self, key: str, byte_range: ByteRange) -> bytes | memoryview:
        """A planned range's original bytes (the broker's ``.log``), read by the gateway itself (bytes,
        or a read-only memoryview: ``s3_objects.S3Objects.get_range``)."""

    def batches_reaching(self, segment: RemoteSegment | SegmentEntry, timestamp: int) -> Iterator[ByteRange]: ...

    def aborted_txns(self, topic: str, partition: int, segment: RemoteSegment | SegmentEntry) -> list[AbortedTxn]:
        """The segment's aborted transactions (its ``.txnindex``), cached; [] when it has none."""

    # -- paged reads (issue 34): what listings, coverage pages and time lookups ask, each costing what it returns
    def partition_page(self, *, after: tuple[str, int] | None = None, start: int | None = None, limit: int = 1000,
                       topic: str | None = None) -> ListingPage:
        """Partitions with remote data in (topic, partition) order: after the cursor ``after`` or from rank ``start``."""

    def summaries(self, partitions: Sequence[tuple[str, int]]) -> list[PartitionSummary | None]:
        """Each partition's summary (``tiered_kafka.registry.PartitionSummary``); None: no remote data."""

    def segments_page(self, topic: str, partition: int, start: int, count: int) -> list[SegmentEntry]:
        """``count`` segments from the ``start``-th, by offset."""

    def segments_from_time(self, topic: str, partition: int, timestamp: int) -> Iterator[SegmentEntry]:
        """The segments by offset from the first whose ``max_timestamp`` is >= ``timestamp`` (every
        one before it has a smaller max timestamp): Kafka's ListOffsets starts there."""

    def ranges_before_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        """(first_offset, last_offset, size) of the segments before ``segments_from_time``'s first, by offset."""

    def ranges_after_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        """(first_offset, last_offset, size), by offset, of the longest run of last segments whose records
        are all stamped after ``timestamp`` (exact min timestamps above it)."""


class ScansSegments:
    """The paged reads of ``ClusterSource`` over a source's whole lists (``topics``, ``segments``):
    for sources whose catalog is in memory anyway (``rsm_reader.RsmClusterReader``). The registry-backed
    ``remote.ClusterReader`` answers them from the registry's indexes instead."""

    def topics(self) -> tuple[dict[str, list[int]], bool]:
        raise NotImplementedError

    def segments(self, topic: str, partition: int) -> list[SegmentEntry]:
        raise NotImplementedError

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        raise NotImplementedError

    def gaps(self, topic: str, partition: int) -> list[Gap]:
        raise NotImplementedError

    def partition_page(self, *, after: tuple[str, int] | None = None, start: int | None = None, limit: int = 1000,
                       topic: str | None = None) -> ListingPage:
        topics, complete = self.topics()
        everything = sorted(((t, p) for t, ps in topics.items() if topic is None or t == topic for p in ps), key=lambda tp: partition_index_member(*tp))
        if after is not None:
            everything = [tp for tp in everything if partition_index_member(*tp) > partition_index_member(*after)]
        shown = everything[start or 0 :][:limit]
        totals = {t: len(topics.get(t, ())) for t, _ in shown}
        total = sum(len(ps) for t, ps in topics.items() if topic is None or t == topic)
        return ListingPage(shown, shown[-1] if len(shown) == limit else None, total, complete, totals)

    def summaries(self, partitions: Sequence[tuple[str, int]]) -> list[PartitionSummary | None]:
        out: list[PartitionSummary | None] = []
        for topic, partition in partitions:
            info = self.partition_info(topic, partition)
            segments = self.segments(topic, partition) if info is not None else []
            if info is None:
                out.append(None)
                continue
            stamps = [s.max_timestamp for s in segments if s.max_timestamp >= 0]
            oldest = segments[0].min_timestamp if segments and segments[0].min_timestamp >= 0 else None
            records = sum(max(s.records_in_range, 0) for s in segments)
            out.append(PartitionSummary(info, records, oldest, max(stamps, default=None), len(self.gaps(topic, partition)), True))
        return out

    def segments_page(self, topic: str, partition: int, start: int, count: int) -> list[SegmentEntry]:
        return self.segments(topic, partition)[start : start + count]

    def segments_from(self, topic: str, partition: int, offset: int) -> Iterator[SegmentEntry]:
        return (s for s in self.segments(topic, partition) if s.last_offset >= offset)

    def segments_from_time(self, topic: str, partition: int, timestamp: int) -> Iterator[SegmentEntry]:
        segments = self.segments(topic, partition)
        first = next((i for i, s in enumerate(segments) if s.max_timestamp >= timestamp), len(segments))
        return iter(segments[first:])

    def ranges_before_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        out = []
        for s in self.segments(topic, partition):
            if s.max_timestamp >= timestamp:
                break
            out.append((s.first, s.last_offset, s.size))
        return out

    def ranges_after_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        run: list[tuple[int, int, int]] = []
        for s in self.segments(topic, partition):
            run = run + [(s.first, s.last_offset, s.size)] if s.min_timestamp_exact and s.min_timestamp > timestamp else []
        return run


def build_source(name: str, cluster: ClusterSettings, settings: GatewaySettings) -> ClusterSource:
    """The source of a cluster by its ``kind`` (``config``), its clients connected by the kind's
    ``connect`` (the only places that make a Redis or S3 client for the gateway)."""
    if cluster.kind == "kip405":
        from tiered_kafka_gateway.rsm_reader import RsmClusterReader

        return RsmClusterReader.connect(name, cluster, settings)
    from tiered_kafka_gateway.remote import ClusterReader

    return ClusterReader.connect(name, cluster, settings)


def build_sources(settings: GatewaySettings) -> dict[str, ClusterSource]:
    """Every configured cluster's source (``app.create_app``)."""
    return {name: build_source(name, cluster, settings) for name, cluster in settings.clusters.items()}
