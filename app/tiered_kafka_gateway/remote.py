"""One cluster's remote storage as the gateway reads it: registry, segment objects, caches.

Segments come from the Redis registry (``tiered_kafka.registry``). A partition the registry does
not know — a bucket written by Pinterest's uploader — is found by listing its S3 prefix (cached
for ``cache.listing_ttl_s``); its last offset comes from the next segment's base or, for the
newest, from the batch headers after the ``.index``'s last entry. Whether Kafka still knows the
topic plays no part: remote data is served as long as it is remote.

Topics (``topics``) are those of the registry and those found by listing the cluster's
``{topic}-{partition}/`` directories in S3 (``s3_listing``: bounded), cached for
``cache.listing_ttl_s``; a listing cut short by a bound says so (``complete``).

An offset below the partition's coverage start (``Registry.coverage_start``: the log start the
agent first observed) that remote storage does not hold is answered 416 ``offset_out_of_range``
with ``coverage_start_offset`` (``errors`` module docstring), not like an offset remote retention
removed.

Plans are computed by ``tiered_kafka.read_plan``. A segment whose registry entry lists a
``batchindex`` file (``tiered_kafka.format.batch_index``, uploaded by the agent or backfilled) is
planned from it: one GET the first time, then from memory (cached, bounded by bytes:
``cache.batch_index_bytes``), with no ``.index`` or header read; offsets-for-timestamp use it too
(``batches_reaching``). Other segments — Pinterest-layout buckets, uploads from before the batch
index — are planned from the ``.index`` (cached, bounded) and batch headers read in windows by
ranged GETs (cached per segment, bounded). Either way a repeated plan costs one registry lookup
and a presign per range, no S3 request. ``s3_gets_by_kind`` counts GETs by file kind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import redis
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError, ClientError

from tiered_kafka.errors import CorruptIndexError, FormatError, InvalidSegmentNameError, OffsetOutOfRangeError
from tiered_kafka.format.batch_index import BatchIndex
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.segment_names import FileKind, Suffix
from tiered_kafka.format.time_index import TimeIndex
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.read_plan import BatchHeaders, ByteRange, UnsupportedFormatError, plan_from_batch_index, plan_ranges
from tiered_kafka.registry import MAX_OFFSET, CoverageStart, Gap, PartitionInfo, Registry, RegistryError, SegmentEntry
from tiered_kafka.service_support import s3_client
from tiered_kafka.transactions import remote_last_stable_offset
from tiered_kafka_gateway.caches import LRU, RecentSegments, RemoteSegment
from tiered_kafka_gateway.config import ClusterSettings, GatewaySettings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.s3_listing import list_partitions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    segment: RemoteSegment
    ranges: list[ByteRange]
    urls: list[str]
    expires_at_ms: int
    gap: Gap | None  # set when the requested offset fell in a gap and the plan starts after it


class ClusterReader:
    def __init__(self, name: str, cluster: ClusterSettings, settings: GatewaySettings) -> None:
        self.name = name
        self.settings = settings
        s3 = cluster.s3
        self.bucket = s3.bucket
        self.keyspace = Keyspace(s3.prefix, name, s3.entropy_bits)
        self.s3 = s3_client(s3, connect_timeout_s=settings.timeouts.s3_s, read_timeout_s=settings.timeouts.s3_s, max_pool_connections=32)
        # presigning signs with botocore's SigV4 query signer directly: the same algorithm as
        # generate_presigned_url, without its per-call request pipeline (0.45 ms -> 0.13 ms)
        endpoint = (s3.endpoint_url or f"https://s3.{s3.region}.amazonaws.com").rstrip("/")
        self._object_url_prefix = f"{endpoint}/{quote(self.bucket, safe='')}/"
        self._region = s3.region
        self.redis = redis.Redis.from_url(
            cluster.redis_url, socket_timeout=settings.timeouts.redis_s, socket_connect_timeout=settings.timeouts.redis_s, max_connections=64
        )
        self.registry = Registry(self.redis, name)
        self.bootstrap_servers = cluster.bootstrap_servers
        self.indexes: LRU[str, OffsetIndex | TimeIndex] = LRU(settings.cache.index_entries)
        self.headers: LRU[str, BatchHeaders] = LRU(settings.cache.header_segments)
        self.batch_indexes: LRU[str, BatchIndex] = LRU(settings.cache.batch_index_bytes, weigh=lambda index: index.nbytes)
        self._listings: dict[tuple[str, int], tuple[float, list[RemoteSegment]]] = {}
        self._listing_lock = threading.Lock()
        self._partition_listing: tuple[float, set[tuple[str, int]], bool] | None = None
        self.s3_gets = 0
        self.s3_gets_by_kind: Counter[str] = Counter()  # file kind ("index", "log", "batchindex", ...) -> GETs
        self.presigns = 0
        self._recent_segments = RecentSegments(settings.cache.segment_ttl_s)
        # (topic, partition, latest offset) -> the last segment's (last offset, open_txn_first_offset)
        self._last_entries: LRU[tuple[str, int, int], tuple[int, int] | None] = LRU(4096)

    # -- errors ----------------------------------------------------------------------------
    def _registry(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except RegistryError as err:
            raise GatewayError(ErrorCode.REGISTRY_UNAVAILABLE, f"the registry of cluster {self.name} is unavailable: {err}") from err

    def _get(self, key: str, byte_range: str | None = None) -> bytes:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if byte_range:
            params["Range"] = byte_range
        try:
            self.s3_gets += 1
            self.s3_gets_by_kind[key.rsplit(".", 1)[-1]] += 1
            response = self.s3.get_object(**params)
            if byte_range:
                _check_content_range(key, byte_range, response)
            return response["Body"].read()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"s3://{self.bucket}/{key} is missing") from err
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 read of {key} failed: {err}") from err
        except BotoCoreError as err:
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 is unavailable: {err}") from err

    # -- partitions ------------------------------------------------------------------------
    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self._registry(lambda: self.registry.partition_info(topic, partition))
        if info is not None:
            return info
        listed = self._listed(topic, partition)
        if not listed:
            return None
        return PartitionInfo(listed[0].base_offset, listed[-1].last_offset, len(listed), sum(s.size for s in listed), 0)

    def topics(self) -> tuple[dict[str, list[int]], bool]:
        """Topic -> sorted partitions with remote data (registry and S3 listing); and whether the
        listing is complete (False: a bound of the module docstring cut it short)."""
        registered = self._registry(self.registry.topics)
        listed, complete = self._listed_partitions()
        merged = {(t, p) for t, ps in registered.items() for p in ps} | listed
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(merged):
            out.setdefault(topic, []).append(partition)
        return out, complete

    def _listed_partitions(self) -> tuple[set[tuple[str, int]], bool]:
        """The partitions found in S3 (``s3_listing.list_partitions``), cached."""
        now = time.monotonic()
        with self._listing_lock:
            if self._partition_listing is not None and now - self._partition_listing[0] < self.settings.cache.listing_ttl_s:
                return self._partition_listing[1], self._partition_listing[2]
        listing = list_partitions(self.s3, self.bucket, self.keyspace)
        if not listing.complete:
            log.warning("the S3 listing of cluster %s stopped at its bound (%d partitions found)", self.name, len(listing.partitions))
        with self._listing_lock:
            self._partition_listing = (now, listing.partitions, listing.complete)
        return listing.partitions, listing.complete

    def coverage_start(self, topic: str, partition: int) -> CoverageStart | None:
        return self._registry(lambda: self.registry.coverage_start(topic, partition))

    def gaps(self, topic: str, partition: int) -> list[Gap]:
        return self._registry(lambda: self.registry.gaps(topic, partition))

    def last_stable_offset(self, topic: str, partition: int, info: PartitionInfo | None = None) -> int | None:
        """The partition's remote last stable offset (``tiered_kafka.transactions.remote_last_stable_offset``,
        from its last registered segment; ``info``: its extent, when already read); None when
        unknown: no registry entry (a Pinterest-layout bucket) or one that does not know."""
        if info is None:
            info = self.partition_info(topic, partition)
        if info is None or info.is_empty:
            return None

        def load() -> tuple[int, int] | None:
            entry = self._registry(lambda: self.registry.find(topic, partition, info.latest_offset))
            return None if entry is None else (entry.last_offset, entry.open_txn_first_offset)

        found = self._last_entries.get_or_load((topic, partition, info.latest_offset), load)
        return None if found is None else remote_last_stable_offset(*found)

    def segments(self, topic: str, partition: int) -> list[SegmentEntry]:
        return self._registry(lambda: self.registry.segments(topic, partition))

    def segment_for(self, topic: str, partition: int, offset: int) -> tuple[RemoteSegment, Gap | None]:
        """The segment holding ``offset``; in a gap, the next segment and the gap."""
        if offset > MAX_OFFSET:  # beyond what the registry can store: never remote
            info = self.partition_info(topic, partition)
            if info is None or info.is_empty:
                raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for {topic}-{partition} in cluster {self.name}")
            raise _out_of_range(topic, partition, offset, info.earliest_offset, info.latest_offset)
        cached = self._recent_segments.find(topic, partition, offset)
        if cached is not None:
            return cached, None
        entry = self._registry(lambda: self.registry.find(topic, partition, offset))
        if entry is not None:
            segment = _from_entry(entry)
            self._recent_segments.remember(topic, partition, segment)
            return segment, None
        info = self._registry(lambda: self.registry.partition_info(topic, partition))
        if info is not None and not info.is_empty:
            if offset < info.earliest_offset:
                raise self._below(topic, partition, offset, info.earliest_offset, info.latest_offset)
            if offset > info.latest_offset:
                raise _out_of_range(topic, partition, offset, info.earliest_offset, info.latest_offset)
            following = self._registry(lambda: self.registry.next_segment(topic, partition, offset))
            gaps = self._registry(lambda: self.registry.gaps(topic, partition))
            gap = next((g for g in gaps if g.start_offset <= offset <= g.end_offset), None)
            if following is None:
                raise _out_of_range(topic, partition, offset, info.earliest_offset, info.latest_offset)
            return _from_entry(following), gap or Gap(offset, following.base_offset - 1, "no remote segment", 0)
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
        raise _out_of_range(topic, partition, offset, listed[0].base_offset, listed[-1].last_offset)

    def _below(self, topic: str, partition: int, offset: int, earliest: int, latest: int) -> GatewayError:
        """The 416 for an offset below the remote range: named as before the coverage start when it is."""
        coverage = self.coverage_start(topic, partition)
        if coverage is not None and offset < coverage.offset:
            return _before_coverage(topic, partition, offset, coverage, earliest_offset=earliest, latest_offset=latest)
        return _out_of_range(topic, partition, offset, earliest, latest)

    def _listed(self, topic: str, partition: int) -> list[RemoteSegment]:
        """Segments found by listing the partition's prefix (Pinterest-layout buckets), cached."""
        now = time.monotonic()
        with self._listing_lock:
            cached = self._listings.get((topic, partition))
            if cached is not None and now - cached[0] < self.settings.cache.listing_ttl_s:
                return cached[1]
        prefix = self.keyspace.partition_prefix(topic, partition)
        logs: list[tuple[int, str, int]] = []
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", ()):
                    try:
                        parsed = self.keyspace.parse(item["Key"])
                    except InvalidSegmentNameError:
                        continue
                    name = parsed.segment
                    if name is not None and name.kind == FileKind.LOG and name.suffix == Suffix.NONE:
                        logs.append((name.base_offset, item["Key"], int(item["Size"])))
        except (ClientError, BotoCoreError) as err:
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 listing of {prefix} failed: {err}") from err
        logs.sort()
        segments = []
        for i, (base, key, size) in enumerate(logs):
            last = logs[i + 1][0] - 1 if i + 1 < len(logs) else self._last_offset_of(key, base, size)
            segments.append(RemoteSegment(key, base, last, size, -1))
        with self._listing_lock:
            self._listings[(topic, partition)] = (now, segments)
        return segments

    def _last_offset_of(self, key: str, base: int, size: int) -> int:
        index = self.offset_index(key, base)
        headers = self.batch_headers(key, size)
        position = index.entries()[-1].position if len(index) else 0
        last = base - 1
        while position < size:
            header = headers.at(position)
            last, position = header.last_offset, position + header.size
        return last

    # -- indexes, headers, plans -----------------------------------------------------------
    def offset_index(self, log_key: str, base_offset: int) -> OffsetIndex:
        key = log_key[: -len(FileKind.LOG.value)] + FileKind.INDEX.value
        return self.indexes.get_or_load(key, lambda: _parse(OffsetIndex.from_bytes, self._get(key), base_offset, key))  # type: ignore[return-value]

    def time_index(self, log_key: str, base_offset: int) -> TimeIndex:
        key = log_key[: -len(FileKind.LOG.value)] + FileKind.TIMEINDEX.value
        return self.indexes.get_or_load(key, lambda: _parse(TimeIndex.from_bytes, self._get(key), base_offset, key))  # type: ignore[return-value]

    def batch_headers(self, log_key: str, size: int) -> BatchHeaders:
        def read(start: int, end: int) -> bytes:
            data = self._get(log_key, f"bytes={start}-{end - 1}")
            if len(data) != end - start:
                raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"{log_key}: asked {end - start} bytes at {start}, got {len(data)}")
            return data

        return self.headers.get_or_load(log_key, lambda: BatchHeaders(read, size))

    def batch_index(self, segment: RemoteSegment | SegmentEntry) -> BatchIndex | None:
        """The segment's batch index (one GET, then cached), or None when it was uploaded without one."""
        if FileKind.BATCHINDEX.value not in segment.files:
            return None
        key = segment.object_key[: -len(FileKind.LOG.value)] + FileKind.BATCHINDEX.value

        def load() -> BatchIndex:
            index = _parse(lambda data, base, name: BatchIndex.from_bytes(data, name=name), self._get(key), segment.base_offset, key)
            if (index.base_offset, index.segment_size, index.last_offset) != (segment.base_offset, segment.size, segment.last_offset):
                raise GatewayError(
                    ErrorCode.CORRUPT_REMOTE_DATA,
                    f"{key} describes offsets {index.base_offset}..{index.last_offset} in {index.segment_size} bytes; the registry says "
                    f"{segment.base_offset}..{segment.last_offset} in {segment.size}",
                )
            return index

        return self.batch_indexes.get_or_load(key, load)

    def batches_reaching(self, segment: RemoteSegment | SegmentEntry, timestamp: int) -> Iterator[ByteRange]:
        """The segment's batches whose maxTimestamp is >= ``timestamp``, in order, as byte ranges
        (offsets-for-timestamp: the first record at or after a time is in the first of them that
        holds a non-control record reaching it). From the batch index when the segment has one (no
        .timeindex, .index or header read); else from the .timeindex, .index and batch headers."""
        index = self.batch_index(segment)
        if index is not None:
            slot = index.first_reaching(timestamp)
            for s in range(len(index) if slot is None else slot, len(index)):
                e = index.entry(s)
                if e.max_timestamp >= timestamp:
                    yield ByteRange(e.position, e.position + e.size, e.base_offset, e.last_offset)
            return
        start = self.time_index(segment.object_key, segment.base_offset).lookup(timestamp).offset
        position = self.offset_index(segment.object_key, segment.base_offset).lookup(start).position
        headers = self.batch_headers(segment.object_key, segment.size)
        while position < segment.size:
            header = headers.at(position)
            if header.max_timestamp >= timestamp:
                yield ByteRange(position, position + header.size, header.base_offset, header.last_offset)
            position += header.size

    def plan(self, topic: str, partition: int, offset: int, max_bytes: int) -> Plan:
        segment, gap = self.segment_for(topic, partition, offset)
        start = segment.base_offset if gap is not None else offset
        try:
            index = self.batch_index(segment)
            if index is not None:
                ranges = plan_from_batch_index(
                    index, segment_last_offset=segment.last_offset, offset=start, max_bytes=max_bytes, range_bytes=self.settings.range_bytes
                )
            else:
                ranges = plan_ranges(
                    index=self.offset_index(segment.object_key, segment.base_offset),
                    headers=self.batch_headers(segment.object_key, segment.size),
                    segment_last_offset=segment.last_offset,
                    offset=start,
                    max_bytes=max_bytes,
                    range_bytes=self.settings.range_bytes,
                )
        except UnsupportedFormatError as err:
            raise GatewayError(ErrorCode.UNSUPPORTED_FORMAT, str(err)) from err
        except OffsetOutOfRangeError as err:
            raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"{segment.object_key}: the registry and the segment disagree: {err}") from err
        except FormatError as err:
            raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"{segment.object_key}: {err}") from err
        ttl = self.settings.presign_ttl_s
        urls = [self.presign(segment.object_key, r, ttl) for r in ranges]
        return Plan(segment, ranges, urls, int(time.time() * 1000) + ttl * 1000, gap)

    def presign(self, key: str, byte_range: ByteRange, ttl_s: int) -> str:
        """A SigV4 URL for one object and one byte range (Range is a signed header)."""
        self.presigns += 1
        request = AWSRequest(method="GET", url=f"{self._object_url_prefix}{quote(key, safe='/~')}", headers={"Range": byte_range.http_range})
        S3SigV4QueryAuth(self._credentials(), "s3", self._region, expires=ttl_s).add_auth(request)
        return request.url

    def _credentials(self) -> Any:
        """Current credentials (refreshed by botocore when they rotate)."""
        return self.s3._request_signer._credentials.get_frozen_credentials()

    def read_range(self, key: str, byte_range: ByteRange) -> bytes:
        return self._get(key, byte_range.http_range)

    # -- readiness -------------------------------------------------------------------------
    def check(self) -> dict[str, str]:
        status = {}
        try:
            self.redis.ping()
            status["redis"] = "ok"
        except redis.RedisError as err:
            status["redis"] = f"unavailable: {err}"
        try:
            self.s3.head_bucket(Bucket=self.bucket)
            status["s3"] = "ok"
        except (ClientError, BotoCoreError) as err:
            status["s3"] = f"unavailable: {err}"
        return status


