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
    N:{C}:partitions               SET   members "T-P": partitions with entries (its own slot; may lag, below)

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
    sparse_index    the segment's sparse plan index (``tiered_kafka.format.sparse_index``: batch starts
                    at least 1 MiB apart with their base offsets, about 8 KiB per GiB of segment), as
                    base64 text; "" or absent when it has none. Written at registration when the agent
                    built a batch index, or later by ``add_files`` (``backfill-batch-index``); the
                    gateway plans a segment's first read from it without an S3 request. Optional
                    and derived: text that is not base64 reads as None (a warning, once per entry),
                    never an error of the lookup (the gateway then plans from the batch index)
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
records, ``_scripts``: the Lua scripts, ``_client``: :class:`Registry`, ``_connect``: :func:`connect`, ``_errors``); import
everything from ``tiered_kafka.registry``.
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
