"""What the coverage pages show, gathered from a cluster's reader: the one data module of the UI.

It calls only what the ``/v1`` JSON routes call (``routes.partitions``): ``topics``,
``partition_info``, ``coverage_start``, ``gaps`` and ``segments`` of the cluster's
``sources.ClusterSource``, and ``kafka_offsets.watermarks`` for Kafka's range, so re-pointing the
pages at another source of partitions is a change here only.

Cost, per partition shown: four registry reads (extent, coverage start, gaps, segments: one
pipelined read of every segment's entry) and, when the cluster has ``bootstrap_servers``, one
ListOffsets round trip through the gateway's Kafka pool (whose ``kafka.max_concurrency`` bounds
them). A page's partitions are read by ``LOAD_THREADS`` threads, so their round trips overlap (a
Redis or a broker across a network costs latency, not CPU). Pages are therefore bounded by partitions,
not topics (``OVERVIEW_PAGE_PARTITIONS``, ``TOPIC_PAGE_PARTITIONS``): a page costs the same on a
cluster of 100 or of 10,000 partitions. A partition with many thousands of segments costs more
(its segments are read whole: the reader has no paged read); the segment table pages what it
renders (``SEGMENT_PAGE_ROWS``).

Kafka's answer for a partition is shown whatever it is: its range, or why there is none (the
topic is unknown to Kafka, Kafka is unavailable), never an empty cell that reads as "no data".
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tiered_kafka.registry import CoverageStart, Gap, PartitionInfo, SegmentEntry
from tiered_kafka_gateway import kafka_offsets
from tiered_kafka_gateway.deps import Access
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, answer_for
from tiered_kafka_gateway.sources import ClusterSource

OVERVIEW_PAGE_PARTITIONS = 200
TOPIC_PAGE_PARTITIONS = 100
SEGMENT_PAGE_ROWS = 100
LOAD_THREADS = 8


@dataclass(frozen=True)
class PartitionView:
    """One partition as the pages show it (``kafka`` is (log start offset, high watermark))."""

    topic: str
    partition: int
    info: PartitionInfo | None
    coverage: CoverageStart | None
    gaps: list[Gap]
    segments: list[SegmentEntry]
    kafka: tuple[int, int] | None = None
    kafka_error: str | None = None

    @property
    def remote(self) -> tuple[int, int] | None:
        """Remote storage's (earliest, latest) offsets; None when it holds nothing."""
        if self.info is None or self.info.is_empty:
            return None
        return self.info.earliest_offset, self.info.latest_offset

    @property
    def records(self) -> int:
        """Records in the registered ranges (segments whose count is unknown count 0)."""
        return sum(max(s.records_in_range, 0) for s in self.segments)

    @property
    def oldest_timestamp(self) -> int | None:
        stamps = [s.min_timestamp for s in self.segments if s.min_timestamp >= 0]
        return min(stamps, default=None)

    @property
    def upload_lag(self) -> int | None:
        """Offsets Kafka holds past the last registered one (its high watermark minus the next
        offset to register, or minus its log start when nothing is registered); None without Kafka."""
        if self.kafka is None:
            return None
        low, high = self.kafka
        registered_next = low if self.remote is None else self.remote[1] + 1
        return max(high - max(registered_next, low), 0)


@dataclass
class TopicRow:
    """The overview's row: one topic's partitions on the page (all of them unless ``partial``)."""

    topic: str
    partitions_total: int
    views: list[PartitionView] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return len(self.views) < self.partitions_total


@dataclass(frozen=True)
class Page:
    """A page of a list: its number (from 0), the page count, and the items on it."""

    number: int
    count: int
    total_items: int


def visible_topics(reader: ClusterSource, caller: Access) -> tuple[dict[str, list[int]], bool]:
    """Topic -> partitions with remote data that the caller may read; and whether the listing is complete."""
    topics, complete = reader.topics()
    return {t: ps for t, ps in sorted(topics.items()) if caller.allows(t)}, complete