def _from_entry(entry: SegmentEntry) -> RemoteSegment:
    return RemoteSegment(entry.object_key, entry.base_offset, entry.last_offset, entry.size, entry.max_timestamp, entry.files)


def _parse(parser: Callable[..., Any], data: bytes, base: int, key: str) -> Any:
    try:
        return parser(data, base, name=key)
    except CorruptIndexError as err:
        raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, str(err)) from err


def _before_coverage(topic: str, partition: int, offset: int, coverage: CoverageStart, **extent: int) -> GatewayError:
    return GatewayError(
        ErrorCode.OFFSET_OUT_OF_RANGE,
        f"offset {offset} of {topic}-{partition} is before the coverage start {coverage.offset}: the agent began following the "
        f"partition at that offset (observed at {coverage.observed_ms} ms), so remote storage never held earlier offsets",
        coverage_start_offset=coverage.offset,
        **extent,
    )


def _out_of_range(topic: str, partition: int, offset: int, earliest: int, latest: int) -> GatewayError:
    error = ErrorCode.OFFSET_NOT_REMOTE if offset > latest else ErrorCode.OFFSET_OUT_OF_RANGE
    return GatewayError(
        error,
        f"offset {offset} of {topic}-{partition} is outside the remote range {earliest}..{latest}",
        earliest_offset=earliest,
        latest_offset=latest,
    )


def _check_content_range(key: str, byte_range: str, response: dict[str, Any]) -> None:
    """A ranged GET must be answered 206 with the asked range (``Content-Range: bytes a-b/size``):
    a server or proxy that ignored ``Range`` would otherwise make the gateway buffer a whole segment
    and read the wrong bytes. Checked before the body is read; the body is then closed unread."""
    asked = byte_range.removeprefix("bytes=")
    got = response.get("ContentRange") or ""
    if not got.startswith(f"bytes {asked}/"):
        response["Body"].close()
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        raise GatewayError(
            ErrorCode.CORRUPT_REMOTE_DATA,
            f"S3 answered the ranged GET of {key} ({byte_range}) with HTTP {status} and Content-Range {got or 'absent'}: the range was not honoured",
        )
