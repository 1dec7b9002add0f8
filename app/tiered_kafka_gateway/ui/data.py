"""What the coverage pages show, gathered from a cluster's reader: the one data module of the UI.

It calls only what the ``/v1`` JSON routes call (``routes.partitions``) and the paged reads of the
cluster's ``sources.ClusterSource``: ``partition_page`` (a page of the partition listing, by rank),
``summaries`` (each partition's extent, records, oldest timestamp: two pipelined registry round trips
for a page), ``coverage_start``, ``gaps``, ``segments_page`` and ``kafka_offsets.watermarks`` for
Kafka's range, so re-pointing the pages at another source of partitions is a change here only.

Cost (issue 34): a page costs what it shows, the same at 1 or 2,000 segments per partition and at
1,000 or 100,000 partitions. Per partition shown: its summary, coverage start and gaps, its segments
only when it has at most ``SEGMENTS_DRAWN`` (drawn one by one; a longer partition is drawn as runs
of its extent between its recorded gaps, from the summary), and, when the cluster has
``bootstrap_servers``, one ListOffsets round trip through the gateway's Kafka pool (whose
``kafka.max_concurrency`` bounds them). A page's partitions are read by ``LOAD_THREADS`` threads.
Pages hold ``OVERVIEW_PAGE_PARTITIONS`` / ``TOPIC_PAGE_PARTITIONS`` partitions of the listing, read
by rank; topics a token may not read are left off the page (so a page may show fewer rows), and the
count shown is the listing's. A partition's segment table reads its page only (``segments_page``).
A partition of a registry not migrated to layout 2 has no records summary: its segments are read
whole, as before (``tiered-kafka-agent migrate-registry``).

Kafka's answer for a partition is shown whatever it is: its range, or why there is none (the
topic is unknown to Kafka, Kafka is unavailable), never an empty cell that reads as "no data".
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tiered_kafka.registry import CoverageStart, Gap, PartitionInfo, PartitionSummary, SegmentEntry
from tiered_kafka_gateway import kafka_offsets
from tiered_kafka_gateway.deps import Access
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, answer_for
from tiered_kafka_gateway.sources import ClusterSource

OVERVIEW_PAGE_PARTITIONS = 200
TOPIC_PAGE_PARTITIONS = 100
SEGMENT_PAGE_ROWS = 100
LOAD_THREADS = 8
SEGMENTS_DRAWN = 20


@dataclass(frozen=True)
class PartitionView:
    """One partition as the pages show it (``kafka`` is (log start offset, high watermark));
    ``segments``: all of them when there are at most ``SEGMENTS_DRAWN`` (or no summary), else none."""

    topic: str
    partition: int
    info: PartitionInfo | None
    coverage: CoverageStart | None
    gaps: list[Gap]
    segments: list[SegmentEntry]
    kafka: tuple[int, int] | None = None
    kafka_error: str | None = None
    summary: PartitionSummary | None = None

    @property
    def remote(self) -> tuple[int, int] | None:
        """Remote storage's (earliest, latest) offsets; None when it holds nothing."""
        if self.info is None or self.info.is_empty:
            return None
        return self.info.earliest_offset, self.info.latest_offset

    @property
    def segment_count(self) -> int:
        return self.info.segment_count if self.info is not None else len(self.segments)

    @property
    def all_segments(self) -> bool:
        """Whether ``segments`` holds every segment (else the bars draw runs from the summary)."""
        return len(self.segments) >= self.segment_count

    @property
    def records(self) -> int:
        """Records in the registered ranges (segments whose count is unknown count 0)."""
        if self.summary is not None and self.summary.records is not None:
            return self.summary.records
        return sum(max(s.records_in_range, 0) for s in self.segments)

    @property
    def oldest_timestamp(self) -> int | None:
        if self.summary is not None and not self.all_segments:
            return self.summary.oldest_timestamp
        stamps = [s.min_timestamp for s in self.segments if s.min_timestamp >= 0]
        return min(stamps, default=None)

    def runs(self) -> list[tuple[int, int]]:
        """The remote extent cut at the recorded gaps: what a bar draws for a partition whose
        segments are not read (offsets inclusive)."""
        if self.remote is None:
            return []
        out, start = [], self.remote[0]
        for g in sorted(self.gaps, key=lambda g: g.start_offset):
            if g.end_offset < start or g.start_offset > self.remote[1]:
                continue
            if g.start_offset > start:
                out.append((start, g.start_offset - 1))
            start = g.end_offset + 1
        if start <= self.remote[1]:
            out.append((start, self.remote[1]))
        return out

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


