"""The offset-range registry in Redis: which remote segment holds which offsets (DESIGN.md, contract 2).

The agent writes it (one :meth:`Registry.register` per uploaded segment), the gateway reads it
(offset → segment), retention deletes from it (oldest first, before deleting the objects), and a
rebuild command recreates it from S3 alone (:meth:`Registry.clear_partition`, then ``register``).
This module is the only place that knows the layout. It does not import ``redis``: pass any
redis-py compatible client (``redis.Redis``, ``redis.RedisCluster``; ``decode_responses`` either way).

Layout
======

All keys of one partition share the Redis Cluster hash tag ``{cluster/topic-partition}``
(``topic-partition`` is the partition's directory name, as in the object keyspace), so they live
in one hash slot; ``N`` below is the namespace, ``tk`` by default::

    N:{C/T-P}:segments             ZSET  member "{base:020d}:{last:020d}", score = base offset
    N:{C/T-P}:segment:{base:020d}  HASH  one per segment, fields below
    N:{C/T-P}:info                 HASH  earliest_offset, latest_offset, segment_count, total_bytes, updated_ms
    N:{C/T-P}:gaps                 ZSET  member "{start:020d}:{end:020d}", score = start offset
    N:{C/T-P}:gap-details          HASH  field = that member, value = JSON {"detected_ms": int, "reason": str}
    N:{C}:partitions               SET   members "T-P": partitions with entries (its own slot; may lag, below)

for example ``tk:{kafkaCluster1/orders-3}:segment:00000000000000000100``. Every value is a string;
integers are plain decimal (``-1`` allowed where noted). Segment hash fields (:data:`SEGMENT_FIELDS`):

    object_key      S3 key of the segment's .log object (the other files share its stem)
    base_offset     first offset of the segment (its file name)
    last_offset     last offset of its last batch (>= base_offset)
    size            bytes of the .log
    record_count    records in the segment
    min_timestamp   smallest record timestamp, ms (-1 when unknown, e.g. magic 0)
    max_timestamp   largest record timestamp, ms (-1 when unknown)
    checksum        "{algorithm}:{value}", e.g. "crc32c:1a2b3c4d", over the .log bytes
    leader_epoch    leader epoch of the segment's last batch (-1 when unknown)
    upload_time_ms  when the agent uploaded it (ms since the epoch)
    files           comma-separated file kinds uploaded, in this order: log,index,timeindex,txnindex,snapshot

Fields a reader does not know are ignored, so fields can be added without breaking old readers.

Rules
=====

- Ranges never overlap. The ZSET member carries both ends, zero-padded to 20 digits, so that
  members sort and compare as strings exactly like the numbers and the overlap check reads only the
  ZSET. Scores are IEEE doubles, exact up to 2**53 - 1 (:data:`MAX_OFFSET`); larger offsets
  (about 285 years at a million records per second) are refused rather than misordered.
- Registration is one Lua script (EVALSHA) over the partition's ZSET, the segment's hash and the
  partition hash: re-registering the same segment (same base, last offset, checksum and size) is a
  no-op that keeps the first entry; the same base offset with other content raises
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
- The cluster-wide ``partitions`` SET is updated (SADD, idempotent) in a separate step after every
  ``register`` (also a no-op one) and ``record_gap``, so it can lag: a partition appears there a
  moment after its first segment, or not at all if the writer died between the two steps. Readers
  of a known partition never consult it (they read the partition's keys directly); it only serves
  listings (:meth:`Registry.partitions`, :meth:`Registry.topics`, :meth:`Registry.dump`). A writer
  heals it by registering again, or with :meth:`Registry.ensure_listed`; a repair job with
  :meth:`Registry.discover_partitions` (a SCAN of the partitions' ``info`` keys) and ``ensure_listed``.
- The registry can be rebuilt from S3 alone: the segment facts are also the .log object's metadata.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Union

from tiered_kafka.errors import ConfigError, InvalidSegmentNameError, TieredKafkaError
from tiered_kafka.format.segment_names import FileKind, parse_partition_dir_name, partition_dir_name

if TYPE_CHECKING:  # the SDK does not depend on redis; only type checkers look here
    import redis

    RedisClient = Union[redis.Redis, redis.RedisCluster]
else:
    RedisClient = Any

__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_OFFSET",
    "SEGMENT_FIELDS",
    "Gap",
    "MalformedRegistryDataError",
    "PartitionInfo",
    "PartitionKeys",
    "Registry",
    "RegistryConflictError",
    "RegistryError",
    "RegistryUnavailableError",
    "RegistryValueError",
    "SegmentEntry",
    "SegmentOverlapError",
    "cluster_partitions_key",
    "gap_member",
    "hash_tag",
    "parse_gap_member",
    "parse_segment_member",
    "partition_keys",
    "segment_member",
]

DEFAULT_NAMESPACE: Final = "tk"
MAX_OFFSET: Final = 2**53 - 1
"""The largest offset the registry accepts: ZSET scores are doubles, exact up to here."""
OFFSET_WIDTH: Final = 20

SEGMENT_FIELDS: Final = (
    "object_key",
    "base_offset",
    "last_offset",
    "size",
    "record_count",
    "min_timestamp",
    "max_timestamp",
    "checksum",
    "leader_epoch",
    "upload_time_ms",
    "files",
)
PARTITION_INFO_FIELDS: Final = ("earliest_offset", "latest_offset", "segment_count", "total_bytes", "updated_ms")

_FILE_KIND_ORDER: Final = tuple(k.value for k in FileKind)  # log, index, timeindex, txnindex, snapshot
_CHECKSUM_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*:\S+")
_INT_RE: Final = re.compile(r"-?[0-9]+")
_SEGMENT_MEMBER_RE: Final = re.compile(r"([0-9]{20}):([0-9]{20})")
_READ_ATTEMPTS: Final = 3


# -- exceptions ----------------------------------------------------------------------------------


class RegistryError(TieredKafkaError):
    """Root of the registry's errors; also raised for Redis errors that retrying cannot fix."""


