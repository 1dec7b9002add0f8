"""The registry's paged reads (layout 2, package doc): summaries, the time index, pages of segments and of
partitions; each costs what it returns. A collaborator of :class:`~tiered_kafka.registry.Registry` (``_client``)
over the same :class:`~tiered_kafka.registry._store.Store`; ``Registry`` hands these calls to it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tiered_kafka.registry._entries import PartitionInfo, PartitionSummary, SegmentEntry
from tiered_kafka.registry._store import READ_ATTEMPTS as _READ_ATTEMPTS, Store, translated as _translated
from tiered_kafka.registry._errors import MalformedRegistryDataError, RegistryValueError
from tiered_kafka.registry._layout import (
    LAYOUT_VERSION,
    PartitionKeys,
    _check_topic_partition,
    _decode_mapping,
    _int_field,
    _text,
    parse_partition_index_member,
    parse_segment_member,
    parse_time_member,
    partition_index_member,
)



_AFTER_PAGE = 16
"""Time index members read at once from the end by ``ranges_after_time`` (growing fourfold a page)."""


def _time_members(members: Sequence[Any], key: str) -> list[tuple[int, int, int, int, int | None]]:
    """Parsed time index members (``parse_time_member``), split without a regex: thousands of them a call."""
    out = []
    for member in members:
        parts = (member.decode() if type(member) is bytes else _text(member)).split(":")
        try:
            if len(parts) == 5 and len(parts[0]) == 20 and len(parts[1]) == 20:
                out.append((int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4])))
            elif len(parts) == 4 and len(parts[0]) == 20 and len(parts[1]) == 20:
                out.append((int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), None))
            else:
                parse_time_member(member, key=key)  # raises, naming the member
        except (ValueError, UnicodeDecodeError):
            parse_time_member(member, key=key)
            raise
    return out


class PagedReads:
    """The paged reads of one cluster's registry (module doc), over its ``store``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def summaries(self, partitions: Sequence[tuple[str, int]]) -> list[PartitionSummary | None]:
        """Each partition's :class:`PartitionSummary` (None: nothing ever registered), in two pipelined
        round trips for all of them: what a listing or coverage page shows, never a segment list.
        A partition not migrated to layout 2 has ``records`` None (module doc, "Layout 2")."""
        if not partitions:
            return []
        all_keys = [self._store.keys(t, p) for t, p in partitions]
        with _translated(f"summaries of {len(partitions)} partitions"):
            pipe = self._store.client.pipeline(transaction=False)
            for keys in all_keys:
                pipe.hgetall(keys.info)
                pipe.zrange(keys.segments, 0, 0)
                pipe.zrange(keys.times, -1, -1, withscores=True)
                pipe.zcard(keys.gaps)
            replies = pipe.execute()
            firsts: list[tuple[PartitionKeys, int] | None] = []
            pipe = self._store.client.pipeline(transaction=False)
            for i, keys in enumerate(all_keys):
                first = replies[4 * i + 1]
                if first:
                    base = parse_segment_member(first[0], key=keys.segments)[0]
                    firsts.append((keys, base))
                    pipe.hmget(keys.segment(base), ["min_timestamp", "max_timestamp", "upload_time_ms"])
                else:
                    firsts.append(None)
            stamps = iter(pipe.execute())
        out: list[PartitionSummary | None] = []
        for i, keys in enumerate(all_keys):
            fields = replies[4 * i]
            if not fields:
                out.append(None)
                if firsts[i] is not None:
                    next(stamps)
                continue
            info = PartitionInfo.from_fields(fields, key=keys.info)
            extra = _decode_mapping(fields, keys.info)
            indexed = extra.get("layout") == LAYOUT_VERSION
            oldest = newest = None
            age_from = -1
            if firsts[i] is not None:
                low, high, uploaded = (None if v is None else int(_text(v)) for v in next(stamps))
                oldest = low if low is not None and low >= 0 else None
                age_from = high if high is not None and high >= 0 else (uploaded if uploaded is not None else -1)
            times = replies[4 * i + 2]
            if indexed and times:
                newest = int(float(times[0][1])) if float(times[0][1]) >= 0 else None
            records = _int_field(extra, "records", keys.info) if indexed and "records" in extra else None
            out.append(PartitionSummary(info, records, oldest, newest, int(replies[4 * i + 3]), indexed, age_from))
        return out

    def summary(self, topic: str, partition: int) -> PartitionSummary | None:
        """:meth:`summaries` of one partition."""
        return self.summaries([(topic, partition)])[0]

    def segment_at_time(self, topic: str, partition: int, timestamp: int) -> SegmentEntry | None:
        """The first segment (by offset) whose ``max_timestamp`` is >= ``timestamp`` (Kafka's
        ListOffsets picks that segment); None when none is. Logarithmic on a layout 2 partition
        (the time index); a partition not migrated yet is read whole."""
        keys = self._store.keys(topic, partition)
        with _translated(f"segment at time {timestamp} of {topic}-{partition}"):
            for _ in range(_READ_ATTEMPTS):
                if _text(self._store.client.hget(keys.info, "layout") or "") != LAYOUT_VERSION:
                    return next((e for e in self._store.segments(topic, partition) if e.max_timestamp >= timestamp), None)
                found = self._store.client.zrangebyscore(keys.times, timestamp, "+inf", start=0, num=1)
                if not found:
                    return None
                member = _text(found[0])[:41]
                entries = self._store.load(topic, partition, keys, [member])
                if entries:
                    return entries[0]
        raise MalformedRegistryDataError("the time index names a segment that is not registered", key=keys.times)

    def ranges_before_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        """(first_offset, last_offset, size) of every segment before :meth:`segment_at_time`'s, by
        offset: each has a ``max_timestamp`` below ``timestamp``. From the time index's members alone
        on a layout 2 partition (no segment hash read); a partition not migrated yet is read whole."""
        keys = self._store.keys(topic, partition)
        with _translated(f"segments before time {timestamp} of {topic}-{partition}"):
            if _text(self._store.client.hget(keys.info, "layout") or "") != LAYOUT_VERSION:
                out = []
                for e in self._store.segments(topic, partition):
                    if e.max_timestamp >= timestamp:
                        break
                    out.append((e.first, e.last_offset, e.size))
                return out
            members = self._store.client.zrangebyscore(keys.times, "-inf", f"({timestamp}")
        return [(first, last, size) for first, last, _, size, _ in _time_members(members, keys.times)]

    def ranges_after_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        """(first_offset, last_offset, size), by offset, of the longest run of the partition's *last*
        segments whose records are all stamped after ``timestamp``: each one's min timestamp is exact
        (``min_timestamp_exact``) and above it. Read from the time index's members backwards from the
        end, in growing pages, up to the first segment not proven newer (members carry the exact min
        timestamp: ``time_member``): it costs the run, never the partition's history. A partition not
        migrated yet is read whole; members written before the min timestamp joined them end the run
        (a shorter answer, never a wrong one)."""
        keys = self._store.keys(topic, partition)
        with _translated(f"segments after time {timestamp} of {topic}-{partition}"):
            if _text(self._store.client.hget(keys.info, "layout") or "") != LAYOUT_VERSION:
                run: list[tuple[int, int, int]] = []
                for e in self._store.segments(topic, partition):
                    run = run + [(e.first, e.last_offset, e.size)] if e.min_timestamp_exact and e.min_timestamp > timestamp else []
                return run
            out: list[tuple[int, int, int]] = []
            start, page = 0, _AFTER_PAGE
            while True:
                members = self._store.client.zrevrange(keys.times, start, start + page - 1)
                for first, last, _, size, min_ts in _time_members(members, keys.times):
                    if out and last >= out[-1][0]:  # a registration at the end shifted the ranks: seen already
                        continue
                    if min_ts is None or min_ts <= timestamp:
                        return out[::-1]
                    out.append((first, last, size))
                if len(members) < page:
                    return out[::-1]
                start, page = start + page, min(page * 4, 4096)

    def segments_page(self, topic: str, partition: int, start: int, count: int) -> list[SegmentEntry]:
        """``count`` segments from the ``start``-th (by first offset, from 0): a page of a long
        partition without reading the rest (ZRANGE by rank)."""
        if start < 0 or count < 0:
            raise RegistryValueError(f"start and count must be >= 0, got {start!r}, {count!r}")
        if count == 0:
            return []
        keys = self._store.keys(topic, partition)
        with _translated(f"segments {start}.. of {topic}-{partition}"):
            for _ in range(_READ_ATTEMPTS):
                entries = self._store.load(topic, partition, keys, self._store.client.zrange(keys.segments, start, start + count - 1))
                if entries is not None:
                    return entries
        raise MalformedRegistryDataError("segments listed without their hashes", key=keys.segments)

    def partition_count(self, topic: str | None = None) -> int:
        """How many partitions the partition index lists (of ``topic``, when given); a registry not
        migrated yet (no index) counts its partitions SET."""
        with _translated(f"partition count of {self._store.cluster}"):
            if topic is None:
                count = int(self._store.client.zcard(self._store.partition_index_key))
            else:
                low, high = _topic_bounds(topic)
                count = int(self._store.client.zlexcount(self._store.partition_index_key, low, high))
            if count or self._store.client.exists(self._store.partition_index_key):
                return count
        return sum(1 for t, _ in self._store.partitions() if topic is None or t == topic)

    def listed(self, partitions: Sequence[tuple[str, int]]) -> list[bool]:
        """Whether the partition index lists each partition (pipelined ZSCOREs, 1,000 a round trip)."""
        out: list[bool] = []
        with _translated(f"listed partitions of {self._store.cluster}"):
            for start in range(0, len(partitions), 1000):
                pipe = self._store.client.pipeline(transaction=False)
                for topic, partition in partitions[start : start + 1000]:
                    pipe.zscore(self._store.partition_index_key, partition_index_member(topic, partition))
                out += [score is not None for score in pipe.execute()]
        return out

    def partitions_page(self, *, after: tuple[str, int] | None = None, start: int | None = None, limit: int = 1000,
                        topic: str | None = None) -> list[tuple[str, int]]:
        """Up to ``limit`` partitions in (topic, partition) order from the partition index: those
        after ``after`` (a cursor: the last one of the previous page) or from rank ``start``,
        optionally of one ``topic``. Costs the page, not the cluster (module doc, "Listings"). A
        registry not migrated yet (no index) is read whole from its partitions SET."""
        if limit < 1:
            raise RegistryValueError(f"limit must be >= 1, got {limit!r}")
        low, high = ("-", "+") if topic is None else _topic_bounds(topic)
        if after is not None:
            cursor = "(" + partition_index_member(*after)
            low = cursor if low == "-" or cursor > low else low
        with _translated(f"partitions of {self._store.cluster}"):
            if not self._store.client.exists(self._store.partition_index_key):
                everything = [tp for tp in self._store.partitions() if topic is None or tp[0] == topic]
                everything.sort(key=lambda tp: partition_index_member(*tp))
                if after is not None:
                    everything = [tp for tp in everything if partition_index_member(*tp) > partition_index_member(*after)]
                return everything[start or 0 :][:limit]
            members = self._store.client.zrangebylex(self._store.partition_index_key, low, high, start=start or 0, num=limit)
        return [parse_partition_index_member(m, key=self._store.partition_index_key) for m in members]



def _topic_bounds(topic: str) -> tuple[str, str]:
    """ZRANGEBYLEX bounds of one topic's partition index members (``"{topic} {partition:010d}"``)."""
    _check_topic_partition(topic, 0)
    return f"[{topic} ", f"({topic}!"