def page_of(total: int, size: int, number: int) -> Page:
    count = max((total + size - 1) // size, 1)
    if not 0 <= number < count:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"page {number} does not exist: there are {count} (from 0)")
    return Page(number, count, total)


def overview(reader: ClusterSource, caller: Access, number: int, *, with_kafka: bool = True) -> tuple[list[TopicRow], Page, bool]:
    """The overview's rows for page ``number``: the caller's (topic, partition)s in order, cut into
    pages of ``OVERVIEW_PAGE_PARTITIONS``; a topic cut by a page edge is a partial row."""
    topics, complete = visible_topics(reader, caller)
    flat = [(t, p) for t, ps in topics.items() for p in ps]
    page = page_of(len(flat), OVERVIEW_PAGE_PARTITIONS, number)
    rows: dict[str, TopicRow] = {}
    for view in partition_views(reader, flat[number * OVERVIEW_PAGE_PARTITIONS : (number + 1) * OVERVIEW_PAGE_PARTITIONS], with_kafka=with_kafka):
        rows.setdefault(view.topic, TopicRow(view.topic, len(topics[view.topic]))).views.append(view)
    return list(rows.values()), page, complete


def topic_partitions(reader: ClusterSource, topic: str, number: int) -> tuple[list[PartitionView], Page]:
    """Page ``number`` of the topic's partitions (``TOPIC_PAGE_PARTITIONS`` a page); the caller's
    access to the topic is checked by the route (``deps.Topic``)."""
    topics, _ = reader.topics()
    partitions = topics.get(topic)
    if not partitions:
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for topic {topic} in cluster {reader.name}")
    page = page_of(len(partitions), TOPIC_PAGE_PARTITIONS, number)
    shown = partitions[number * TOPIC_PAGE_PARTITIONS : (number + 1) * TOPIC_PAGE_PARTITIONS]
    return partition_views(reader, [(topic, p) for p in shown]), page


def partition_views(reader: ClusterSource, partitions: Sequence[tuple[str, int]], *, with_kafka: bool = True) -> list[PartitionView]:
    """``partition_view`` of each, in order, read by ``LOAD_THREADS`` threads (the first error is raised)."""
    if len(partitions) <= 1:
        return [partition_view(reader, t, p, with_kafka=with_kafka) for t, p in partitions]
    with ThreadPoolExecutor(min(LOAD_THREADS, len(partitions)), thread_name_prefix="ui-load") as pool:
        return list(pool.map(lambda tp: partition_view(reader, *tp, with_kafka=with_kafka), partitions))


def partition_view(reader: ClusterSource, topic: str, partition: int, *, with_kafka: bool = True) -> PartitionView:
    """What is known of one partition: remote extent, coverage start, gaps, segments, Kafka's range."""
    kafka, kafka_error = kafka_range(reader, topic, partition) if with_kafka else (None, None)
    return PartitionView(
        topic,
        partition,
        reader.partition_info(topic, partition),
        reader.coverage_start(topic, partition),
        reader.gaps(topic, partition),
        reader.segments(topic, partition),
        kafka,
        kafka_error,
    )


def kafka_range(reader: ClusterSource, topic: str, partition: int) -> tuple[tuple[int, int] | None, str | None]:
    """Kafka's (log start offset, high watermark), or why there is none (module docstring)."""
    if not reader.bootstrap_servers:
        return None, None
    try:
        return kafka_offsets.watermarks(reader, topic, partition), None
    except GatewayError as err:
        return None, f"{err.error.code}: {answer_for(err)[1]}"  # type: ignore[index]  # a dependency's text stays in the log (errors module doc)


def segment_page(segments: Sequence[SegmentEntry], number: int, rows: int = SEGMENT_PAGE_ROWS) -> tuple[Sequence[SegmentEntry], Page]:
    """Page ``number`` of ``rows`` segments."""
    page = page_of(len(segments), rows, number)
    return segments[number * rows : (number + 1) * rows], page