class RegistryUnavailableError(RegistryError, ConnectionError):
    """Redis could not be reached or answered "try again" (connection, timeout, loading, cluster down).

    Also a built-in :class:`ConnectionError`, so generic retry loops recognise it.
    """

    retriable = True


class RegistryValueError(RegistryError, ValueError):
    """A value handed to the registry is invalid: a topic, partition, offset or segment field."""


class MalformedRegistryDataError(RegistryError):
    """What Redis holds does not follow the layout (a missing or malformed field, member or value).

    ``key`` is the Redis key read (None when the data did not come from Redis) and ``field`` the
    hash field, when one field is at fault.
    """

    def __init__(self, message: str, *, key: str | None = None, field: str | None = None) -> None:
        where = [f"key {key!r}"] if key is not None else []
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.key = key
        self.field = field


class SegmentOverlapError(RegistryError):
    """A new segment's offset range overlaps a registered segment of the same partition.

    ``new_range`` and ``conflicting_range`` are inclusive (base_offset, last_offset) pairs.
    """

    def __init__(self, topic: str, partition: int, new_range: tuple[int, int], conflicting_range: tuple[int, int]) -> None:
        super().__init__(
            f"segment {new_range[0]}..{new_range[1]} of {topic}-{partition} overlaps the registered "
            f"segment {conflicting_range[0]}..{conflicting_range[1]}"
        )
        self.topic = topic
        self.partition = partition
        self.new_range = new_range
        self.conflicting_range = conflicting_range


class RegistryConflictError(RegistryError):
    """A segment with this base offset is registered already, with other content.

    ``existing`` is the registered entry (None if it could not be read back), ``new`` the one
    refused, ``existing_range`` the registered (base_offset, last_offset).
    """

    def __init__(self, new: SegmentEntry, existing: SegmentEntry | None, existing_range: tuple[int, int]) -> None:
        if existing is not None:
            differ = [f for f in ("last_offset", "checksum", "size") if getattr(existing, f) != getattr(new, f)]
            detail = ", ".join(f"{f} {getattr(existing, f)!r} registered, {getattr(new, f)!r} new" for f in differ)
        else:
            detail = f"registered range {existing_range[0]}..{existing_range[1]}, its details unreadable"
        super().__init__(
            f"segment {new.base_offset} of {new.topic}-{new.partition} is registered with other content ({detail})"
        )
        self.topic = new.topic
        self.partition = new.partition
        self.new = new
        self.existing = existing
        self.existing_range = existing_range


# -- pure layout: key names, members, field encoding ---------------------------------------------


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes: the text inside the first ``{...}`` if non-empty, else the key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def _check_topic_partition(topic: str, partition: int) -> str:
    """The partition's directory name ``topic-partition``, after checking both parts."""
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise RegistryValueError(f"partition must be a non-negative int, got {partition!r}")
    if not isinstance(topic, str):
        raise RegistryValueError(f"topic must be a str, got {topic!r}")
    name = partition_dir_name(topic, partition)
    try:
        parsed = parse_partition_dir_name(name)
    except InvalidSegmentNameError:
        parsed = None
    if parsed != (topic, partition):
        raise RegistryValueError(f"invalid topic name {topic!r} (Kafka allows 1-249 of [A-Za-z0-9._-])")
    return name


