"""A KIP-405 cluster whose remote segments Aiven's RemoteStorageManager wrote (issue 18).

``RsmClusterReader`` answers what the routes ask of ``remote.ClusterReader`` (partitions, plans,
records, offsets by time) from the RSM's objects (``tiered_kafka.rsm``: keys, ``.rsm-manifest``,
chunk index, ``.indexes``), with no Redis and no agent. Live segments come from ``rsm_catalog``
(``__remote_log_metadata`` when Kafka is configured, else a listing: best effort).

Everything is planned on *original* byte positions (the broker's ``.log``), as the RSM's index
positions are (``SegmentIndexesV1``: the offset and time indexes inside ``.indexes`` hold positions
in the original file): the offset index comes from ``.indexes`` and the batch headers from the
original bytes, then ``read_plan.plan_ranges`` cuts batch-aligned ranges exactly as for a segment
without a batch index. How each range is served depends on the manifest:

* **plain** (neither ``compression`` nor ``encryption``): the ``.log`` object is the segment, byte for
  byte; each range is a presigned ranged GET, as for our agent's uploads.
* **compressed** (not encrypted): a range of the original file maps to a contiguous run of whole
  chunks (``ChunkIndex.chunks_for``), each its own zstd frame. The presigned URL covers those chunks'
  transformed bytes, ``range_header`` is that transformed range, and ``transformed`` (``models.ChunkedRange``)
  tells the client the frames' sizes and the original position of the first one, so it decompresses
  and keeps ``[start, end)`` (``tiered_kafka.client.remote_read.fetch_range``). Adjacent ranges may share a
  boundary chunk: it is fetched by both.
* **encrypted**: clients never see keys. The URL is the gateway's own byte-range endpoint
  (``rsm_urls``, ``routes.rsm_ranges``): signed like a presigned URL, it serves original bytes.

The gateway itself (records, offsets by time, batch headers) reads original bytes with
``read_original``: the covering chunks in one ranged GET, de-transformed (``tiered_kafka.rsm.transform``).
A read of at most two chunks (a 64 KiB window of batch headers, one batch) goes through a cache of
de-transformed chunks (``chunks``, bounded by ``cache.rsm_chunk_bytes``), so the header reads of a
plan do not GET and decompress the same 4 MiB chunk once per window; larger reads are not cached.
A chunk that does not decrypt (wrong key, tampered GCM tag, truncated chunk) is 502
``rsm_decryption_failed``; a malformed manifest, chunk index or key 502 ``corrupt_remote_data``.

Served segments and offsets come from ``rsm_catalog`` (``RsmSegment.first``/``last``: a segment
overlapping a later lineage in part serves only the offsets that lineage does not; its plans stop with
the batch holding its last served offset: ``rsm_clipping``). With ``bootstrap_servers``, the remote range starts no lower than Kafka's log start offset
(ListOffsets EARLIEST, cached for ``cache.listing_ttl_s``): Kafka's RemoteLogManager serves nothing
below it (after DeleteRecords, say) and neither does the gateway. When Kafka cannot say (down, or it
does not know the topic), the remote range is served unclamped and the warning says so.

No coverage starts. read_committed uses the ``.txnindex`` held in ``.indexes`` and the markers, and the remote last stable
offset comes from the last live segment's producer snapshot, also in ``.indexes``, by the rule of agent
clusters (``last_stable_offset``).

``RsmClusterReader`` is a ``sources.ClusterSource`` beside ``remote.ClusterReader``, not derived from
it: both read S3 through an injected ``s3_objects.S3Objects`` (counted, ranged GETs; presigning).
The rsm package's exceptions are not translated here: ``errors.ANSWERS`` answers them
(``RsmDecryptionError``: 502 ``rsm_decryption_failed``; any other ``FormatError``: 502
``corrupt_remote_data``), and ``errors.about`` names the object in the message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from tiered_kafka.errors import FormatError, RsmDecryptionError, TieredKafkaError
from tiered_kafka.format import producer_snapshot, txn_index
from tiered_kafka.format.producer_state import ProducerStateManager
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.time_index import TimeIndex
from tiered_kafka.format.txn_index import AbortedTxn
from tiered_kafka.read_plan import BatchHeaders, ByteRange, plan_ranges
from tiered_kafka.registry import CoverageStart, Gap, PartitionInfo, SegmentEntry
from tiered_kafka.rsm.keys import RsmSegmentKey, parse_key
from tiered_kafka.transactions import NO_OPEN_TXN, OPEN_TXN_UNKNOWN, remote_last_stable_offset
from tiered_kafka_gateway.caches import LRU, RemoteSegment
from tiered_kafka_gateway.config import ClusterSettings, GatewaySettings, RsmSettings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, about
from tiered_kafka_gateway.models import ChunkedRange
from tiered_kafka_gateway.plans import Plan, max_ranges_per_plan, out_of_range
from tiered_kafka_gateway.rsm_catalog import UNKNOWN, ListingCatalog, MetadataCatalog, RsmSegment
from tiered_kafka_gateway.rsm_clipping import ending_with
from tiered_kafka_gateway.s3_objects import CountsS3, S3Objects
from tiered_kafka_gateway.segment_indexes import last_offset_in
from tiered_kafka_gateway.sources import ScansSegments
from tiered_kafka_gateway import rsm_urls

log = logging.getLogger(__name__)

NO_TIMESTAMP_BOUND = 2**63 - 1  # a segment whose max timestamp is unknown is never skipped by offsets-for-time


T = TypeVar("T")


def _named(where: str, call: Callable[[], T]) -> T:
    """``call()``, a core exception escaping it named after ``where`` (``errors.about``)."""
    with about(where):
        return call()


class _DescribeOnly:
    """A stand-in key ring for reading a manifest's offsets and sizes only: its data key is never used."""

    def unwrap(self, data_key_field: str) -> bytes:
        return bytes(32)


