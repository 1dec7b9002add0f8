"""The offset-range registry in Redis: which remote segment holds which offsets (DESIGN.md, contract 2).

The agent writes it (one :meth:`Registry.register` per uploaded segment), the gateway reads it
(offset → segment), retention deletes from it (oldest first, before deleting the objects), and a
rebuild command recreates it from S3 alone (:meth:`Registry.clear_partition`, then ``register``).
This module is the only place that knows the layout. It does not import ``redis``: pass any
redis-py compatible client (``redis.Redis``, ``redis.RedisCluster``; ``decode_responses`` either way).
Processes build theirs from configuration with :func:`connect` (``redis://``, ``rediss://``,
``unix://`` for one Redis, ``redis+cluster://host:port[,host:port...]`` for a Redis Cluster; ``_connect``).

Layout
======

All keys of one partition share the Redis Cluster hash tag ``{cluster/topic-partition}``
(``topic-partition`` is the partition's directory name, as in the object keyspace), so they live
in one hash slot; ``N`` below is the namespace, ``tk`` by default::

    N:{C/T-P}:segments             ZSET  member "{first:020d}:{last:020d}", score = first offset
    N:{C/T-P}:segment:{first:020d} HASH  one per segment, fields below (first = first_offset, below)
    N:{C/T-P}:info                 HASH  earliest_offset, latest_offset, segment_count, total_bytes, updated_ms
    N:{C/T-P}:gaps                 ZSET  member "{start:020d}:{end:020d}", score = start offset
    N:{C/T-P}:gap-details          HASH  field = that member, value = JSON {"detected_ms": int, "reason": str}
    N:{C/T-P}:coverage             HASH  start_offset, observed_ms, next_offset, expired_until (below)
    N:{C/T-P}:times                ZSET  the time index (layout 2, below): member "{first:020d}:{last:020d}:{max_timestamp}:{size}",
                                         then ":{min_timestamp}" when that is exact (min_timestamp_exact);
                                         score = running max of max_timestamp up to that segment, in offset order
    N:{C}:partitions               SET   members "T-P": partitions with entries (its own slot; may lag, below)
    N:{C}:partition-index          ZSET  members "{topic} {partition:010d}", score 0: the same partitions, ordered (layout 2)

for example ``tk:{kafkaCluster1/orders-3}:segment:00000000000000000100``. Every value is a string;
integers are plain decimal (``-1`` allowed where noted). Segment hash fields (:data:`SEGMENT_FIELDS`):

    object_key      S3 key of the segment's .log object (the other files share its stem)
    base_offset     first offset of the segment (its file name, and its object's)
    first_offset    first offset the segment is registered for: base_offset, or (a new leader's segment
                    straddling offsets another leader's segments hold) the first offset not registered
                    before; absent (entries from before it) reads as base_offset. Ranges, lookups and
                    overlap checks are [first_offset, last_offset]; readers start at the batch holding it
    last_offset     last offset of its last batch (>= base_offset)
    size            bytes of the .log
    record_count    records in the segment
    min_timestamp   smallest record timestamp, ms (-1 when unknown, e.g. magic 0); a lower bound only
                    when ``min_timestamp_exact`` is 1 (older entries hold the smallest batch *base*
                    timestamp, and a later record of a batch may be older)
    max_timestamp   largest record timestamp, ms (-1 when unknown)
    checksum        "{algorithm}:{value}", e.g. "crc32c:1a2b3c4d", over the .log bytes
    leader_epoch    leader epoch of the segment's last batch (-1 when unknown)
    upload_time_ms  when the agent uploaded it (ms since the epoch)
    files           comma-separated file kinds uploaded, in this order: log,index,timeindex,txnindex,snapshot,
                    batchindex (format.batch_index; added by ``add_files`` when backfilled)
    aborted_txns    entries (AbortedTxn) in the segment's .txnindex; 0 when it has none (-1 unknown)
    control_records control records (COMMIT/ABORT markers) in the segment's batches (-1 unknown)
    open_txn_first_offset  first offset of the earliest transaction still open after the segment
                    (from the producer snapshot at its end); -1 none open, -2 unknown
    sparse_index    written by the layout before 2 only (layout 2 stores none: below): the segment's
                    sparse plan index (``tiered_kafka.format.sparse_index``) as base64 text. Still read
                    (``SegmentEntry.sparse_index``) from entries not migrated yet; text that is not
                    base64 reads as None (a warning, once per entry), never an error of the lookup
    min_timestamp_exact  "1": ``min_timestamp`` is exact, every record decoded
                    (``tiered_kafka_agent.local_segments.MinTimestamp``); "0" or absent (entries
                    from before it): not a bound. Also the .log object's ``tk-min-timestamp-exact``
    range_records, range_control_records  records and control records in the batches from
                    first_offset on, when it is above base_offset (-1 unknown, and for an entry
                    registered whole: ``SegmentEntry.records_in_range`` reads record_count then)

``aborted_txns`` and ``control_records`` came later: an entry registered before them lacks them
and reads as -1 (``open_txn_first_offset``, later still: -2; ``sparse_index``, later again: None;
``min_timestamp_exact``, last: 0). A segment holds aborted transactions when ``aborted_txns`` > 0.

Coverage hash fields (DESIGN.md, contract 5; :class:`Coverage`), in their own key so that remote
retention deleting every segment (and the ``info`` hash's extent with it) keeps them:

    start_offset    the coverage start: the log start offset an agent observed when it first began
                    following the partition; set once, the first observation wins
    observed_ms     when that was (ms since the epoch)
    next_offset     the first offset after everything ever registered or recorded as a gap; only
                    ever raised (by ``register`` and ``record_gap``), never lowered by deletions
    expired_until   offsets below it were deleted by remote retention: raised when the oldest
                    segment is deleted, to the new earliest offset (or past the deleted one)

Fields a reader does not know are ignored, so fields can be added without breaking old readers.

Layout 2 (issue 34: 100,000 partitions, 10 million segments)
============================================================

Every request and every pass costs what it touches, not the cluster's history:

- **No sparse index in Redis.** It was 8 KiB (11 KB of base64) per 1 GiB segment, over Redis's 64-byte
  limit for compact hashes, so every segment hash was a full hash table: 14,294 bytes a segment. Decision:
  it lives in S3 already, as the batch index it is derived from (``{base}.batchindex``, uploaded beside the
  segment): the gateway's first plan of a segment GETs that (one S3 request, the bar of the issue; 1 GET per
  GiB, far under the 130 per GB of #15) and keeps the derived sparse digest in its own cache
  (``cache.sparse_index_bytes``), so a later first plan after the large batch index was evicted needs no
  GET. A coarser form in Redis was rejected: even 16 MiB spacing costs 500+ bytes a segment and makes small
  cold plans impossible. :meth:`Registry.register` and :meth:`Registry.add_files` keep their signatures
  and do not store it. Without it a segment hash (18 short fields) is a listpack: with its ZSET member
  and its time index member, under 1,024 bytes a segment (``bench/bench_registry_scale.py``). An object
  key over 64 bytes (a long topic name, a long prefix) makes that hash a hash table again (Redis's
  ``hash-max-listpack-value``): raise that setting for such clusters.
- **Time index** ``times``: scored by the *running* max timestamp, so its order is the offset order
  (ties sort by member, i.e. by first offset) and the first member scored >= T is the first segment whose
  own ``max_timestamp`` >= T (Kafka's ListOffsets rule): :meth:`Registry.segment_at_time` is one
  ZRANGEBYSCORE, logarithmic. The members before it are the segments proven older than T
  (:meth:`Registry.ranges_before_time`: offsets and sizes without reading an entry). Members end with the
  segment's exact min timestamp, when it has one, so that the run of *last* segments whose records are all
  newer than T is read from the end of the index without reading an entry either
  (:meth:`Registry.ranges_after_time`: a time range's reader skips both runs; members written before the
  min timestamp joined them end that run early, never wrongly). Kept by the register
  script (a segment registered out of order raises the scores after it that are lower) and the delete
  script (lowers the ones after it until one keeps its score). ``-1`` (unknown) counts as -1.
- **Summaries** in the ``info`` hash, kept by the same scripts: ``records`` (records in the registered
  ranges, unknown counts 0) and ``layout`` "2" (this partition's time index and summary are complete).
  :meth:`Registry.summaries` reads a page of partitions in two pipelined round trips (with the oldest
  segment's timestamps and the newest max timestamp): what the coverage pages and remote retention read.
- **Listings**: the ``partition-index`` ZSET orders the partitions (topic, then partition number; a space
  sorts below every character of a topic name) for :meth:`Registry.partitions_page` (after a cursor, or
  from a rank) and :meth:`Registry.partition_count` (ZCARD / ZLEXCOUNT): a page costs the page. It is
  written beside the ``partitions`` SET (one pipelined round trip, the same slot) and lags like it.
- **Pipelined registration**: :meth:`Registry.register_many` (rebuild, adoption) sends a batch of register
  scripts in one round trip.
- **Migration** (``_migrate``, :meth:`Registry.migrate`, ``tiered-kafka-agent migrate-registry``): in
  place, resumable, partition by partition: the partition index filled from the SET; each partition not
  at ``layout`` 2 has its segment hashes rewritten without ``sparse_index`` (so Redis stores them compactly
  again) and its time index and summary written, in one script that checks the segments did not change.
  Until then everything is read as before: entries (their sparse index too), time lookups and summaries
  by a scan of that partition, listings from the SET. A partition registered first by layout 2 code is at
  layout 2 from its first segment.

Rules
=====

- Ranges never overlap. The ZSET member carries both ends, zero-padded to 20 digits, so that
  members sort and compare as strings exactly like the numbers and the overlap check reads only the
  ZSET. Scores are IEEE doubles, exact up to 2**53 - 1 (:data:`MAX_OFFSET`); larger offsets
  (about 285 years at a million records per second) are refused rather than misordered.
- Registration is one Lua script (EVALSHA) over the partition's ZSET, the segment's hash and the
  partition hash: re-registering the same segment (same first, base and last offset, checksum and size) is a
  no-op that keeps the first entry; the same first offset with other content raises
  :class:`RegistryConflictError`; a range overlapping another segment's raises
  :class:`SegmentOverlapError` naming both ranges. The partition hash is recomputed in the same
  script: ``earliest_offset`` = smallest base, ``latest_offset`` = largest last offset,
  ``segment_count``, ``total_bytes`` (sum of sizes), ``updated_ms`` (the writer's clock).
- ``delete_segment`` removes one segment in one script and recomputes the partition hash. Deleting
  the last segment leaves the hash with ``segment_count`` 0, ``total_bytes`` 0 and ``earliest_offset``
  = ``latest_offset`` = -1 (the partition is known but holds nothing remotely). It also forgets
  gaps that end before the new earliest offset (retention has moved past them; with no segment
  left, gaps ending at or before the deleted segment's last offset).
- A gap is a range of offsets known to be missing remotely for good (e.g. deleted by retention
  before it could be uploaded). Gaps are advisory: they explain why :meth:`Registry.find` returns
  None, readers skip them with :meth:`Registry.next_segment`, and segments always win (a gap may
  overlap a segment, e.g. one uploaded by another leader; nothing is checked or removed). Recording
  the same range again is a no-op that keeps the first reason.
- No command and no script touches keys of two partitions: each script declares all its keys in
  KEYS and they share one hash tag. Reads that need a key named by a value (the segment hashes
  named by ZSET members) take two round trips; a segment deleted between them is left out.
- The coverage start is set by one script (set if absent, returns the stored one). Coverage holds
  for every offset at or after it: each is in a registered segment, still in Kafka (at or above
  the broker's log start), in a recorded gap, or below ``expired_until``; ``tiered-kafka-agent
  audit`` checks exactly that.
- The cluster-wide ``partitions`` SET is updated (SADD, idempotent) in a separate step after every
  ``register`` (also a no-op one), ``record_gap`` and ``set_coverage_start``, so it can lag: a partition appears there a
  moment after its first segment, or not at all if the writer died between the two steps. Readers
  of a known partition never consult it (they read the partition's keys directly); it only serves
  listings (:meth:`Registry.partitions`, :meth:`Registry.topics`, :meth:`Registry.dump`). A writer
  heals it by registering again, or with :meth:`Registry.ensure_listed`; a repair job with
  :meth:`Registry.discover_partitions` (a SCAN of the partitions' ``info``, ``gaps`` and ``coverage``
  keys) and ``ensure_listed``.
- The registry can be rebuilt from S3 alone: the segment facts are also the .log object's metadata,
  gaps and the coverage start have their own objects (``tiered_kafka.keyspace``).

The implementation is split into private modules (``_layout``: keys and members, ``_entries``:
records, ``_scripts``: the Lua scripts, ``_store``: the keys and segment reads both readers below
share, ``_client``: :class:`Registry` (writes, lookups), ``_paged``: its paged reads (a collaborator
over the same store), ``_migrate``: layout 2's migration, ``_connect``: :func:`connect`,
``_errors``); import everything from ``tiered_kafka.registry``.
"""
from tiered_kafka.registry._client import Registry, RedisClient
from tiered_kafka.registry._connect import LazyRedisCluster, check_url, connect, describe_url, is_cluster_url
from tiered_kafka.registry._entries import Coverage, CoverageStart, Gap, PartitionInfo, PartitionSummary, SegmentEntry
from tiered_kafka.registry._errors import (
    MalformedRegistryDataError,
    RegistryConflictError,
    RegistryError,
    RegistryUnavailableError,
    RegistryValueError,
    SegmentOverlapError,
)
from tiered_kafka.registry._migrate import MigrationReport
from tiered_kafka.registry._layout import (
    DEFAULT_NAMESPACE,
    LAYOUT_VERSION,
    MAX_OFFSET,
    NO_OPEN_TXN,
    OPEN_TXN_UNKNOWN,
    OPTIONAL_SEGMENT_FIELDS,
    PARTITION_INFO_FIELDS,
    SEGMENT_FIELDS,
    PartitionKeys,
    cluster_partitions_key,
    gap_member,
    hash_tag,
    parse_gap_member,
    parse_partition_index_member,
    parse_segment_member,
    parse_time_member,
    partition_index_key,
    partition_index_member,
    partition_keys,
    segment_member,
    time_member,
    time_member_of,
)

__all__ = [
    "DEFAULT_NAMESPACE",
    "LAYOUT_VERSION",
    "MigrationReport",
    "PartitionSummary",
    "parse_partition_index_member",
    "partition_index_key",
    "partition_index_member",
    "time_member",
    "time_member_of",
    "parse_time_member",
    "MAX_OFFSET",
    "NO_OPEN_TXN",
    "OPEN_TXN_UNKNOWN",
    "OPTIONAL_SEGMENT_FIELDS",
    "PARTITION_INFO_FIELDS",
    "SEGMENT_FIELDS",
    "Coverage",
    "CoverageStart",
    "Gap",
    "LazyRedisCluster",
    "MalformedRegistryDataError",
    "PartitionInfo",
    "PartitionKeys",
    "RedisClient",
    "Registry",
    "RegistryConflictError",
    "RegistryError",
    "RegistryUnavailableError",
    "RegistryValueError",
    "SegmentEntry",
    "SegmentOverlapError",
    "check_url",
    "cluster_partitions_key",
    "connect",
    "describe_url",
    "gap_member",
    "hash_tag",
    "is_cluster_url",
    "parse_gap_member",
    "parse_segment_member",
    "partition_keys",
    "segment_member",
]
