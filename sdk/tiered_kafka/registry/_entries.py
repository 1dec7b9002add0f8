"""The registry's records: a segment entry, a partition's extent, a gap, the coverage start."""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.registry._errors import MalformedRegistryDataError, RegistryValueError
from tiered_kafka.registry._layout import (
    _CHECKSUM_RE,
    _FILE_KIND_ORDER,
    OPEN_TXN_UNKNOWN,
    OPTIONAL_SEGMENT_FIELDS,
    PARTITION_INFO_FIELDS,
    SEGMENT_FIELDS,
    _check_offset,
    _check_topic_partition,
    _decode_mapping,
    _int_field,
    parse_gap_member,
    segment_member,
)

log = logging.getLogger(__name__)


# -- records -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentEntry:
    """One remote segment: what the agent registers and the gateway looks up.

    ``files`` lists the uploaded file kinds (:class:`FileKind` values, "log" required); it is
    normalised to plain strings in the canonical order log, index, timeindex, txnindex, snapshot.
    ``aborted_txns`` is the number of entries (AbortedTxn) in the segment's ``.txnindex`` (0 when
    it has none) and ``control_records`` the number of control records (transaction markers) in
    its batches; -1 means unknown (entries registered before these fields existed).
    ``open_txn_first_offset`` is the first offset of the earliest transaction still open after the
    segment's last offset (the smallest ``currentTxnFirstOffset`` of the producer snapshot taken at
    its end), :data:`NO_OPEN_TXN` (-1) when none is open, :data:`OPEN_TXN_UNKNOWN` (-2) when
    unknown (no snapshot, a snapshot contradicting the batches, an entry from before the field).
    The remote last stable offset is computed from it (``tiered_kafka.transactions``).
    ``sparse_index`` is the segment's sparse plan index (``tiered_kafka.format.sparse_index``
    layout, opaque here; stored as base64 text), None when the entry has none (registered before
    it, or a segment without a batch index).
    ``min_timestamp_exact``: ``min_timestamp`` is the smallest record timestamp, every record
    decoded (the agent since the field exists); False (entries from before it): it is the smallest
    batch base timestamp, not a lower bound (a later record of a batch may be older).
    ``first_offset`` is the first offset the segment is registered for: its ``base_offset``
    (None is normalised to it) unless a new leader's segment straddles offsets registered from
    another leader's segments, when it is the first offset not registered before (the object still
    holds, and is named by, the batches from ``base_offset``). The registry's ranges, lookups and
    overlap checks are [first_offset, last_offset]; a reader of the object starts at the batch
    holding ``first_offset``.
    ``range_records`` and ``range_control_records`` count the records and control records of the
    registered range's batches (those from ``first_offset`` on) when it starts after the base
    offset (-1: unknown); ``record_count`` and ``control_records`` stay the whole object's. Read
    them through :attr:`records_in_range` and :attr:`control_records_in_range`, which give the
    whole counts for a segment registered whole.
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
    aborted_txns: int = -1
    control_records: int = -1
    open_txn_first_offset: int = OPEN_TXN_UNKNOWN
    sparse_index: bytes | None = None
    min_timestamp_exact: bool = False
    first_offset: int | None = None  # None: base_offset (set in __post_init__)
    range_records: int = -1
    range_control_records: int = -1

    def __post_init__(self) -> None:
        _check_topic_partition(self.topic, self.partition)
        _check_offset("base_offset", self.base_offset)
        _check_offset("last_offset", self.last_offset)
        if self.last_offset < self.base_offset:
            raise RegistryValueError(f"last_offset {self.last_offset} is below base_offset {self.base_offset}")
        if self.first_offset is None:
            object.__setattr__(self, "first_offset", self.base_offset)
        _check_offset("first_offset", self.first_offset)
        if not self.base_offset <= self.first_offset <= self.last_offset:
            raise RegistryValueError(f"first_offset {self.first_offset} must lie in [base_offset {self.base_offset}, last_offset {self.last_offset}]")
        if not isinstance(self.object_key, str) or not self.object_key or any(c in self.object_key for c in "\r\n"):
            raise RegistryValueError(f"object_key must be a non-empty one-line str, got {self.object_key!r}")
        for name in ("size", "record_count", "upload_time_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise RegistryValueError(f"{name} must be a non-negative int, got {value!r}")
        for name in ("min_timestamp", "max_timestamp", "leader_epoch", "aborted_txns", "control_records", "range_records", "range_control_records"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < -1:
                raise RegistryValueError(f"{name} must be an int >= -1, got {value!r}")
        value = self.open_txn_first_offset
        if not isinstance(value, int) or isinstance(value, bool) or value < OPEN_TXN_UNKNOWN or value > self.last_offset:
            raise RegistryValueError(f"open_txn_first_offset must be an int in [-2, last_offset], got {value!r}")
        if self.sparse_index is not None and (not isinstance(self.sparse_index, bytes) or not self.sparse_index):
            raise RegistryValueError(f"sparse_index must be non-empty bytes or None, got {self.sparse_index!r:.80}")
        if not isinstance(self.min_timestamp_exact, bool):
            raise RegistryValueError(f"min_timestamp_exact must be a bool, got {self.min_timestamp_exact!r}")
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
        """This segment's member in the segments ZSET: its registered range [first_offset, last_offset]."""
        return segment_member(self.first, self.last_offset)

    @property
    def first(self) -> int:
        """``first_offset`` as an int (never None after construction)."""
        assert self.first_offset is not None
        return self.first_offset

    @property
    def records_in_range(self) -> int:
        """Records in the registered range [first_offset, last_offset]; -1 when unknown."""
        return self.record_count if self.first == self.base_offset else self.range_records

    @property
    def control_records_in_range(self) -> int:
        """Control records in the registered range; -1 when unknown."""
        return self.control_records if self.first == self.base_offset else self.range_control_records

    @property
    def next_offset(self) -> int:
        """The first offset after this segment."""
        return self.last_offset + 1

    def contains(self, offset: int) -> bool:
        """True when ``offset`` is in the registered range [first_offset, last_offset]."""
        return self.first <= offset <= self.last_offset

    def same_segment(self, other: SegmentEntry) -> bool:
        """True when re-registering ``other`` over this entry is a no-op (same first, base, last, checksum, size)."""
        return (self.topic, self.partition, self.first_offset, self.base_offset, self.last_offset, self.checksum, self.size) == (
            other.topic,
            other.partition,
            other.first_offset,
            other.base_offset,
            other.last_offset,
            other.checksum,
            other.size,
        )

    def to_fields(self, *, sparse_index: bool = True) -> dict[str, str]:
        """The segment hash's fields (all strings), in :data:`SEGMENT_FIELDS` order; without
        ``sparse_index`` when asked (what layout 2 stores: :data:`STORED_SEGMENT_FIELDS`)."""
        fields = {
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
            "aborted_txns": str(self.aborted_txns),
            "control_records": str(self.control_records),
            "open_txn_first_offset": str(self.open_txn_first_offset),
            "sparse_index": "" if self.sparse_index is None or not sparse_index else base64.b64encode(self.sparse_index).decode("ascii"),
            "min_timestamp_exact": "1" if self.min_timestamp_exact else "0",
            "first_offset": str(self.first_offset),
            "range_records": str(self.range_records),
            "range_control_records": str(self.range_control_records),
        }
        if not sparse_index:
            del fields["sparse_index"]
        return fields

    @classmethod
    def from_fields(
        cls, topic: str, partition: int, mapping: Mapping[str | bytes, str | bytes], *, key: str | None = None
    ) -> SegmentEntry:
        """The entry a segment hash holds; str or bytes keys and values; unknown fields are ignored.

        Raises :class:`MalformedRegistryDataError` naming ``key`` (the Redis key, when known) and the
        field when a field is missing or malformed.
        """
        fields = _decode_mapping(mapping, key)
        ints = {
            name: _int_field(fields, name, key)
            for name in SEGMENT_FIELDS
            if name not in ("object_key", "checksum", "files", "sparse_index") and (name in fields or name not in OPTIONAL_SEGMENT_FIELDS)
        }
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
                sparse_index=_sparse_index_field(fields, key),
                min_timestamp_exact=_flag(ints.pop("min_timestamp_exact", 0)),
                **ints,
            )
        except RegistryValueError as err:
            raise MalformedRegistryDataError(f"segment hash holds an invalid entry: {err}", key=key) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready values (files as a list), without topic and partition, and without
        ``sparse_index`` (derived from the batch index; a rebuilt registry lacks it until backfilled,
        so dumps compare equal either way)."""
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
            "aborted_txns": self.aborted_txns,
            "control_records": self.control_records,
            "open_txn_first_offset": self.open_txn_first_offset,
            "min_timestamp_exact": self.min_timestamp_exact,
            "first_offset": self.first_offset,
            "range_records": self.range_records,
            "range_control_records": self.range_control_records,
        }


def _flag(value: int) -> bool | int:
    """A 0/1 field as a bool; any other value is passed on for ``SegmentEntry`` to refuse."""
    return bool(value) if value in (0, 1) else value


#: (Redis key, object key) of entries whose bad ``sparse_index`` was logged; bounded (cleared when full)
_warned_sparse_index: set[tuple[str | None, str]] = set()
_WARNED_LIMIT = 4096


def _sparse_index_field(fields: Mapping[str, str], key: str | None) -> bytes | None:
    """The ``sparse_index`` field's bytes (base64 text; absent or empty: None).

    Decision: the field is optional and derived (the batch index holds the same and more), so text
    that is not base64 degrades to None with a warning, logged once per entry, as the gateway
    treats a sparse index whose CRC fails (``segment_indexes.sparse_index``): a lookup never fails
    for it, and the agent's ``backfill-batch-index`` writes it anew (the entry reads as lacking one)."""
    text = fields.get("sparse_index")
    if not text:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        entry = (key, fields.get("object_key", "?"))
        if entry not in _warned_sparse_index:
            if len(_warned_sparse_index) >= _WARNED_LIMIT:
                _warned_sparse_index.clear()
            _warned_sparse_index.add(entry)
            log.warning("registry: %s (%s): sparse_index %r is not base64; ignored (plans use the batch index)", key, entry[1], text[:40])
        return None


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
class PartitionSummary:
    """What listings and coverage pages show of a partition, read in constant time (``Registry.summaries``).

    ``records``: records in the registered ranges (unknown counts 0), None on a partition not
    migrated to layout 2; ``oldest_timestamp``: the oldest segment's ``min_timestamp``;
    ``newest_timestamp``: the largest ``max_timestamp`` (None: unknown); ``gap_count``: recorded
    gaps; ``indexed``: the partition has layout 2's time index and summary; ``oldest_age_from``: the
    time remote retention ages the oldest segment from (its max timestamp, else its upload time)."""

    info: PartitionInfo
    records: int | None
    oldest_timestamp: int | None
    newest_timestamp: int | None
    gap_count: int
    indexed: bool
    oldest_age_from: int = -1  # the oldest segment's max_timestamp, or its upload_time_ms when that is -1 (remote retention's age); -1: none



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


