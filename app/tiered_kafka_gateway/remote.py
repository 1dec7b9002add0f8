"""One cluster's remote storage as the gateway reads it: registry, segment objects, caches.

Segments come from the Redis registry (``tiered_kafka.registry``). A partition the registry does
not know — a bucket written by Pinterest's uploader — is found by listing its S3 prefix (cached
for ``cache.listing_ttl_s``); its last offset comes from the next segment's base or, for the
newest, from the batch headers after the ``.index``'s last entry. Whether Kafka still knows the
topic plays no part: remote data is served as long as it is remote.

Topics (``topics``, ``partition_page``) are those of the registry's partition index and those found
by listing the cluster's ``{topic}-{partition}/`` directories in S3 (``s3_listing``: bounded),
refreshed in the background every ``cache.listing_ttl_s`` (``partition_listing``: a request reads a
page, never the whole cluster); a listing cut short by a bound says so (``complete``). Coverage pages
read ``summaries`` and ``segments_page``, offsets-for-timestamp ``segments_from_time`` (the
registry's time index): each costs what it returns (issue 34).

An offset below the partition's coverage start (``Registry.coverage_start``: the log start the
agent first observed) that remote storage does not hold is answered 416 ``offset_out_of_range``
with ``coverage_start_offset`` (``errors`` module docstring), not like an offset remote retention
removed.

Plans are computed by ``tiered_kafka.read_plan``. A segment whose registry entry lists a
``batchindex`` file (``tiered_kafka.format.batch_index``, uploaded by the agent or backfilled) is
planned from it in memory once it is cached (bounded by bytes: ``cache.batch_index_bytes``), with
no ``.index`` or header read; offsets-for-timestamp use it too (``batches_reaching``). The first
plan of a segment fetches it (one GET: the registry's layout 2 keeps no sparse index, issue 34,
``tiered_kafka.registry``), and its sparse digest (``tiered_kafka.format.sparse_index``, 8 KiB per
GiB) is kept in ``cache.sparse_index_bytes`` when the batch index is evicted. A segment whose
batch index is not cached but whose sparse index is — derived before, or carried by an entry
written before layout 2 — is planned from that at once, with no S3 request
(``read_plan.plan_from_sparse_index``: the first range may start up to one interval before the
offset's batch, and still holds it). Unless that plan is the exact one — asked at a kept start
(a sequential reader: its ranges end on kept starts), no range larger than the ``range_bytes``
asked, reaching the segment's end (else the batch index would fill ``max_bytes`` closer: a plan
from kept starts ends up to one interval short) — the batch index is then fetched in the
background (``caches.BackgroundLoads``) for the exact plans that follow: one GET per segment, off
the request path.
A plan smaller than the sparse span holding its offset, offsets-for-timestamp, or an entry without
the field fetch the batch index first (one GET). Other segments — Pinterest-layout buckets, uploads from before the batch
index — are planned from the ``.index`` (cached, bounded) and batch headers read in windows by
ranged GETs (cached per segment, bounded). Either way a repeated plan costs one registry lookup
and a presign per range, no S3 request. ``s3_gets_by_kind`` counts GETs by file kind.

**Bounds** (issue 29). A plan presigns at most ``max_ranges_per_plan`` ranges (setting, default
1024): a small ``range_bytes`` with a large ``max_bytes`` is answered with
the first ones and ``next_offset`` after the last, where the next plan continues (decision: what
fits, not a 400; a reader already loops on ``next_offset``). A partition's segment list (``segments``:
``/time-ranges``, ``/offsets``) is cached by its registry extent (``PartitionInfo``, one HGETALL per
call: a registration or deletion changes it), bounded by bytes, so a repeated call does not load
every segment again.

**Trust no store**: a segment's ``object_key`` comes from Redis; before it is read or presigned it
must be a ``.log`` key of that very partition in this cluster's keyspace (``tiered_kafka.keyspace``:
``Keyspace.parse`` names the same topic and partition). One function checks it (``_trusted``), applied
to every entry every lookup returns (``segment_for``, ``segments`` with or without the partition's
``info`` hash, ``aborted_txns``), so ``/plan``, ``/records``, ``/offsets``, read_committed's
aborted-transaction lookup and the coverage pages all pass it (issue 36). Anything else is 500
``corrupt_registry_data`` naming the partition and the segment's first offset; the key itself,
which could be hostile, is logged (repr, cut at 200 characters), never put in the body.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import redis

from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.format import txn_index
from tiered_kafka.format.batch_index import BatchIndex
from tiered_kafka.format.checkpoints import parse_offset_wm
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.segment_names import FileKind, Suffix
from tiered_kafka.format.sparse_index import SparseIndex
from tiered_kafka.format.time_index import TimeIndex
from tiered_kafka.format.txn_index import AbortedTxn
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.read_plan import (
    BatchHeaders,
    ByteRange,
    plan_from_batch_index,
    plan_from_sparse_index,
    plan_ranges,
    sparse_plan_fits,
)
from tiered_kafka.registry import MAX_OFFSET, CoverageStart, Gap, MalformedRegistryDataError, PartitionInfo, PartitionSummary, Registry, SegmentEntry, connect
from tiered_kafka.transactions import remote_last_stable_offset
from tiered_kafka_gateway.plans import Plan, max_ranges_per_plan, out_of_range  # max_ranges_per_plan: re-exported (routes)
from tiered_kafka_gateway.caches import LRU, BackgroundLoads, RecentSegments, RemoteSegment
from tiered_kafka_gateway.config import ClusterSettings, GatewaySettings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, about, hidden_failure
from tiered_kafka_gateway.partition_listing import ListingPage, PartitionLister, topic_map
from tiered_kafka_gateway.s3_listing import list_partitions
from tiered_kafka_gateway.s3_objects import CountsS3, S3Objects
from tiered_kafka_gateway.segment_indexes import SegmentIndexes, last_offset_in

log = logging.getLogger(__name__)
TIME_PAGE = 16
"""Segments read at once after the one the time index found (``segments_from_time``): most answers need one."""


class ClusterReader(SegmentIndexes, CountsS3):
    """A ``sources.ClusterSource`` over our agent's layout: the Redis registry (``registry``) and the
    segment objects (``objects``), both handed in (``sources.build_source`` connects them)."""

    def __init__(
        self, name: str, settings: GatewaySettings, *, registry: Registry, objects: S3Objects, keyspace: Keyspace, bootstrap_servers: str | None = None
    ) -> None:
        self.name = name
        self.settings = settings
        self.registry = registry
        self.redis = registry.client
        self.objects = objects
        self.s3 = objects.client
        self.bucket = objects.bucket
        self.keyspace = keyspace
        self.bootstrap_servers = bootstrap_servers
        cache = settings.cache  # every cache bounded by bytes (caches module docstring); weights are estimates
        self.indexes: LRU[str, OffsetIndex | TimeIndex] = LRU("index", cache.index_bytes, lambda index: 64 + 80 * len(index))
        self.headers: LRU[str, BatchHeaders] = LRU("headers", cache.header_bytes, lambda headers: headers.nbytes)
        self.batch_indexes: LRU[str, BatchIndex] = LRU("batch_index", cache.batch_index_bytes, lambda index: index.nbytes)
        self.sparse_indexes: LRU[str, SparseIndex | None] = LRU("sparse_index", cache.sparse_index_bytes, lambda i: 0 if i is None else i.nbytes)
        self.txn_indexes: LRU[str, list[AbortedTxn]] = LRU("txn_index", cache.txn_index_bytes, lambda txns: 64 + 120 * len(txns))
        # S3 listings by partition, found or not (caller input: bounded like the rest)
        self._listings: LRU[tuple[str, int], list[RemoteSegment]] = LRU(
            "listing", cache.listing_bytes, lambda segments: 64 + sum(s.nbytes for s in segments), ttl_s=cache.listing_ttl_s
        )
        self._loads = BackgroundLoads()
        self.lister = PartitionLister(registry, lambda: list_partitions(self.s3, self.bucket, self.keyspace), cache.listing_ttl_s, self._loads, name)
        self._recent_segments = RecentSegments(cache.segment_ttl_s, cache.segment_bytes // 2)
        # (topic, partition, latest offset) -> the last segment's (last offset, open_txn_first_offset)
        self._last_entries: LRU[tuple[str, int, int], tuple[int, int] | None] = LRU("last_entry", cache.segment_bytes // 4, lambda found: 64)
        # (topic, partition, its PartitionInfo) -> its registered segments (module doc, "Bounds")
        self._segment_lists: LRU[tuple[str, int, PartitionInfo], list[SegmentEntry]] = LRU(
            "segment_list", cache.segment_bytes // 4, lambda entries: 64 + sum(300 + 2 * len(e.object_key) + len(e.sparse_index or b"") for e in entries)
        )

    @classmethod
    def connect(cls, name: str, cluster: ClusterSettings, settings: GatewaySettings) -> ClusterReader:
        """The reader of a kind "agent" cluster with its Redis and S3 clients connected (``sources.build_source``)."""
        s3 = cluster.s3
        if s3 is None or cluster.redis_url is None:  # config: a kind "agent" cluster has both (kip405: rsm_reader)
            raise ValueError(f"cluster {name} has no redis_url and s3 section")
        timeout = settings.timeouts.redis_s
        client = connect(cluster.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout, max_connections=64)
        return cls(name, settings, registry=Registry(client, name), objects=S3Objects.connect(s3, s3.bucket, settings),
                   keyspace=Keyspace(s3.prefix, name, s3.entropy_bits), bootstrap_servers=cluster.bootstrap_servers)

    def close(self) -> None:
        """Release what this reader holds (the app's shutdown, ``app.lifespan``): the background
        loads' threads, the Redis connection pool and the S3 client's HTTP connections."""
        self._loads.close()
        self.redis.close()  # from_url's Redis and RedisCluster both disconnect every pooled connection, idle or not
        self.objects.close()

    def wait_for_background_loads(self, timeout_s: float = 30.0) -> bool:
        """Block until the batch indexes fetched in the background have landed (tests, benchmarks)."""
        return self._loads.wait_idle(timeout_s)

    @property
    def caches(self) -> list[LRU[Any, Any]]:
        """Every cache of this reader (for ``/metrics``)."""
        return [self.indexes, self.headers, self.batch_indexes, self.sparse_indexes, self.txn_indexes, self._listings,
                self._recent_segments.cache, self._last_entries, self._segment_lists]

    def _get(self, key: str, byte_range: str | None = None) -> bytes:
        return self.objects.get(key, byte_range)

    # -- partitions ------------------------------------------------------------------------
    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.registry.partition_info(topic, partition)
        if info is not None:
            return info
        listed = self._listed(topic, partition)
        if not listed:
            return None
        return PartitionInfo(listed[0].base_offset, listed[-1].last_offset, len(listed), sum(s.size for s in listed), 0)

    def topics(self) -> tuple[dict[str, list[int]], bool]:
        """Topic -> sorted partitions with remote data (registry and S3 listing); and whether the
        listing is complete (False: a bound of the module docstring cut it short). The whole
        cluster, page by page: requests ask ``partition_page``."""
        out: list[tuple[str, int]] = []
        after: tuple[str, int] | None = None
        while True:
            page = self.lister.page(after=after, limit=10_000)
            out += page.partitions
            if page.next_after is None:
                return topic_map(out), page.complete
            after = page.next_after

    def partition_page(self, *, after: tuple[str, int] | None = None, start: int | None = None, limit: int = 1000,
                       topic: str | None = None) -> ListingPage:
        """A page of the partitions with remote data (``partition_listing``: the registry's index and
        the S3 listing refreshed off the request path)."""
        return self.lister.page(after=after, start=start, limit=limit, topic=topic)

    def summaries(self, partitions: Sequence[tuple[str, int]]) -> list[PartitionSummary | None]:
        """The registry's summaries (two pipelined round trips for the lot); a partition only S3
        knows (Pinterest's layout) is summarised from its cached listing."""
        out = self.registry.summaries(partitions)
        for i, (topic, partition) in enumerate(partitions):
            if out[i] is None:
                listed = self._listed(topic, partition)
                if listed:
                    info = PartitionInfo(listed[0].base_offset, listed[-1].last_offset, len(listed), sum(s.size for s in listed), 0)
                    out[i] = PartitionSummary(info, None, None, max((s.max_timestamp for s in listed if s.max_timestamp >= 0), default=None), 0, False)
        return out

    def segments_page(self, topic: str, partition: int, start: int, count: int) -> list[SegmentEntry]:
        """A page of the registered segments, every entry's key checked (``_trusted``)."""
        return [self._trusted(topic, partition, e) for e in self.registry.segments_page(topic, partition, start, count)]

    def segments_from_time(self, topic: str, partition: int, timestamp: int) -> Iterator[SegmentEntry]:
        """The registered segments from the first whose max timestamp reaches ``timestamp``: found by
        the registry's time index (logarithmic), then read on in pages (``TIME_PAGE``, growing) as the
        caller iterates; keys checked."""
        entry = self.registry.segment_at_time(topic, partition, timestamp)
        if entry is None:
            return
        yield self._trusted(topic, partition, entry)
        yield from self._pages_from(topic, partition, entry.last_offset + 1)

    def segments_from(self, topic: str, partition: int, offset: int) -> Iterator[SegmentEntry]:
        """The registered segments from the one holding ``offset`` (or the first after it), read in
        growing pages (``TIME_PAGE`` first) as the caller iterates; keys checked."""
        yield from self._pages_from(topic, partition, offset)

    def _pages_from(self, topic: str, partition: int, offset: int) -> Iterator[SegmentEntry]:
        page = TIME_PAGE
        while True:
            following = self.registry.segments(topic, partition, from_offset=offset, limit=page)
            for entry in following:
                yield self._trusted(topic, partition, entry)
                offset = entry.last_offset + 1
            if len(following) < page:
                return
            page = min(page * 4, 4096)

    def ranges_before_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        """The registry's time index members before the segment reaching ``timestamp`` (no entry read)."""
        return self.registry.ranges_before_time(topic, partition, timestamp)

    def ranges_after_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        """The registry's time index members of the last segments all newer than ``timestamp`` (no entry read)."""
        return self.registry.ranges_after_time(topic, partition, timestamp)

    def coverage_start(self, topic: str, partition: int) -> CoverageStart | None:
        return self.registry.coverage_start(topic, partition)

    def gaps(self, topic: str, partition: int) -> list[Gap]:
        return self.registry.gaps(topic, partition)

    def last_stable_offset(self, topic: str, partition: int, info: PartitionInfo | None = None) -> int | None:
        """The partition's remote last stable offset (``tiered_kafka.transactions.remote_last_stable_offset``,
        from its last registered segment; ``info``: its extent, when already read); None when
        unknown: no registry entry (a Pinterest-layout bucket) or one that does not know."""
        if info is None:
            info = self.partition_info(topic, partition)
        if info is None or info.is_empty:
            return None

        def load() -> tuple[int, int] | None:
            entry = self.registry.find(topic, partition, info.latest_offset)
            return None if entry is None else (entry.last_offset, entry.open_txn_first_offset)

        found = self._last_entries.get_or_load((topic, partition, info.latest_offset), load)
        return None if found is None else remote_last_stable_offset(*found)

    def segments(self, topic: str, partition: int) -> list[SegmentEntry]:
        """The registered segments, cached by the partition's extent (module doc, "Bounds"), every
        entry's key checked (``_trusted``), with or without an ``info`` hash to cache by."""
        info = self.registry.partition_info(topic, partition)

        def load() -> list[SegmentEntry]:
            return [self._trusted(topic, partition, e) for e in self.registry.segments(topic, partition)]

        if info is None:  # nothing to cache by (an info hash deleted, or never written): checked all the same
            return load()

        return self._segment_lists.get_or_load((topic, partition, info), load)

    def _trusted(self, topic: str, partition: int, entry: SegmentEntry) -> SegmentEntry:
        """``entry``, once its object key is a ``.log`` of this partition in the keyspace (module doc)."""
        try:
            parsed = self.keyspace.parse(entry.object_key)
            ok = (parsed.topic, parsed.partition) == (topic, partition) and parsed.segment is not None and parsed.segment.kind == FileKind.LOG
        except InvalidSegmentNameError:
            ok = False
        if not ok:
            log.error("cluster %s: the registry entry of %s-%s segment %d names object %.200r, outside the partition's prefix %s",
                      self.name, topic, partition, entry.first, entry.object_key, self.keyspace.partition_prefix(topic, partition))
            raise MalformedRegistryDataError(
                f"segment {entry.first} of {topic}-{partition}: its object_key is not a .log of the partition's prefix "
                f"{self.keyspace.partition_prefix(topic, partition)} (the key is in the gateway log)"
            )
        return entry

    def segment_for(self, topic: str, partition: int, offset: int) -> tuple[RemoteSegment, Gap | None]:
        """The segment holding ``offset``; in a gap, the next segment and the gap."""
        if offset > MAX_OFFSET:  # beyond what the registry can store: never remote
            info = self.partition_info(topic, partition)
            if info is None or info.is_empty:
                raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for {topic}-{partition} in cluster {self.name}")
            raise out_of_range(topic, partition, offset, info.earliest_offset, info.latest_offset)
        cached = self._recent_segments.find(topic, partition, offset)
        if cached is not None:
            return cached, None
        entry = self.registry.find(topic, partition, offset)
        if entry is not None:
            segment = _from_entry(self._trusted(topic, partition, entry))
            self._recent_segments.remember(topic, partition, segment)
            return segment, None
        info = self.registry.partition_info(topic, partition)
        if info is not None and not info.is_empty:
            if offset < info.earliest_offset:
                raise self._below(topic, partition, offset, info.earliest_offset, info.latest_offset)
            if offset > info.latest_offset:
                raise out_of_range(topic, partition, offset, info.earliest_offset, info.latest_offset)
            following = self.registry.next_segment(topic, partition, offset)
            gaps = self.registry.gaps(topic, partition)
            gap = next((g for g in gaps if g.start_offset <= offset <= g.end_offset), None)
            if following is None:
                raise out_of_range(topic, partition, offset, info.earliest_offset, info.latest_offset)
            return _from_entry(self._trusted(topic, partition, following)), gap or Gap(offset, following.first - 1, "no remote segment", 0)
        listed = self._listed(topic, partition)
        if not listed:
            coverage = self.coverage_start(topic, partition)
            if coverage is not None and offset < coverage.offset:
                raise _before_coverage(topic, partition, offset, coverage)
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for {topic}-{partition} in cluster {self.name}")
        for segment in listed:
            if segment.base_offset <= offset <= segment.last_offset:
                return segment, None
        if offset < listed[0].base_offset:
            raise self._below(topic, partition, offset, listed[0].base_offset, listed[-1].last_offset)
        raise out_of_range(topic, partition, offset, listed[0].base_offset, listed[-1].last_offset)

    def _below(self, topic: str, partition: int, offset: int, earliest: int, latest: int) -> GatewayError:
        """The 416 for an offset below the remote range: named as before the coverage start when it is."""
        coverage = self.coverage_start(topic, partition)
        if coverage is not None and offset < coverage.offset:
            return _before_coverage(topic, partition, offset, coverage, earliest_offset=earliest, latest_offset=latest)
        return out_of_range(topic, partition, offset, earliest, latest)

    def _listed(self, topic: str, partition: int) -> list[RemoteSegment]:
        """Segments found by listing the partition's prefix (Pinterest-layout buckets), cached
        (an empty listing too, for ``cache.listing_ttl_s``; bounded by ``cache.listing_bytes``)."""
        return self._listings.get_or_load((topic, partition), lambda: self._list(topic, partition))

    def _list(self, topic: str, partition: int) -> list[RemoteSegment]:
        """The partition's committed segments by listing: those at or below ``offset.wm``.

        ``offset.wm`` names the last segment fully uploaded (Pinterest's uploader and our agent
        write it after the segment's files), so a ``.log`` above it, or any ``.log`` when there is
        no ``offset.wm`` yet, is an upload in flight whose indexes may not have landed: it is not
        served (it is neither committed nor lost)."""
        prefix = self.keyspace.partition_prefix(topic, partition)
        wm_key = self.keyspace.offset_wm_key(topic, partition)
        logs: list[tuple[int, str, int]] = []
        committed_up_to = -1
        for page in self.objects.pages(prefix):
            for item in page.get("Contents", ()):
                if item["Key"] == wm_key:
                    committed_up_to = self._committed_up_to(wm_key)
                    continue
                try:
                    parsed = self.keyspace.parse(item["Key"])
                except InvalidSegmentNameError:
                    continue
                name = parsed.segment
                if name is not None and name.kind == FileKind.LOG and name.suffix == Suffix.NONE:
                    logs.append((name.base_offset, item["Key"], int(item["Size"])))
        in_flight = [entry for entry in logs if entry[0] > committed_up_to]
        if in_flight:  # not served, never silently: named in the log (the next listing may serve them)
            log.log(
                logging.WARNING if len(in_flight) == len(logs) else logging.INFO,
                "listing %s: %d .log object(s) above offset.wm %s not served (uploads in flight), from base offset %d",
                prefix, len(in_flight), committed_up_to if committed_up_to >= 0 else "(none yet)", min(b for b, _, _ in in_flight),
            )
        logs = sorted(log for log in logs if log[0] <= committed_up_to)
        segments = []
        for i, (base, key, size) in enumerate(logs):
            last = logs[i + 1][0] - 1 if i + 1 < len(logs) else self._last_offset_of(key, base, size)
            segments.append(RemoteSegment(key, base, last, size, -1))
        return segments

    def _committed_up_to(self, wm_key: str) -> int:
        """The base offset ``offset.wm`` names; a malformed one is corrupt remote data (502: ``errors.ANSWERS``)."""
        return parse_offset_wm(self._get(wm_key), f"s3://{self.bucket}/{wm_key}")

    def _last_offset_of(self, key: str, base: int, size: int) -> int:
        return last_offset_in(self.offset_index(key, base), self.batch_headers(key, size), base, size)

    # -- plans -------------------------------------------------------------------------------
    def _sparse_plan(self, segment: RemoteSegment, start: int, max_bytes: int, range_bytes: int) -> tuple[list[ByteRange], str | None] | None:
        """Ranges from the sparse index when the batch index is not in memory yet (module doc), and
        the batch index key to fetch in the background (None: the plan is exact); None when the
        exact path must plan."""
        if FileKind.BATCHINDEX.value not in segment.files:
            return None
        key = segment.object_key[: -len(FileKind.LOG.value)] + FileKind.BATCHINDEX.value
        if self.batch_indexes.peek(key, count=False) is not None:
            return None
        if segment.sparse_index is None and self.sparse_indexes.peek(segment.object_key, count=False) is None:
            return None  # never planned here before (registry layout 2 keeps no sparse index): the batch index, one GET
        sparse = self.sparse_index(segment)
        if sparse is None or not sparse_plan_fits(sparse, start, max_bytes):
            return None
        ranges = plan_from_sparse_index(sparse, segment_last_offset=segment.last_offset, offset=start, max_bytes=max_bytes, range_bytes=range_bytes)
        if ranges and ranges[0].first_offset < segment.first:  # batches before first_offset belong to the segment before: exact plan
            return None
        # not the exact plan (an early start, a range coarser than asked, an end short of max_bytes):
        # the batch index gives exact starts, finer ranges and fuller plans to the plans that follow
        exact = ranges[0].first_offset == start and all(r.size <= range_bytes for r in ranges) and ranges[-1].end == segment.size
        return ranges, None if exact else key

    def plan(self, topic: str, partition: int, offset: int, max_bytes: int, *, range_bytes: int | None = None) -> Plan:
        """Ranges of one segment from ``offset`` within ``max_bytes``, each at most ``range_bytes``
        where the batches allow (None: ``settings.range_bytes``), with a presigned URL each."""
        segment, gap = self.segment_for(topic, partition, offset)
        start = segment.first if gap is not None else offset  # first_offset: the batch holding it starts the plan
        range_bytes = range_bytes or self.settings.range_bytes
        with about(segment.object_key):
            sparse = self._sparse_plan(segment, start, max_bytes, range_bytes)
            index = None if sparse is not None else self.batch_index(segment)
            if sparse is not None:
                ranges = sparse[0]
            elif index is not None:
                ranges = plan_from_batch_index(
                    index, segment_last_offset=segment.last_offset, offset=start, max_bytes=max_bytes, range_bytes=range_bytes
                )
            else:
                ranges = plan_ranges(
                    index=self.offset_index(segment.object_key, segment.base_offset),
                    headers=self.batch_headers(segment.object_key, segment.size),
                    segment_last_offset=segment.last_offset,
                    offset=start,
                    max_bytes=max_bytes,
                    range_bytes=range_bytes,
                )
        ranges = ranges[: max_ranges_per_plan(self.settings)]  # module doc, "Bounds": next_offset continues after the last
        ttl = self.settings.presign_ttl_s
        urls = [self.objects.presign(segment.object_key, r, ttl) for r in ranges]
        if sparse is not None and sparse[1] is not None:  # last: the load starts once this plan is made
            self._loads.submit(sparse[1], lambda: self.batch_index(segment))
        return Plan(segment, ranges, urls, int(time.time() * 1000) + ttl * 1000, gap)

    def read_range(self, key: str, byte_range: ByteRange) -> bytes | memoryview:
        """A planned range's bytes: a read-only memoryview of pooled memory from an ``http://`` S3 (``s3_objects``)."""
        return self.objects.get_range(key, byte_range)

    def aborted_txns(self, topic: str, partition: int, segment: RemoteSegment | SegmentEntry) -> list[AbortedTxn]:
        """The aborted transactions of the segment's ``.txnindex`` (``format.txn_index``), when the agent
        uploaded one (cached); none for a segment without one (Kafka writes it only for segments that
        received an ABORT marker). A corrupt file is a 502 corrupt_remote_data (``errors.ANSWERS``)."""
        entry = segment if isinstance(segment, SegmentEntry) else self.registry.find(topic, partition, segment.first)
        if entry is None or FileKind.TXNINDEX.value not in entry.files:
            return []
        self._trusted(topic, partition, entry)  # every entry, on every path (module doc, "Trust no store")
        key = segment.object_key[: -len(FileKind.LOG.value)] + FileKind.TXNINDEX.value
        return self.txn_indexes.get_or_load(key, lambda: txn_index.parse(self._get(key), name=key))

    # -- readiness -------------------------------------------------------------------------
    def check(self) -> dict[str, str]:
        status = {}
        try:
            self.redis.ping()
            status["redis"] = "ok"
        except redis.RedisError as err:  # the detail goes to the log only (errors module doc)
            status["redis"] = f"unavailable (error id {hidden_failure('redis', f'PING: {err}')})"
        status["s3"] = self.objects.check()
        return status


def _from_entry(entry: SegmentEntry) -> RemoteSegment:
    return RemoteSegment(entry.object_key, entry.base_offset, entry.last_offset, entry.size, entry.max_timestamp, entry.files, entry.sparse_index, entry.first_offset)


def _before_coverage(topic: str, partition: int, offset: int, coverage: CoverageStart, **extent: int) -> GatewayError:
    return GatewayError(
        ErrorCode.OFFSET_OUT_OF_RANGE,
        f"offset {offset} of {topic}-{partition} is before the coverage start {coverage.offset}: the agent began following the "
        f"partition at that offset (observed at {coverage.observed_ms} ms), so remote storage never held earlier offsets",
        coverage_start_offset=coverage.offset,
        **extent,
    )
