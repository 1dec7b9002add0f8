"""The registry's pure layout: key names, hash tags, ZSET members, value checks and decoding (no Redis)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tiered_kafka.errors import ConfigError, InvalidSegmentNameError
from tiered_kafka.format.segment_names import FileKind, parse_partition_dir_name, partition_dir_name
from tiered_kafka.registry._errors import MalformedRegistryDataError, RegistryValueError
from tiered_kafka.transactions import NO_OPEN_TXN, OPEN_TXN_UNKNOWN  # the rule module defines them; re-exported by the registry
from tiered_kafka.topic_names import TOPIC_NAME_RULE

DEFAULT_NAMESPACE: Final = "tk"
MAX_OFFSET: Final = 2**53 - 1
"""The largest offset the registry accepts: ZSET scores are doubles, exact up to here."""
OFFSET_WIDTH: Final = 20

OPTIONAL_SEGMENT_FIELDS: Final = (
    "aborted_txns",
    "control_records",
    "open_txn_first_offset",
    "sparse_index",
    "min_timestamp_exact",
    "first_offset",
    "range_records",
    "range_control_records",
)
"""Segment fields added later: unknown (-1; -2 for ``open_txn_first_offset``; None for ``sparse_index``; 0 for ``min_timestamp_exact``)
when an entry registered before them lacks them; ``first_offset`` reads as ``base_offset`` (a segment registered whole)."""
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
) + OPTIONAL_SEGMENT_FIELDS
"""Every segment hash field (``SegmentEntry.to_fields`` writes them in this order): the original ones, then those added later."""
PARTITION_INFO_FIELDS: Final = ("earliest_offset", "latest_offset", "segment_count", "total_bytes", "updated_ms")
SUMMARY_FIELDS: Final = ("records", "layout")
"""Fields of the ``info`` hash beside :data:`PARTITION_INFO_FIELDS` (module doc, "Layout 2"): ``records``
(records in the registered ranges, unknown counts as 0) and ``layout`` ("2" once the partition's time
index and summary are complete)."""
LAYOUT_VERSION: Final = "2"
STORED_SEGMENT_FIELDS: Final = tuple(f for f in SEGMENT_FIELDS if f != "sparse_index")
"""The segment hash fields :meth:`Registry.register` writes (layout 2: no ``sparse_index``; module doc)."""

_FILE_KIND_ORDER: Final = tuple(k.value for k in FileKind)  # log, index, timeindex, txnindex, snapshot, batchindex
_CHECKSUM_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*:\S+")
_INT_RE: Final = re.compile(r"-?[0-9]+")
_SEGMENT_MEMBER_RE: Final = re.compile(r"([0-9]{20}):([0-9]{20})")
_TIME_MEMBER_RE: Final = re.compile(r"([0-9]{20}):([0-9]{20}):(-?[0-9]+):([0-9]+)(?::(-?[0-9]+))?")

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
        raise RegistryValueError(f"invalid topic name {topic!r} ({TOPIC_NAME_RULE})")
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
    coverage: str
    times: str

    def segment(self, first_offset: int) -> str:
        """The hash of the segment registered from this offset: its ``first_offset``, which is its
        base offset unless it was registered from a later offset (a new leader's straddling segment)."""
        return f"{self.prefix}segment:{_check_offset('first offset', first_offset):0{OFFSET_WIDTH}d}"


def partition_keys(cluster: str, topic: str, partition: int, namespace: str = DEFAULT_NAMESPACE) -> PartitionKeys:
    """The keys of ``topic``-``partition`` in ``cluster`` (:func:`_partition_keys`, cached for exact
    ``str``/``int`` arguments: checked names are costly to check again in bulk registration).

    >>> partition_keys("kafkaCluster1", "orders", 3).segment(100)
    'tk:{kafkaCluster1/orders-3}:segment:00000000000000000100'
    """
    if type(partition) is int and type(topic) is str and type(cluster) is str and type(namespace) is str:
        return _cached_partition_keys(cluster, topic, partition, namespace)
    return _partition_keys(cluster, topic, partition, namespace)


def _partition_keys(cluster: str, topic: str, partition: int, namespace: str = DEFAULT_NAMESPACE) -> PartitionKeys:
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
        coverage=prefix + "coverage",
        times=prefix + "times",
    )