def _check_offset(what: str, value: int, *, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_OFFSET:
        raise RegistryValueError(f"{what} must be an int in [{minimum}, {MAX_OFFSET}], got {value!r}")
    return value


def _check_names(cluster: str, namespace: str) -> None:
    if not isinstance(cluster, str) or not cluster or any(c in cluster for c in "/{}"):
        raise ConfigError(f"cluster name {cluster!r} must be non-empty and contain none of '/', '{{', '}}'")
    if not isinstance(namespace, str) or not namespace or any(c in namespace for c in "{}"):
        raise ConfigError(f"registry namespace {namespace!r} must be non-empty and contain no '{{' or '}}'")


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    """The Redis keys of one partition; all carry the hash tag ``{cluster/topic-partition}``."""

    tag: str
    prefix: str
    segments: str
    info: str
    gaps: str
    gap_details: str

    def segment(self, base_offset: int) -> str:
        """The hash of the segment with this base offset."""
        return f"{self.prefix}segment:{_check_offset('base offset', base_offset):0{OFFSET_WIDTH}d}"


def partition_keys(cluster: str, topic: str, partition: int, namespace: str = DEFAULT_NAMESPACE) -> PartitionKeys:
    """The keys of ``topic``-``partition`` in ``cluster``.

    >>> partition_keys("kafkaCluster1", "orders", 3).segment(100)
    'tk:{kafkaCluster1/orders-3}:segment:00000000000000000100'
    """
    _check_names(cluster, namespace)
    tag = f"{cluster}/{_check_topic_partition(topic, partition)}"
    prefix = f"{namespace}:{{{tag}}}:"
    return PartitionKeys(
        tag=tag,
        prefix=prefix,
        segments=prefix + "segments",
        info=prefix + "info",
        gaps=prefix + "gaps",
        gap_details=prefix + "gap-details",
    )


def cluster_partitions_key(cluster: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The SET listing a cluster's partitions: ``tk:{cluster}:partitions``."""
    _check_names(cluster, namespace)
    return f"{namespace}:{{{cluster}}}:partitions"


def segment_member(base_offset: int, last_offset: int) -> str:
    """The segments ZSET member: ``{base:020d}:{last:020d}``."""
    return f"{base_offset:0{OFFSET_WIDTH}d}:{last_offset:0{OFFSET_WIDTH}d}"


def parse_segment_member(member: str | bytes, *, key: str | None = None) -> tuple[int, int]:
    """(base_offset, last_offset) of a segments ZSET member."""
    text = _text(member)
    match = _SEGMENT_MEMBER_RE.fullmatch(text)
    if match is None or int(match[1]) > int(match[2]):
        raise MalformedRegistryDataError(f"segment member {text!r} is not '{{base:020d}}:{{last:020d}}'", key=key)
    return int(match[1]), int(match[2])


def gap_member(start_offset: int, end_offset: int) -> str:
    """The gaps ZSET member (and gap-details field): ``{start:020d}:{end:020d}``."""
    return segment_member(start_offset, end_offset)


def parse_gap_member(member: str | bytes, *, key: str | None = None) -> tuple[int, int]:
    """(start_offset, end_offset) of a gaps ZSET member."""
    try:
        return parse_segment_member(member, key=key)
    except MalformedRegistryDataError:
        raise MalformedRegistryDataError(f"gap member {_text(member)!r} is not '{{start:020d}}:{{end:020d}}'", key=key) from None


def _text(value: str | bytes | bytearray | memoryview | int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")
    return str(value)


def _decode_mapping(mapping: Mapping[Any, Any] | Sequence[Any], key: str | None) -> dict[str, str]:
    """A hash reply (dict, or a flat [field, value, ...] list from Lua) as str → str."""
    try:
        if isinstance(mapping, Mapping):
            items: Iterable[tuple[Any, Any]] = mapping.items()
        else:
            if len(mapping) % 2:
                raise MalformedRegistryDataError("hash reply has an odd number of items", key=key)
            items = zip(mapping[0::2], mapping[1::2], strict=True)
        return {_text(k): _text(v) for k, v in items}
    except UnicodeDecodeError as err:
        raise MalformedRegistryDataError(f"hash holds bytes that are not UTF-8 ({err})", key=key) from None


def _int_field(fields: Mapping[str, str], name: str, key: str | None) -> int:
    if name not in fields:
        raise MalformedRegistryDataError("field missing", key=key, field=name)
    value = fields[name]
    if not _INT_RE.fullmatch(value):
        raise MalformedRegistryDataError(f"{value!r} is not an integer", key=key, field=name)
    return int(value)


# -- records -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentEntry:
    """One remote segment: what the agent registers and the gateway looks up.

    ``files`` lists the uploaded file kinds (:class:`FileKind` values, "log" required); it is
    normalised to plain strings in the canonical order log, index, timeindex, txnindex, snapshot.
    """

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    object_key: str
    size: int
    record_count: int
    min_timestamp: int
    max_timestamp: int
    checksum: str
    leader_epoch: int
    upload_time_ms: int
    files: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_topic_partition(self.topic, self.partition)
        _check_offset("base_offset", self.base_offset)
        _check_offset("last_offset", self.last_offset)
        if self.last_offset < self.base_offset:
            raise RegistryValueError(f"last_offset {self.last_offset} is below base_offset {self.base_offset}")
        if not isinstance(self.object_key, str) or not self.object_key or any(c in self.object_key for c in "\r\n"):
            raise RegistryValueError(f"object_key must be a non-empty one-line str, got {self.object_key!r}")
        for name in ("size", "record_count", "upload_time_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise RegistryValueError(f"{name} must be a non-negative int, got {value!r}")
        for name in ("min_timestamp", "max_timestamp", "leader_epoch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < -1:
                raise RegistryValueError(f"{name} must be an int >= -1, got {value!r}")
        if not isinstance(self.checksum, str) or not _CHECKSUM_RE.fullmatch(self.checksum):
            raise RegistryValueError(f"checksum must read '{{algorithm}}:{{value}}' (e.g. 'crc32c:1a2b3c4d'), got {self.checksum!r}")
        files = (self.files,) if isinstance(self.files, str) else self.files
        try:
            kinds = {FileKind(str(f)).value for f in files}
        except (ValueError, TypeError):
            raise RegistryValueError(f"files must be file kinds among {', '.join(_FILE_KIND_ORDER)}, got {self.files!r}") from None
        if FileKind.LOG.value not in kinds:
            raise RegistryValueError(f"files must include 'log', got {self.files!r}")
        object.__setattr__(self, "files", tuple(k for k in _FILE_KIND_ORDER if k in kinds))

    @property
    def member(self) -> str:
        """This segment's member in the segments ZSET."""
        return segment_member(self.base_offset, self.last_offset)

    @property
    def next_offset(self) -> int:
        """The first offset after this segment."""
        return self.last_offset + 1

    def contains(self, offset: int) -> bool:
        return self.base_offset <= offset <= self.last_offset

    def same_segment(self, other: SegmentEntry) -> bool:
        """True when re-registering ``other`` over this entry is a no-op (same base, last, checksum, size)."""
        return (self.topic, self.partition, self.base_offset, self.last_offset, self.checksum, self.size) == (
            other.topic,
            other.partition,
            other.base_offset,
            other.last_offset,
            other.checksum,
            other.size,
        )

    def to_fields(self) -> dict[str, str]:
        """The segment hash's fields (all strings), in :data:`SEGMENT_FIELDS` order."""
        return {
            "object_key": self.object_key,
            "base_offset": str(self.base_offset),
            "last_offset": str(self.last_offset),
            "size": str(self.size),
            "record_count": str(self.record_count),
            "min_timestamp": str(self.min_timestamp),
            "max_timestamp": str(self.max_timestamp),
            "checksum": self.checksum,
            "leader_epoch": str(self.leader_epoch),
            "upload_time_ms": str(self.upload_time_ms),
            "files": ",".join(self.files),
        }

    @classmethod
    def from_fields(
        cls, topic: str, partition: int, mapping: Mapping[str | bytes, str | bytes], *, key: str | None = None
    ) -> SegmentEntry:
        """The entry a segment hash holds; str or bytes keys and values; unknown fields are ignored.

        Raises :class:`MalformedRegistryDataError` naming ``key`` (the Redis key, when known) and the
        field when a field is missing or malformed.
        """
        fields = _decode_mapping(mapping, key)
        ints = {name: _int_field(fields, name, key) for name in SEGMENT_FIELDS if name not in ("object_key", "checksum", "files")}
        for name in ("object_key", "checksum", "files"):
            if name not in fields:
                raise MalformedRegistryDataError("field missing", key=key, field=name)
        try:
            return cls(
                topic=topic,
                partition=partition,
                object_key=fields["object_key"],
                checksum=fields["checksum"],
                files=tuple(fields["files"].split(",")) if fields["files"] else (),
                **ints,
            )
        except RegistryValueError as err:
            raise MalformedRegistryDataError(f"segment hash holds an invalid entry: {err}", key=key) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready values (files as a list), without topic and partition."""
        return {
            "base_offset": self.base_offset,
            "last_offset": self.last_offset,
            "object_key": self.object_key,
            "size": self.size,
            "record_count": self.record_count,
            "min_timestamp": self.min_timestamp,
            "max_timestamp": self.max_timestamp,
            "checksum": self.checksum,
            "leader_epoch": self.leader_epoch,
            "upload_time_ms": self.upload_time_ms,
            "files": list(self.files),
        }


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition's remote extent. Empty partitions (every segment deleted) have count 0 and offsets -1."""

    earliest_offset: int
    latest_offset: int
    segment_count: int
    total_bytes: int
    updated_ms: int

    @property
    def is_empty(self) -> bool:
        return self.segment_count == 0

    @classmethod
    def from_fields(cls, mapping: Mapping[str | bytes, str | bytes], *, key: str | None = None) -> PartitionInfo:
        fields = _decode_mapping(mapping, key)
        return cls(**{name: _int_field(fields, name, key) for name in PARTITION_INFO_FIELDS})

    def to_dict(self, *, include_updated_ms: bool = True) -> dict[str, int]:
        out = {name: getattr(self, name) for name in PARTITION_INFO_FIELDS}
        if not include_updated_ms:
            del out["updated_ms"]
        return out


@dataclass(frozen=True, slots=True)
class Gap:
    """Offsets [start_offset, end_offset] known to be missing remotely, and why."""

    start_offset: int
    end_offset: int
    reason: str
    detected_ms: int

    def contains(self, offset: int) -> bool:
        return self.start_offset <= offset <= self.end_offset

    def to_dict(self) -> dict[str, Any]:
        return {"start_offset": self.start_offset, "end_offset": self.end_offset, "reason": self.reason, "detected_ms": self.detected_ms}


def _gap_details(reason: str, detected_ms: int) -> str:
    return json.dumps({"detected_ms": detected_ms, "reason": reason}, sort_keys=True, separators=(",", ":"))


def _parse_gap(member: str, details: str, key: str | None) -> Gap:
    start, end = parse_gap_member(member, key=key)
    try:
        data = json.loads(details)
        reason, detected_ms = data["reason"], data["detected_ms"]
        if not isinstance(reason, str) or not isinstance(detected_ms, int):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise MalformedRegistryDataError(f"gap details {details!r} are not JSON with reason and detected_ms", key=key, field=member) from None
    return Gap(start, end, reason, detected_ms)


# -- Lua scripts (every key in KEYS, all with one hash tag) ---------------------------------------

_LUA_NUM = """
local function num(s)
  local t = string.gsub(s, '^0+', '')
  if t == '' then return '0' end
  return t
end
"""

_LUA_REFRESH = """
local function refresh(zkey, ikey, now)
  local first = redis.call('ZRANGE', zkey, 0, 0)[1]
  if not first then
    redis.call('HSET', ikey, 'earliest_offset', '-1', 'latest_offset', '-1', 'segment_count', '0',
               'total_bytes', '0', 'updated_ms', now)
    return
  end
  local last = redis.call('ZRANGE', zkey, -1, -1)[1]
  redis.call('HSET', ikey, 'earliest_offset', num(string.sub(first, 1, 20)),
             'latest_offset', num(string.sub(last, 22, 41)),
             'segment_count', tostring(redis.call('ZCARD', zkey)), 'updated_ms', now)
end
"""

# KEYS: segments zset, segment hash, info hash.
# ARGV: member, base, last, size, checksum, now_ms, field1, value1, ...  (all strings)
# Returns {'registered'} | {'noop'} | {'conflict', member, hash field/values...} | {'overlap', member}
_REGISTER_LUA = (
    _LUA_NUM
    + _LUA_REFRESH
    + """
local zkey, hkey, ikey = KEYS[1], KEYS[2], KEYS[3]
local member, base, last, size, checksum, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local pbase, plast = string.sub(member, 1, 20), string.sub(member, 22, 41)
local prev = redis.call('ZREVRANGEBYSCORE', zkey, base, '-inf', 'LIMIT', 0, 1)[1]
if prev then
  if string.sub(prev, 1, 20) == pbase then
    local cur = redis.call('HMGET', hkey, 'last_offset', 'checksum', 'size')
    if prev == member and cur[1] == last and cur[2] == checksum and cur[3] == size then
      return {'noop'}
    end
    local reply = {'conflict', prev}
    for _, v in ipairs(redis.call('HGETALL', hkey)) do reply[#reply + 1] = v end
    return reply
  end
  if string.sub(prev, 22, 41) >= pbase then return {'overlap', prev} end
end
local nxt = redis.call('ZRANGEBYSCORE', zkey, '(' .. base, '+inf', 'LIMIT', 0, 1)[1]
if nxt and string.sub(nxt, 1, 20) <= plast then return {'overlap', nxt} end
redis.call('ZADD', zkey, base, member)
redis.call('DEL', hkey)
redis.call('HSET', hkey, unpack(ARGV, 7))
refresh(zkey, ikey, now)
redis.call('HINCRBY', ikey, 'total_bytes', size)
return {'registered'}
"""
)

# KEYS: segments zset, segment hash, info hash, gaps zset, gap-details hash.  ARGV: base, now_ms.
# Returns false (nothing there) or {member, hash field/values...}.
_DELETE_LUA = (
    _LUA_NUM
    + _LUA_REFRESH
    + """
local zkey, hkey, ikey, gkey, dkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member = redis.call('ZRANGEBYSCORE', zkey, ARGV[1], ARGV[1], 'LIMIT', 0, 1)[1]
if not member then return false end
local fields = redis.call('HGETALL', hkey)
local size = redis.call('HGET', hkey, 'size')
redis.call('ZREM', zkey, member)
redis.call('DEL', hkey)
refresh(zkey, ikey, ARGV[2])
local first = redis.call('ZRANGE', zkey, 0, 0)[1]
if first then
  if size then redis.call('HINCRBY', ikey, 'total_bytes', '-' .. size) end
end
-- forget gaps retention has moved past: ending before the new earliest offset (or, with no
-- segment left, at or before the deleted segment's last offset); compared as 20-digit strings
local bound, inclusive = string.sub(member, 22, 41), true
if first then bound, inclusive = string.sub(first, 1, 20), false end
for _, g in ipairs(redis.call('ZRANGEBYSCORE', gkey, '-inf', num(bound))) do
  local gend = string.sub(g, 22, 41)
  if gend < bound or (inclusive and gend == bound) then
    redis.call('ZREM', gkey, g)
    redis.call('HDEL', dkey, g)
  end
end
local reply = {member}
for _, v in ipairs(fields) do reply[#reply + 1] = v end
return reply
"""
)

# KEYS: gaps zset, gap-details hash.  ARGV: member, start, details JSON.  Returns 1 (added) or 0.
_GAP_LUA = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""

# KEYS: segments zset, info hash, gaps zset, gap-details hash, then the segment hashes.
# ARGV: the segments zset's members as read before. Deletes everything only if the zset still
# holds exactly those members (else returns -1: read again); returns the number of segments.
_CLEAR_LUA = """
local current = redis.call('ZRANGE', KEYS[1], 0, -1)
if #current ~= #ARGV then return -1 end
for i = 1, #ARGV do
  if current[i] ~= ARGV[i] then return -1 end
end
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return #ARGV
"""


# -- errors from the client -----------------------------------------------------------------------


def _redis_exceptions() -> Any:
    try:
        import redis.exceptions
    except ImportError:  # a compatible client without redis-py: leave its errors alone
        return None
    return redis.exceptions


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """Turn redis-py's errors into registry errors (retriable ones into RegistryUnavailableError)."""
    try:
        yield
    except TieredKafkaError:
        raise
    except Exception as err:
        rx = _redis_exceptions()
        if rx is None or not isinstance(err, rx.RedisError):
            raise
        transient = (rx.ConnectionError, rx.TimeoutError, rx.ClusterError, rx.TryAgainError, rx.ReadOnlyError)
        if isinstance(err, transient):
            raise RegistryUnavailableError(f"{what}: Redis unavailable: {err}") from err
        raise RegistryError(f"{what}: Redis error: {err}") from err


# -- the registry ---------------------------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Registry:
    """The offset-range registry of one Kafka cluster, over a redis-py compatible client.

    ``client`` is a ``redis.Redis`` or ``redis.RedisCluster`` (or anything with the same command
    methods, ``register_script`` and ``pipeline``); ``decode_responses`` may be on or off.
    ``clock`` gives the milliseconds written as ``updated_ms`` and ``detected_ms``.
    Thread-safe as far as the client is (redis-py clients are).
    """

    def __init__(
        self,
        client: RedisClient,
        cluster: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        _check_names(cluster, namespace)
        self.client = client
        self.cluster = cluster
        self.namespace = namespace
        self._clock = clock
        self._register = client.register_script(_REGISTER_LUA)
        self._delete = client.register_script(_DELETE_LUA)
        self._gap = client.register_script(_GAP_LUA)
        self._clear = client.register_script(_CLEAR_LUA)

    def __repr__(self) -> str:
        return f"Registry(cluster={self.cluster!r}, namespace={self.namespace!r})"

    # -- keys --------------------------------------------------------------------------------------
    def keys(self, topic: str, partition: int) -> PartitionKeys:
        return partition_keys(self.cluster, topic, partition, self.namespace)

    @property
    def partitions_key(self) -> str:
        return cluster_partitions_key(self.cluster, self.namespace)

    # -- writes ------------------------------------------------------------------------------------
    def register(self, entry: SegmentEntry) -> bool:
        """Register ``entry``: True if added, False if this very segment was registered already.

        Raises :class:`RegistryConflictError` (same base offset, other last offset, checksum or
        size) or :class:`SegmentOverlapError` (range overlaps another segment). Afterwards, also
        after a no-op, the partition is added to the cluster's partition set.
        """
        keys = self.keys(entry.topic, entry.partition)
        flat = [part for item in entry.to_fields().items() for part in item]
        args = [entry.member, str(entry.base_offset), str(entry.last_offset), str(entry.size), entry.checksum, str(self._clock()), *flat]
        what = f"register {entry.topic}-{entry.partition} segment {entry.base_offset}"
        with _translated(what):
            reply = self._register(keys=[keys.segments, keys.segment(entry.base_offset), keys.info], args=args)
        status = _text(reply[0])
        if status == "overlap":
            other = parse_segment_member(reply[1], key=keys.segments)
            raise SegmentOverlapError(entry.topic, entry.partition, (entry.base_offset, entry.last_offset), other)
        if status == "conflict":
            existing_range = parse_segment_member(reply[1], key=keys.segments)
            try:
                existing: SegmentEntry | None = SegmentEntry.from_fields(
                    entry.topic, entry.partition, reply[2:], key=keys.segment(entry.base_offset)
                )
            except MalformedRegistryDataError:
                existing = None
            raise RegistryConflictError(entry, existing, existing_range)
        if status not in ("registered", "noop"):
            raise MalformedRegistryDataError(f"unexpected reply {reply!r} from the register script", key=keys.segments)
        self.ensure_listed(entry.topic, entry.partition)
        return status == "registered"

    def ensure_listed(self, topic: str, partition: int) -> None:
        """Add the partition to the cluster's partition set (SADD; idempotent)."""
        name = _check_topic_partition(topic, partition)
        with _translated(f"list {name}"):
            self.client.sadd(self.partitions_key, name)

    def record_gap(self, topic: str, partition: int, start: int, end: int, reason: str, *, detected_ms: int | None = None) -> bool:
        """Record offsets [start, end] as missing remotely for good; False if that range was recorded already."""
        keys = self.keys(topic, partition)
        _check_offset("gap start", start)
        _check_offset("gap end", end)
        if end < start:
            raise RegistryValueError(f"gap end {end} is below its start {start}")
        if not isinstance(reason, str) or not reason:
            raise RegistryValueError(f"gap reason must be a non-empty str, got {reason!r}")
        detected = self._clock() if detected_ms is None else detected_ms
        member = gap_member(start, end)
        with _translated(f"record gap {start}..{end} of {topic}-{partition}"):
            added = self._gap(keys=[keys.gaps, keys.gap_details], args=[member, str(start), _gap_details(reason, detected)])
        self.ensure_listed(topic, partition)
        return bool(int(added))

    def delete_segment(self, topic: str, partition: int, base_offset: int) -> SegmentEntry | None:
        """Remove the segment with this base offset; returns what was removed, or None if nothing was.

        The partition hash is recomputed (see the module doc for an emptied partition) and gaps that
        retention has moved past are forgotten.
        """
        keys = self.keys(topic, partition)
        what = f"delete {topic}-{partition} segment {base_offset}"
        with _translated(what):
            reply = self._delete(
                keys=[keys.segments, keys.segment(base_offset), keys.info, keys.gaps, keys.gap_details],
                args=[str(base_offset), str(self._clock())],
            )
        if not reply:
            return None
        if len(reply) == 1:  # the member had no hash (never written by this module): removed all the same
            return None
        return SegmentEntry.from_fields(topic, partition, reply[1:], key=keys.segment(base_offset))

    def clear_partition(self, topic: str, partition: int) -> int:
        """Delete every key of the partition (segments, info, gaps); returns how many segments there were.

        Used by rebuild. Atomic within the partition; the partition is then removed from the cluster's
        partition set (a separate step).
        """
        keys = self.keys(topic, partition)
        name = partition_dir_name(topic, partition)
        with _translated(f"clear {name}"):
            for _ in range(100):
                members = [_text(m) for m in self.client.zrange(keys.segments, 0, -1)]
                seg_keys = [keys.segment(parse_segment_member(m, key=keys.segments)[0]) for m in members]
                count = int(self._clear(keys=[keys.segments, keys.info, keys.gaps, keys.gap_details, *seg_keys], args=members))
                if count >= 0:
                    self.client.srem(self.partitions_key, name)
                    return count
        raise RegistryUnavailableError(f"clear {name}: the partition kept changing under concurrent writes")

    # -- reads -------------------------------------------------------------------------------------
    def find(self, topic: str, partition: int, offset: int) -> SegmentEntry | None:
        """The segment whose [base_offset, last_offset] holds ``offset``; None in a gap or outside."""
        keys = self.keys(topic, partition)
        _check_offset("offset", offset)
        with _translated(f"find {topic}-{partition} offset {offset}"):
            for _ in range(_READ_ATTEMPTS):
                found = self.client.zrevrangebyscore(keys.segments, offset, "-inf", start=0, num=1)
                if not found:
                    return None
                base, last = parse_segment_member(found[0], key=keys.segments)
                if last < offset:
                    return None
                entries = self._load(topic, partition, keys, [found[0]])
                if entries is not None:
                    return entries[0] if entries else None
        raise MalformedRegistryDataError("segment listed without its hash", key=keys.segments)

    def next_segment(self, topic: str, partition: int, offset: int) -> SegmentEntry | None:
        """The first segment with base_offset > ``offset`` (to read on past a gap); None if none.

        ``offset`` may be -1: the partition's first segment."""
        _check_offset("offset", offset, minimum=-1)
        entries = self._range(topic, partition, f"({offset}", "+inf", 1, what=f"next segment of {topic}-{partition} after {offset}")
        return entries[0] if entries else None

    def segments(
        self,
        topic: str,
        partition: int,
        *,
        from_offset: int | None = None,
        to_offset: int | None = None,
        limit: int | None = None,
    ) -> list[SegmentEntry]:
        """Segments by base offset: from the one holding ``from_offset`` (or the next after it),
        through the last one starting at or before ``to_offset``, at most ``limit`` of them."""
        keys = self.keys(topic, partition)
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise RegistryValueError(f"limit must be a non-negative int, got {limit!r}")
        if limit == 0:
            return []
        low = "-inf"
        if from_offset is not None:
            _check_offset("from_offset", from_offset)
            with _translated(f"segments of {topic}-{partition}"):
                found = self.client.zrevrangebyscore(keys.segments, from_offset, "-inf", start=0, num=1)
            low = f"({from_offset}"
            if found:
                base, last = parse_segment_member(found[0], key=keys.segments)
                if last >= from_offset:
                    low = str(base)
        high = "+inf" if to_offset is None else str(_check_offset("to_offset", to_offset))
        return self._range(topic, partition, low, high, limit, what=f"segments of {topic}-{partition}")

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        """The partition's extent, or None if nothing was ever registered for it."""
        keys = self.keys(topic, partition)
        with _translated(f"info of {topic}-{partition}"):
            fields = self.client.hgetall(keys.info)
        return PartitionInfo.from_fields(fields, key=keys.info) if fields else None

    def gaps(self, topic: str, partition: int) -> list[Gap]:
        """The partition's recorded gaps, by start offset."""
        keys = self.keys(topic, partition)
        with _translated(f"gaps of {topic}-{partition}"):
            details = self.client.hgetall(keys.gap_details)
        gaps = [_parse_gap(m, d, keys.gap_details) for m, d in _decode_mapping(details, keys.gap_details).items()]
        return sorted(gaps, key=lambda g: (g.start_offset, g.end_offset))

    def partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition) in the cluster's partition set, sorted (the set may lag; module doc)."""
        with _translated(f"partitions of {self.cluster}"):
            names = self.client.smembers(self.partitions_key)
        out = []
        for name in names:
            try:
                out.append(parse_partition_dir_name(_text(name)))
            except InvalidSegmentNameError as err:
                raise MalformedRegistryDataError(f"member {_text(name)!r} is not 'topic-partition'", key=self.partitions_key) from err
        return sorted(out)

    def topics(self) -> dict[str, list[int]]:
        """Topic → sorted partitions, from :meth:`partitions`."""
        out: dict[str, list[int]] = {}
        for topic, partition in self.partitions():
            out.setdefault(topic, []).append(partition)
        return out

    def discover_partitions(self) -> list[tuple[str, int]]:
        """The partitions that have an ``info`` key, found by SCAN (slow: every key is visited).

        For repair jobs only, to re-add partitions the partition set missed (:meth:`ensure_listed`).
        """
        pattern = f"{_glob_escape(self.namespace)}:{{{_glob_escape(self.cluster)}/*}}:info"
        prefix, suffix = f"{self.namespace}:{{{self.cluster}/", "}:info"
        found = set()
        with _translated(f"scan {self.cluster}"):
            for raw in self.client.scan_iter(match=pattern, count=1000):
                key = _text(raw)
                if key.startswith(prefix) and key.endswith(suffix):
                    with contextlib.suppress(InvalidSegmentNameError):
                        found.add(parse_partition_dir_name(key[len(prefix) : -len(suffix)]))
        return sorted(found)

    def dump(self, topics: Iterable[str] | str | None = None, *, include_gaps: bool = True, include_updated_ms: bool = False) -> dict[str, Any]:
        """A canonical, comparable (and JSON-ready) dump of what is registered for the cluster.

        ``{"cluster": C, "partitions": {"T-P": {"info": {...} | None, "segments": [{...}, ...],
        "gaps": [{...}, ...]}}}`` for the partitions of the partition set (optionally only those of
        ``topics``), by (topic, partition); segments by base offset, gaps by start. ``updated_ms``
        (when the registry was last written, not a fact about the data) is left out unless asked
        for; ``include_gaps=False`` leaves out gaps, which S3 alone cannot reproduce.
        """
        wanted = None if topics is None else {topics} if isinstance(topics, str) else set(topics)
        partitions: dict[str, Any] = {}
        for topic, partition in self.partitions():
            if wanted is not None and topic not in wanted:
                continue
            info = self.partition_info(topic, partition)
            item: dict[str, Any] = {
                "info": None if info is None else info.to_dict(include_updated_ms=include_updated_ms),
                "segments": [e.to_dict() for e in self.segments(topic, partition)],
            }
            if include_gaps:
                item["gaps"] = [g.to_dict() for g in self.gaps(topic, partition)]
            partitions[partition_dir_name(topic, partition)] = item
        return {"cluster": self.cluster, "partitions": partitions}

    # -- helpers -----------------------------------------------------------------------------------
    def _range(self, topic: str, partition: int, low: str, high: str, limit: int | None, *, what: str) -> list[SegmentEntry]:
        keys = self.keys(topic, partition)
        with _translated(what):
            for _ in range(_READ_ATTEMPTS):
                if limit is None:
                    members = self.client.zrangebyscore(keys.segments, low, high)
                else:
                    members = self.client.zrangebyscore(keys.segments, low, high, start=0, num=limit)
                entries = self._load(topic, partition, keys, members)
                if entries is not None:
                    return entries
        raise MalformedRegistryDataError("segments listed without their hashes", key=keys.segments)

    def _load(self, topic: str, partition: int, keys: PartitionKeys, members: Sequence[Any]) -> list[SegmentEntry] | None:
        """The entries of these members, leaving out segments deleted meanwhile; None: read again
        (a member without its hash is still listed, which only a racing delete-and-re-register explains)."""
        if not members:
            return []
        bases = [parse_segment_member(m, key=keys.segments)[0] for m in members]
        pipe = self.client.pipeline(transaction=False)
        for base in bases:
            pipe.hgetall(keys.segment(base))
        hashes = pipe.execute()
        missing = [m for m, h in zip(members, hashes, strict=True) if not h]
        if missing:
            pipe = self.client.pipeline(transaction=False)
            for m in missing:
                pipe.zscore(keys.segments, m)
            if any(score is not None for score in pipe.execute()):
                return None
        return [
            SegmentEntry.from_fields(topic, partition, h, key=keys.segment(base))
            for base, h in zip(bases, hashes, strict=True)
            if h
        ]


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
