"""The registry entry of a segment as S3 user metadata on its objects (``x-amz-meta-tk-*``): what
``rebuild-registry`` re-creates the registry from, and what the agent compares to know an object is its own.

User metadata on the ``.log`` object (all strings)::

    tk-base-offset, tk-last-offset, tk-record-count, tk-min-timestamp, tk-max-timestamp,
    tk-leader-epoch, tk-checksum ("crc32c:xxxxxxxx"), tk-upload-time-ms, tk-files ("log,index,..."),
    tk-aborted-txns, tk-control-records (absent on objects uploaded before them: read as -1),
    tk-open-txn-first-offset (absent on objects uploaded before it: read as -2, unknown),
    tk-min-timestamp-exact ("1": tk-min-timestamp is exact; absent before it: read as not exact),
    tk-first-offset (the first offset the uploader meant to register, ``SegmentEntry.first_offset``;
    absent before it: the base offset). A lower bound of the registered one: registration may
    start later when another leader registered more meanwhile, and rebuild then takes the end of
    the segment before it (``rebuild``),
    tk-range-records, tk-range-control-records (``SegmentEntry.range_records``: the counts from
    tk-first-offset on; -1 for a segment meant to be registered whole; absent before them: -1)

Another uploader's ``.log`` (Pinterest's ts-segment-uploader writes our keys with no ``tk-*`` metadata) is
never rewritten: once adopted (``adopt``, or the agent's hand-over in ``remote_store``) its entry rides on
the ``.batchindex`` written beside it, as the same ``tk-*`` metadata (:func:`adopted_entry`).
"""

from __future__ import annotations

import dataclasses

from tiered_kafka.format.batch_index import BatchIndex
from tiered_kafka.registry import OPEN_TXN_UNKNOWN, MalformedRegistryDataError, RegistryValueError, SegmentEntry
from tiered_kafka_agent.errors import RemoteObjectError

META_PREFIX = "tk-"


class MetadataError(RemoteObjectError):
    """A .log object's tk-* metadata is missing or malformed."""


def entry_metadata(entry: SegmentEntry) -> dict[str, str]:
    return {
        f"{META_PREFIX}base-offset": str(entry.base_offset),
        f"{META_PREFIX}last-offset": str(entry.last_offset),
        f"{META_PREFIX}record-count": str(entry.record_count),
        f"{META_PREFIX}min-timestamp": str(entry.min_timestamp),
        f"{META_PREFIX}max-timestamp": str(entry.max_timestamp),
        f"{META_PREFIX}leader-epoch": str(entry.leader_epoch),
        f"{META_PREFIX}checksum": entry.checksum,
        f"{META_PREFIX}upload-time-ms": str(entry.upload_time_ms),
        f"{META_PREFIX}files": ",".join(entry.files),
        f"{META_PREFIX}aborted-txns": str(entry.aborted_txns),
        f"{META_PREFIX}control-records": str(entry.control_records),
        f"{META_PREFIX}open-txn-first-offset": str(entry.open_txn_first_offset),
        f"{META_PREFIX}min-timestamp-exact": "1" if entry.min_timestamp_exact else "0",
        f"{META_PREFIX}first-offset": str(entry.first_offset),
        f"{META_PREFIX}range-records": str(entry.range_records),
        f"{META_PREFIX}range-control-records": str(entry.range_control_records),
    }


def registered_from(entry: SegmentEntry, first_offset: int, batch_index: bytes | None) -> SegmentEntry:
    """``entry`` registered from ``first_offset``, with the record and control record counts of the
    batches from there to its last offset (``SegmentEntry.range_records``) taken from the segment's
    batch index (the entry's own, or of a segment holding the same batches); -1 without one."""
    if first_offset == entry.base_offset:
        return dataclasses.replace(entry, first_offset=first_offset, range_records=-1, range_control_records=-1)
    records = control = -1
    if batch_index is not None:
        index = BatchIndex.from_bytes(batch_index)
        records = control = 0
        for slot in range(len(index)):
            batch = index.entry(slot)
            if batch.base_offset >= first_offset and batch.last_offset <= entry.last_offset:
                records += batch.record_count
                control += batch.record_count if batch.is_control else 0
    return dataclasses.replace(entry, first_offset=first_offset, range_records=records, range_control_records=control)


def entry_from_metadata(topic: str, partition: int, key: str, size: int, metadata: dict[str, str]) -> SegmentEntry:
    """The registry entry recorded in a .log object's metadata (inverse of ``entry_metadata``)."""
    try:
        return SegmentEntry(
            topic=topic,
            partition=partition,
            object_key=key,
            base_offset=int(metadata[f"{META_PREFIX}base-offset"]),
            last_offset=int(metadata[f"{META_PREFIX}last-offset"]),
            size=size,
            record_count=int(metadata[f"{META_PREFIX}record-count"]),
            min_timestamp=int(metadata[f"{META_PREFIX}min-timestamp"]),
            max_timestamp=int(metadata[f"{META_PREFIX}max-timestamp"]),
            checksum=metadata[f"{META_PREFIX}checksum"],
            leader_epoch=int(metadata[f"{META_PREFIX}leader-epoch"]),
            upload_time_ms=int(metadata[f"{META_PREFIX}upload-time-ms"]),
            files=tuple(metadata[f"{META_PREFIX}files"].split(",")),
            aborted_txns=int(metadata.get(f"{META_PREFIX}aborted-txns", "-1")),
            control_records=int(metadata.get(f"{META_PREFIX}control-records", "-1")),
            open_txn_first_offset=int(metadata.get(f"{META_PREFIX}open-txn-first-offset", str(OPEN_TXN_UNKNOWN))),
            min_timestamp_exact=metadata.get(f"{META_PREFIX}min-timestamp-exact") == "1",
            first_offset=int(metadata[f"{META_PREFIX}first-offset"]) if f"{META_PREFIX}first-offset" in metadata else None,
            range_records=int(metadata.get(f"{META_PREFIX}range-records", "-1")),
            range_control_records=int(metadata.get(f"{META_PREFIX}range-control-records", "-1")),
        )
    except (KeyError, ValueError, MalformedRegistryDataError, RegistryValueError) as err:
        raise MetadataError(f"s3 object {key}: missing or malformed tk-* metadata ({err})") from err


def adopted_entry(topic: str, partition: int, log_key: str, log_size: int, batch_index_metadata: dict[str, str]) -> SegmentEntry | None:
    """The registry entry of another uploader's ``.log`` (no ``tk-*`` metadata of its own) that was adopted: the
    ``tk-*`` metadata on the ``.batchindex`` written beside it at adoption (module doc); None when that has none."""
    if not any(name.startswith(META_PREFIX) for name in batch_index_metadata):
        return None
    return entry_from_metadata(topic, partition, log_key, log_size, batch_index_metadata)