_cached_partition_keys = functools.lru_cache(maxsize=1 << 16)(_partition_keys)


def cluster_partitions_key(cluster: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The SET listing a cluster's partitions: ``tk:{cluster}:partitions``."""
    _check_names(cluster, namespace)
    return f"{namespace}:{{{cluster}}}:partitions"


def partition_index_key(cluster: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The ZSET ordering a cluster's partitions for paged listings: ``tk:{cluster}:partition-index``
    (every score 0, members :func:`partition_index_member`, read by ZRANGEBYLEX / ZRANGE by rank)."""
    _check_names(cluster, namespace)
    return f"{namespace}:{{{cluster}}}:partition-index"


def partition_index_member(topic: str, partition: int) -> str:
    """``"{topic} {partition:010d}"``: a space sorts below every character Kafka allows in a topic
    name, so members sort by topic, then by partition number (the listing's order and its cursor)."""
    _check_topic_partition(topic, partition)
    return f"{topic} {partition:010d}"


def parse_partition_index_member(member: str | bytes, *, key: str | None = None) -> tuple[str, int]:
    """(topic, partition) of a :func:`partition_index_member`."""
    text = _text(member)
    topic, _, number = text.rpartition(" ")
    if not topic or len(number) != 10 or not number.isdigit():
        raise MalformedRegistryDataError(f"partition index member {text!r} is not '{{topic}} {{partition:010d}}'", key=key)
    return topic, int(number)


def time_member(first_offset: int, last_offset: int, max_timestamp: int, size: int, min_timestamp: int | None = None) -> str:
    """The time index (``times`` ZSET) member: ``{first:020d}:{last:020d}:{max_timestamp}:{size}``
    (the segment member, then the segment's own max timestamp and its bytes), then
    ``:{min_timestamp}`` when the segment's min timestamp is exact (``min_timestamp_exact``: every
    record decoded); without it (unknown, or members written before it) the segment is never proven
    newer than a time (``Registry.ranges_after_time``)."""
    tail = "" if min_timestamp is None else f":{min_timestamp}"
    return f"{segment_member(first_offset, last_offset)}:{max_timestamp}:{size}{tail}"


def time_member_of(entry: Any) -> str:
    """:func:`time_member` of a ``SegmentEntry`` (its exact min timestamp, when it has one)."""
    return time_member(entry.first, entry.last_offset, entry.max_timestamp, entry.size) + time_member_tail(entry)


def time_member_tail(entry: Any) -> str:
    """The end of a ``SegmentEntry``'s time index member (:func:`time_member`): ``:{min_timestamp}``
    when its min timestamp is exact, else empty (what the register script appends)."""
    return f":{entry.min_timestamp}" if entry.min_timestamp_exact else ""


def parse_time_member(member: str | bytes, *, key: str | None = None) -> tuple[int, int, int, int, int | None]:
    """(first_offset, last_offset, max_timestamp, size, exact min_timestamp or None) of a time index member."""
    text = _text(member)
    match = _TIME_MEMBER_RE.fullmatch(text)
    if match is None:
        raise MalformedRegistryDataError(
            f"time index member {text!r} is not '{{first:020d}}:{{last:020d}}:{{max_timestamp}}:{{size}}[:{{min_timestamp}}]'", key=key)
    return int(match[1]), int(match[2]), int(match[3]), int(match[4]), None if match[5] is None else int(match[5])


def segment_member(first_offset: int, last_offset: int) -> str:
    """The segments ZSET member: ``{first:020d}:{last:020d}``, the offsets the segment is registered
    for (``first`` is the base offset of a segment registered whole)."""
    return f"{first_offset:0{OFFSET_WIDTH}d}:{last_offset:0{OFFSET_WIDTH}d}"


def parse_segment_member(member: str | bytes, *, key: str | None = None) -> tuple[int, int]:
    """(first_offset, last_offset) of a segments ZSET member."""
    text = _text(member)
    match = _SEGMENT_MEMBER_RE.fullmatch(text)
    if match is None or int(match[1]) > int(match[2]):
        raise MalformedRegistryDataError(f"segment member {text!r} is not '{{first:020d}}:{{last:020d}}'", key=key)
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