def page_of(total: int, size: int, number: int) -> Page:
    count = max((total + size - 1) // size, 1)
    if not 0 <= number < count:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"page {number} does not exist: there are {count} (from 0)")
    return Page(number, count, total)


def overview(reader: ClusterSource, caller: Access, number: int, *, with_kafka: bool = True) -> tuple[list[TopicRow], Page, bool]:
    """The overview's rows for page ``number``: the cluster's (topic, partition)s in order, cut into
    pages of ``OVERVIEW_PAGE_PARTITIONS`` (those of topics the caller may not read left off); a
    topic cut by a page edge is a partial row."""
    if number < 0:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"page {number} does not exist")
    listing = reader.partition_page(start=number * OVERVIEW_PAGE_PARTITIONS, limit=OVERVIEW_PAGE_PARTITIONS)
    page = page_of(listing.total, OVERVIEW_PAGE_PARTITIONS, number)
    rows: dict[str, TopicRow] = {}
    visible = [(t, p) for t, p in listing.partitions if caller.allows(t)]
    for view in partition_views(reader, visible, with_kafka=with_kafka):
        rows.setdefault(view.topic, TopicRow(view.topic, listing.topic_totals.get(view.topic, 0))).views.append(view)
    return list(rows.values()), page, listing.complete


def topic_partitions(reader: ClusterSource, topic: str, number: int) -> tuple[list[PartitionView], Page]:
    """Page ``number`` of the topic's partitions (``TOPIC_PAGE_PARTITIONS`` a page); the caller's
    access to the topic is checked by the route (``deps.Topic``)."""
    if number < 0:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"page {number} does not exist")
    listing = reader.partition_page(start=number * TOPIC_PAGE_PARTITIONS, limit=TOPIC_PAGE_PARTITIONS, topic=topic)
    if not listing.total:
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for topic {topic} in cluster {reader.name}")
    page = page_of(listing.total, TOPIC_PAGE_PARTITIONS, number)
    return partition_views(reader, listing.partitions), page


def partition_views(reader: ClusterSource, partitions: Sequence[tuple[str, int]], *, with_kafka: bool = True) -> list[PartitionView]:
    """``partition_view`` of each, in order: their summaries in one call, the rest read by
    ``LOAD_THREADS`` threads (the first error is raised)."""
    summaries = reader.summaries(partitions) if partitions else []
    if len(partitions) <= 1:
        return [partition_view(reader, t, p, with_kafka=with_kafka, summary=s) for (t, p), s in zip(partitions, summaries, strict=True)]
    with ThreadPoolExecutor(min(LOAD_THREADS, len(partitions)), thread_name_prefix="ui-load") as pool:
        return list(pool.map(lambda item: partition_view(reader, *item[0], with_kafka=with_kafka, summary=item[1]), zip(partitions, summaries, strict=True)))


def partition_view(reader: ClusterSource, topic: str, partition: int, *, with_kafka: bool = True, summary: PartitionSummary | None = None) -> PartitionView:
    """What is known of one partition: remote extent, coverage start, gaps, Kafka's range, and its
    segments when few (module doc)."""
    if summary is None:
        summary = reader.summaries([(topic, partition)])[0]
    kafka, kafka_error = kafka_range(reader, topic, partition) if with_kafka else (None, None)
    info = summary.info if summary is not None else None
    few = summary is None or summary.records is None or summary.info.segment_count <= SEGMENTS_DRAWN
    segments = reader.segments(topic, partition) if few else []
    return PartitionView(
        topic,
        partition,
        info if info is not None else reader.partition_info(topic, partition),
        reader.coverage_start(topic, partition),
        reader.gaps(topic, partition),
        segments,
        kafka,
        kafka_error,
        summary,
    )


def kafka_range(reader: ClusterSource, topic: str, partition: int) -> tuple[tuple[int, int] | None, str | None]:
    """Kafka's (log start offset, high watermark), or why there is none (module docstring)."""
    if not reader.bootstrap_servers:
        return None, None
    try:
        return kafka_offsets.watermarks(reader, topic, partition), None
    except GatewayError as err:
        return None, f"{err.error.code}: {answer_for(err)[1]}"  # type: ignore[index]  # a dependency's text stays in the log (errors module doc)


def segment_page(reader: ClusterSource, view: PartitionView, number: int, rows: int = SEGMENT_PAGE_ROWS) -> tuple[Sequence[SegmentEntry], Page]:
    """Page ``number`` of ``rows`` segments of the partition (only that page is read)."""
    page = page_of(view.segment_count, rows, number)
    if view.all_segments:
        return view.segments[number * rows : (number + 1) * rows], page
    return reader.segments_page(view.topic, view.partition, number * rows, rows), page