class RsmClusterReader(ScansSegments, CountsS3):
    """A ``sources.ClusterSource`` over a KIP-405 bucket (module docstring)."""

    def __init__(self, name: str, settings: GatewaySettings, *, rsm: RsmSettings, objects: S3Objects, bootstrap_servers: str | None = None) -> None:
        from tiered_kafka.rsm.keyring import KeyRing

        self.name = name
        self.settings = settings
        self.objects = objects
        self.s3 = objects.client
        self.bucket = objects.bucket
        self.prefix = rsm.key_prefix
        self.bootstrap_servers = bootstrap_servers
        self.key_ring = KeyRing.from_pem({k: v.get_secret_value().encode() for k, v in rsm.key_ring.items()}) if rsm.key_ring else None
        self._url_secret = settings.rsm_url_secret.get_secret_value().encode() if settings.rsm_url_secret is not None else None
        cache = settings.cache
        self.manifests: LRU[str, Any] = LRU("rsm_manifest", cache.index_bytes // 2, lambda m: 600 + 48 * len(m.chunk_index.chunks()))
        self.indexes: LRU[str, OffsetIndex | TimeIndex] = LRU("index", cache.index_bytes // 2, lambda index: 64 + 80 * len(index))
        self.headers: LRU[str, BatchHeaders] = LRU("headers", cache.header_bytes, lambda headers: headers.nbytes)
        self.txn_indexes: LRU[str, list[Any]] = LRU("txn_index", cache.txn_index_bytes, lambda txns: 64 + 120 * len(txns))
        self._last_offsets: LRU[str, int] = LRU("rsm_last_offset", cache.segment_bytes // 2, lambda found: 64)
        self._described: LRU[str, RsmSegment] = LRU("rsm_listed", cache.segment_bytes // 2, lambda found: 300)
        self._open_txns: LRU[str, int] = LRU("rsm_open_txn", cache.segment_bytes // 4, lambda found: 64)  # last segment -> open_txn_first_offset
        self.chunks: LRU[tuple[str, int], bytes] = LRU("rsm_chunk", cache.rsm_chunk_bytes, len)  # (log key, chunk id) -> original bytes
        # (topic, partition) -> Kafka's log start offset, None when Kafka could not say (module docstring)
        self._log_starts: LRU[tuple[str, int], int | None] = LRU("rsm_log_start", cache.segment_bytes // 4, lambda found: 64, ttl_s=cache.listing_ttl_s)
        ttl = cache.listing_ttl_s
        if bootstrap_servers:
            self.catalog: ListingCatalog | MetadataCatalog = MetadataCatalog(
                bootstrap_servers, rsm.metadata_topic, self.prefix, ttl, settings.kafka.timeout_s, settings.kafka_client_config(name)
            )
        else:
            self.catalog = ListingCatalog(self.s3, self.bucket, self.prefix, ttl, self._describe)

    @classmethod
    def connect(cls, name: str, cluster: ClusterSettings, settings: GatewaySettings) -> RsmClusterReader:
        """The reader of a kind "kip405" cluster with its S3 client connected (``sources.build_source``)."""
        rsm = cluster.rsm
        if rsm is None:
            raise ValueError(f"cluster {name} is not of kind kip405")
        return cls(name, settings, rsm=rsm, objects=S3Objects.connect(rsm.s3_location(), rsm.bucket, settings), bootstrap_servers=cluster.bootstrap_servers)

    def close(self) -> None:
        if isinstance(self.catalog, MetadataCatalog):
            self.catalog.close()
        self.objects.close()

    def wait_for_background_loads(self, timeout_s: float = 30.0) -> bool:
        return True

    @property
    def caches(self) -> list[LRU[Any, Any]]:
        return [self.manifests, self.indexes, self.headers, self.txn_indexes, self._last_offsets, self._described, self._open_txns,
                self.chunks, self._log_starts]

    # -- manifests, indexes, original bytes ------------------------------------------------------
    def manifest(self, key: RsmSegmentKey) -> Any:
        """The segment's parsed ``.rsm-manifest`` (data key unwrapped with the key ring), cached."""
        from tiered_kafka.rsm.manifest import parse_manifest

        manifest_key = key.object_key("rsm-manifest")
        return self.manifests.get_or_load(manifest_key, lambda: _named(manifest_key, lambda: parse_manifest(self._get(manifest_key), self.key_ring)))

    def _manifest_of_log(self, log_key: str) -> tuple[RsmSegmentKey, Any]:
        key, _ = _named(log_key, lambda: parse_key(log_key, self.prefix))
        return key, self.manifest(key)

    def _index_bytes(self, key: RsmSegmentKey, manifest: Any, name: str) -> bytes:
        """One index out of ``.indexes`` (``tiered_kafka.rsm.indexes.index_bytes``: decrypted when the
        segment is; never compressed): one ranged GET of its slice; b"" when the segment has none."""
        from tiered_kafka.rsm.indexes import index_bytes

        indexes_key = key.object_key("indexes")
        entry = manifest.index_range(name)
        if entry is None or entry.size == 0:
            return b""
        data = self._get(indexes_key, f"bytes={entry.position}-{entry.end - 1}")
        return _named(indexes_key, lambda: index_bytes(data, manifest, name, base=entry.position, what=indexes_key)) or b""

    def _offset_index(self, key: RsmSegmentKey, manifest: Any) -> OffsetIndex:
        cache_key = key.object_key("indexes") + "#offset"
        return self.indexes.get_or_load(  # type: ignore[return-value]
            cache_key, lambda: _named(cache_key, lambda: OffsetIndex.from_bytes(self._index_bytes(key, manifest, "offset"), key.start_offset, name=cache_key))
        )

    def _time_index(self, key: RsmSegmentKey, manifest: Any) -> TimeIndex:
        cache_key = key.object_key("indexes") + "#timestamp"
        return self.indexes.get_or_load(  # type: ignore[return-value]
            cache_key, lambda: _named(cache_key, lambda: TimeIndex.from_bytes(self._index_bytes(key, manifest, "timestamp"), key.start_offset, name=cache_key))
        )

    def read_original(self, log_key: str, start: int, end: int) -> bytes:
        """Original bytes [start, end) of a segment's .log: a ranged GET of the covering chunks, de-transformed
        (at most two chunks: through the chunk cache, module docstring)."""
        from tiered_kafka.rsm.transform import detransform_range

        _, manifest = self._manifest_of_log(log_key)
        if not manifest.compression and manifest.encryption is None:
            data = self._get(log_key, f"bytes={start}-{end - 1}")
        else:
            chunks = manifest.chunk_index.chunks_for(start, end)
            if not chunks:
                raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"{log_key}: no chunk covers bytes {start}..{end}")

            def fetch(run: list[Any]) -> bytes:
                first, last = run[0].transformed_position, run[-1].transformed_end
                raw = self._get(log_key, f"bytes={first}-{last - 1}")
                return _named(log_key, lambda: detransform_range(  # type: ignore[no-any-return]
                    raw, run, compression=manifest.compression, encryption=manifest.encryption,
                    start=run[0].original_position, end=run[-1].original_end,
                ))

            if len(chunks) <= 2:
                original = b"".join(self.chunks.get_or_load((log_key, c.id), lambda c=c: fetch([c])) for c in chunks)
            else:
                original = fetch(chunks)
            offset = chunks[0].original_position
            data = original[start - offset : end - offset]
        if len(data) != end - start:
            raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"{log_key}: asked {end - start} original bytes at {start}, got {len(data)}")
        return data

    def read_range(self, key: str, byte_range: ByteRange) -> bytes:
        return self.read_original(key, byte_range.start, byte_range.end)

    def original_size(self, log_key: str) -> int:
        """The size of the segment's original ``.log`` (its manifest's chunk index)."""
        return self._manifest_of_log(log_key)[1].chunk_index.original_file_size  # type: ignore[no-any-return]

    def is_one_batch(self, log_key: str, size: int, start: int, end: int) -> bool:
        """Whether original bytes [start, end) of the segment are exactly one record batch (its header's size)."""
        try:
            return self._headers(log_key, size).at(start).size == end - start
        except FormatError:  # start is not a batch boundary
            return False

    def _scan_last(self, segment: RsmSegment, size: int) -> int:
        """The last offset of a listed segment whose manifest names none (an RSM before
        ``remoteLogSegmentMetadata``) and that no later segment bounds: read from its indexes and batches."""
        index = self._offset_index(segment.key, self.manifest(segment.key))
        return last_offset_in(index, self._headers(segment.log_key, size), segment.base_offset, size)

    def _headers(self, log_key: str, size: int) -> BatchHeaders:
        return self.headers.get_or_load(
            log_key, lambda: BatchHeaders(lambda s, e: self.read_original(log_key, s, e), size, on_load=lambda grown: self.headers.put(log_key, grown))
        )

    def _get(self, key: str, byte_range: str | None = None) -> bytes:
        return self.objects.get(key, byte_range)

    def aborted_txns(self, topic: str, partition: int, segment: RemoteSegment | SegmentEntry) -> list[AbortedTxn]:
        """The segment's aborted transactions: the transaction index inside ``.indexes`` (none when it has
        none), cached under the name of the ``.txnindex`` Kafka would have uploaded."""
        name = segment.object_key[: -len("log")] + "txnindex"

        def load() -> list[AbortedTxn]:
            key, manifest = self._manifest_of_log(segment.object_key)
            return txn_index.parse(self._index_bytes(key, manifest, "transaction"), name=name)

        return self.txn_indexes.get_or_load(name, load)

    # -- segments -------------------------------------------------------------------------------
    def _describe(self, key: RsmSegmentKey) -> RsmSegment:
        """A listed segment as its manifest describes it (``remoteLogSegmentMetadata``, when written),
        cached. Read without unwrapping the data key (``_DescribeOnly``): a segment whose key the ring
        lacks is still listed, and reading it answers rsm_decryption_failed rather than hiding it."""
        return self._described.get_or_load(key.object_key("rsm-manifest"), lambda: self._describe_uncached(key))

    def _describe_uncached(self, key: RsmSegmentKey) -> RsmSegment:
        from tiered_kafka.rsm.manifest import parse_manifest

        manifest_key = key.object_key("rsm-manifest")
        manifest = _named(manifest_key, lambda: parse_manifest(self._get(manifest_key), _DescribeOnly()))  # type: ignore[arg-type]
        size = manifest.chunk_index.original_file_size
        meta = manifest.segment_metadata
        if meta is None:
            return RsmSegment(key, key.start_offset, UNKNOWN, UNKNOWN, size)
        epochs = tuple(sorted(dict(meta.segment_leader_epochs).items()))
        return RsmSegment(key, meta.start_offset, meta.end_offset, meta.max_timestamp_ms, size, epochs)

    def _live(self, topic: str, partition: int) -> list[RsmSegment]:
        """The partition's served segments (sorted, disjoint ``first..last``), unknown ends and sizes
        filled in, the first ones clipped to Kafka's log start offset when Kafka is configured."""
        partitions = self.catalog.partitions()
        failure = partitions.failed.get((topic, partition))
        if failure is not None:
            raise failure
        segments = partitions.by_partition.get((topic, partition), [])
        out: list[RsmSegment] = []
        for i, segment in enumerate(segments):
            size = segment.size if segment.size >= 0 else self.manifest(segment.key).chunk_index.original_file_size
            last, serve_last = segment.last_offset, segment.serve_last
            if last < 0:
                if i + 1 < len(segments):  # ends where the next one starts (rsm_catalog: no end offset)
                    serve_last = segments[i + 1].first - 1
                else:
                    last = self._last_offsets.get_or_load(segment.log_key, lambda: self._scan_last(segment, size))
            found = replace(segment, size=size, last_offset=last, serve_last=serve_last)
            if found.last >= found.first:
                out.append(found)
        log_start = self._log_start(topic, partition) if out else None
        if log_start is not None and log_start > out[0].first:
            out = [s if s.first >= log_start else replace(s, first_offset=log_start) for s in out if s.last >= log_start]
        return out

    def _log_start(self, topic: str, partition: int) -> int | None:
        """Kafka's log start offset of the partition (cached), None without Kafka or when it cannot say."""
        if not self.bootstrap_servers:
            return None

        def load() -> int | None:
            from tiered_kafka_gateway import kafka_offsets

            try:
                return kafka_offsets.watermarks(self, topic, partition)[0]
            except GatewayError as err:
                log.warning("%s-%d: Kafka's log start offset is unknown (%s): every remote offset is served, even any below it",
                            topic, partition, err.message)
                return None

        return self._log_starts.get_or_load((topic, partition), load)

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        live = self._live(topic, partition)
        if not live:
            return None
        return PartitionInfo(live[0].first, live[-1].last, len(live), sum(s.size for s in live), 0)

    def topics(self) -> tuple[dict[str, list[int]], bool]:
        return self.catalog.partitions().topics(), True

    def coverage_start(self, topic: str, partition: int) -> CoverageStart | None:
        return None

    def gaps(self, topic: str, partition: int) -> list[Gap]:
        live = self._live(topic, partition)
        return [
            Gap(a.last + 1, b.first - 1, "no live remote segment holds these offsets", 0)
            for a, b in zip(live, live[1:]) if b.first > a.last + 1
        ]

    def last_stable_offset(self, topic: str, partition: int, info: PartitionInfo | None = None) -> int | None:
        """The remote last stable offset, by the rule of agent clusters (``transactions.remote_last_stable_offset``
        of the last live segment) with the segment's ``open_txn_first_offset`` taken from the producer
        snapshot the RSM stores in ``.indexes`` (``_open_txn_first_offset``); None when unknown."""
        live = self._live(topic, partition)
        if not live:
            return None
        last = live[-1]
        try:
            open_first = self._open_txns.get_or_load(last.log_key, lambda: self._open_txn_first_offset(last))
        except RsmDecryptionError as err:  # the key ring lacks the segment's key: its extent is still answered, its reads fail
            log.warning("%s-%d: the remote last stable offset is unknown: %s", topic, partition, err)
            return None
        return remote_last_stable_offset(last.last, open_first)

    def _open_txn_first_offset(self, segment: RsmSegment) -> int:
        """The first offset of the earliest transaction open at the segment's end: the smallest
        ``currentTxnFirstOffset`` of its producer snapshot (Kafka's ``RemoteLogManager`` uploads
        ``fetchSnapshot(nextSegmentBaseOffset)``, the state at the segment's end, as our agent ships it),
        via ``ProducerStateManager.first_unstable_offset``; NO_OPEN_TXN when none is open, OPEN_TXN_UNKNOWN
        without a snapshot (a broker before 0.11) or with a malformed one (logged). Unlike the agent, which
        may read a snapshot the broker is still writing in place and so cross-checks it against the
        batches, the RSM uploads the snapshot the broker finished: it is trusted as Kafka trusts it."""
        manifest = self.manifest(segment.key)
        what = segment.key.object_key("indexes") + "#producerSnapshot"
        data = self._index_bytes(segment.key, manifest, "producerSnapshot")
        if not data:
            return OPEN_TXN_UNKNOWN
        try:
            entries = producer_snapshot.parse(data, name=what)
        except FormatError as err:
            log.warning("%s: %s; the remote last stable offset is unknown", what, err)
            return OPEN_TXN_UNKNOWN
        first = ProducerStateManager.from_snapshot(entries).first_unstable_offset()
        return NO_OPEN_TXN if first is None else first

    def segments(self, topic: str, partition: int) -> list[SegmentEntry]:
        """The served segments as registry entries, from the catalog alone (no manifest read: a
        segment whose key the ring lacks fails only the reads that need its bytes)."""
        return [_entry(topic, partition, s) for s in self._live(topic, partition)]

    def _holding(self, topic: str, partition: int, offset: int) -> tuple[RsmSegment, Gap | None]:
        """The served segment holding ``offset``; in a gap, the next one and the gap."""
        live = self._live(topic, partition)
        if not live:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for {topic}-{partition} in cluster {self.name} ({self.catalog.source})")
        earliest, latest = live[0].first, live[-1].last
        if not earliest <= offset <= latest:
            raise out_of_range(topic, partition, offset, earliest, latest)
        for i, s in enumerate(live):
            if s.first <= offset <= s.last:
                return s, None
            if offset < s.first:
                return s, Gap(live[i - 1].last + 1, s.first - 1, "no live remote segment holds these offsets", 0)
        raise out_of_range(topic, partition, offset, earliest, latest)  # unreachable: the bounds were checked

    def segment_for(self, topic: str, partition: int, offset: int) -> tuple[RemoteSegment, Gap | None]:
        segment, gap = self._holding(topic, partition, offset)
        return _remote(segment), gap

    def batches_reaching(self, segment: RemoteSegment | SegmentEntry, timestamp: int) -> Iterator[ByteRange]:
        """Batches of the segment's served offsets (``first``..``last_offset``) whose max timestamp reaches ``timestamp``."""
        key, manifest = self._manifest_of_log(segment.object_key)
        start = max(self._time_index(key, manifest).lookup(timestamp).offset, segment.first)
        position = self._offset_index(key, manifest).lookup(start).position
        headers = self._headers(segment.object_key, segment.size)
        while position < segment.size:
            header = headers.at(position)
            if header.base_offset > segment.last_offset:
                break
            if header.max_timestamp >= timestamp and header.last_offset >= segment.first:
                yield ByteRange(position, position + header.size, header.base_offset, header.last_offset)
            position += header.size

    # -- plans ----------------------------------------------------------------------------------
    def plan(self, topic: str, partition: int, offset: int, max_bytes: int, *, range_bytes: int | None = None) -> Plan:
        """Batch-aligned ranges of original bytes (module docstring), served per the segment's transform.

        A segment serving less than its own end (``RsmSegment.serve_last``) is planned as if it ended
        with the batch holding its last served offset: the plan never reaches offsets another segment serves."""
        served, gap = self._holding(topic, partition, offset)
        segment = _remote(served)
        start = served.first if gap is not None else offset
        key, manifest = self._manifest_of_log(segment.object_key)
        with about(segment.object_key):
            index: Any = self._offset_index(key, manifest)
            headers: Any = self._headers(segment.object_key, segment.size)
            last = served.last_offset
            if served.serve_last is not None and served.serve_last != served.last_offset:
                index, headers, last = ending_with(index, headers, served.serve_last)
            ranges = plan_ranges(
                index=index,
                headers=headers,
                segment_last_offset=last,
                offset=start,
                max_bytes=max_bytes,
                range_bytes=range_bytes or self.settings.range_bytes,
            )[: max_ranges_per_plan(self.settings)]  # bounded presigns, as every source (plans.max_ranges_per_plan)
        ttl = self.settings.presign_ttl_s
        transformed: list[ChunkedRange | None] | None = None
        if manifest.encryption is not None:
            ttl = self.settings.rsm_url_ttl_s
            if self._url_secret is None or self.settings.public_url is None:  # unreachable: config requires both with a key ring
                raise GatewayError(ErrorCode.INTERNAL_ERROR, f"{segment.object_key} is encrypted: rsm_url_secret and public_url must be set")
            urls = [rsm_urls.signed_url(self.settings.public_url, self._url_secret, self.name, segment.object_key, r.start, r.end, ttl) for r in ranges]
        elif manifest.compression:
            urls, transformed = [], []
            for r in ranges:
                chunks = manifest.chunk_index.chunks_for(r.start, r.end)
                wire = ByteRange(chunks[0].transformed_position, chunks[-1].transformed_position + chunks[-1].transformed_size, r.first_offset, r.last_offset)
                urls.append(self.objects.presign(segment.object_key, wire, ttl))
                transformed.append(ChunkedRange(
                    compression="zstd", fetch_start=wire.start, fetch_end=wire.end, range_header=wire.http_range,
                    chunk_sizes=[c.transformed_size for c in chunks], original_chunk_sizes=[c.original_size for c in chunks],
                    original_start=chunks[0].original_position,
                ))
        else:
            urls = [self.objects.presign(segment.object_key, r, ttl) for r in ranges]
        return Plan(segment, ranges, urls, int(time.time() * 1000) + ttl * 1000, gap, transformed)

    # -- readiness ------------------------------------------------------------------------------
    def check(self) -> dict[str, str]:
        status = {"s3": self.objects.check()}
        try:  # the live segment list can be had (__remote_log_metadata read, or the manifests listed)
            self.catalog.partitions()
            status["segments"] = "ok"
        except TieredKafkaError as err:
            status["segments"] = f"unavailable ({self.catalog.source}): {err}"
        return status


def _remote(s: RsmSegment) -> RemoteSegment:
    """A served segment as the routes plan it: ``last_offset`` its last served offset, ``first_offset`` its first."""
    return RemoteSegment(s.log_key, s.base_offset, s.last, s.size, s.max_timestamp, first_offset=s.first_offset)


def _entry(topic: str, partition: int, s: RsmSegment) -> SegmentEntry:
    """A served segment as a registry entry (offsets by time). ``files`` always names a ``.txnindex``:
    ``aborted_txns`` reads it from ``.indexes``, empty when the segment has none."""
    return SegmentEntry(
        topic=topic, partition=partition, base_offset=s.base_offset, last_offset=s.last, object_key=s.log_key, size=s.size,
        record_count=0, min_timestamp=-1, max_timestamp=s.max_timestamp if s.max_timestamp >= 0 else NO_TIMESTAMP_BOUND,
        checksum="none:rsm", leader_epoch=max(s.max_epoch, -1), upload_time_ms=0, files=("log", "txnindex"), first_offset=s.first,
    )