@dataclass(frozen=True, slots=True)
class CoverageStart:
    """Where the agent's coverage of a partition begins (DESIGN.md, contract 5).

    ``offset`` is the partition's log start offset when an agent first began following it, and
    ``observed_ms`` when that was. Every offset at or after ``offset`` is, at any moment, in remote
    storage, still in Kafka, or in a recorded gap (or was deleted by remote retention). Set once:
    the first observation wins.

    >>> CoverageStart(offset=100, observed_ms=1_700_000_000_000).to_dict()
    {'offset': 100, 'observed_ms': 1700000000000}
    """

    offset: int
    observed_ms: int

    def __post_init__(self) -> None:
        _check_offset("coverage start offset", self.offset)
        if not isinstance(self.observed_ms, int) or isinstance(self.observed_ms, bool) or self.observed_ms < 0:
            raise RegistryValueError(f"observed_ms must be a non-negative int, got {self.observed_ms!r}")

    def to_dict(self) -> dict[str, int]:
        return {"offset": self.offset, "observed_ms": self.observed_ms}

    @classmethod
    def from_dict(cls, data: Any, *, where: str | None = None) -> CoverageStart:
        """The coverage start in ``{"offset": int, "observed_ms": int}`` (the S3 copy's body)."""
        try:
            return cls(offset=data["offset"], observed_ms=data["observed_ms"])
        except (KeyError, TypeError, RegistryValueError) as err:
            raise MalformedRegistryDataError(f"coverage start {data!r} is not {{offset, observed_ms}} ({err})", key=where) from None


@dataclass(frozen=True, slots=True)
class Coverage:
    """What the registry knows of a partition's coverage (the audit and the agent read it).

    - ``start``: the coverage start, None when no agent recorded one;
    - ``next_offset``: the first offset after everything ever registered or recorded as a gap
      (it survives remote retention emptying the partition); -1 when nothing was;
    - ``expired_until``: offsets below it were deleted by remote retention (-1: none were).
    """

    start: CoverageStart | None
    next_offset: int
    expired_until: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": None if self.start is None else self.start.to_dict(),
            "next_offset": self.next_offset,
            "expired_until": self.expired_until,
        }
