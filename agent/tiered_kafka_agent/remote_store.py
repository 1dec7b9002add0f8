"""The agent's S3 side: segment uploads, offset.wm, and the object metadata the registry is rebuilt from.

Upload of one segment (what a crash at each step leaves behind, all harmless):

1. the ``.log``, with the segment's facts as user metadata (``x-amz-meta-tk-*``, below), and
   beside it, in parallel, ``.index``, ``.timeindex``, and ``.txnindex``/``.snapshot`` when
   present (the snapshot is the broker's ``{next base}.snapshot``, stored under the segment's
   stem: ``local_segments``), and the ``.batchindex`` built by the scan (``format.batch_index``;
   none for a segment that is not magic 2 throughout) — a crash leaves objects nobody references (rebuild ignores a segment whose listed
   files are not all there); the next attempt overwrites them;
2. (the caller) registration in Redis, once every file has landed, then ``offset.wm``; the entry
   carries the sparse plan index derived from the batch index (``format.sparse_index``; not in the
   object metadata, which is too small: a rebuilt registry gets it back from ``backfill-batch-index``).

Uploading the same segment again writes the same keys with the same bytes: harmless.
Files at or above ``s3.multipart_threshold_bytes`` go up as multipart uploads whose parts are
sent in parallel (boto3's transfer manager), read through the open descriptor
(``/proc/self/fd/N``) so that a rename to ``.deleted`` cannot get in the way.

User metadata on the ``.log`` object (all strings)::

    tk-base-offset, tk-last-offset, tk-record-count, tk-min-timestamp, tk-max-timestamp,
    tk-leader-epoch, tk-checksum ("crc32c:xxxxxxxx"), tk-upload-time-ms, tk-files ("log,index,..."),
    tk-aborted-txns, tk-control-records (absent on objects uploaded before them: read as -1),
    tk-open-txn-first-offset (absent on objects uploaded before it: read as -2, unknown)

Beside offset.wm, the partition's coverage start (``coverage.json``, ``{"offset", "observed_ms"}``),
the remote retention mark (``expired.json``, ``{"expired_until"}``) and gap markers (``gaps/{start}-{end}``, JSON with the reason): see ``tiered_kafka.keyspace``.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tiered_kafka.errors import CorruptCheckpointError
from tiered_kafka.format.checkpoints import format_offset_wm, parse_offset_wm
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import OPEN_TXN_UNKNOWN, CoverageStart, MalformedRegistryDataError, SegmentEntry
from tiered_kafka_agent.local_segments import OpenSegment, SegmentStats
from tiered_kafka_agent.retry import RetryPolicy

log = logging.getLogger(__name__)

META_PREFIX = "tk-"
UPLOAD_ORDER = (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX, FileKind.TXNINDEX, FileKind.SNAPSHOT)


class MetadataError(Exception):
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
    }


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
        )
    except (KeyError, ValueError) as err:
        raise MetadataError(f"s3 object {key}: missing or malformed tk-* metadata ({err})") from err


@dataclass
class UploadHooks:
    """Callbacks around an upload: progress for metrics, and crash points for fault-injection tests."""

    on_bytes: Callable[[int], None] = lambda n: None
    on_retry: Callable[[BaseException], None] = lambda err: None
    checkpoint: Callable[[str], None] = lambda name: None
    pause: Callable[[float], None] = time.sleep


class RemoteStore:
    """One cluster's segments in one bucket, under the DESIGN.md keyspace."""

    def __init__(self, client: Any, bucket: str, keyspace: Keyspace, transfer: TransferConfig, retry: RetryPolicy) -> None:
        self.client = client
        self.bucket = bucket
        self.keyspace = keyspace
        self.transfer = transfer
        self.retry = retry
        # a segment's small files (.index, .timeindex, ...) go up beside its .log
        self._companions = ThreadPoolExecutor(max_workers=8, thread_name_prefix="upload-companion")

    # -- uploads ---------------------------------------------------------------------------
    def upload_segment(self, topic: str, partition: int, opened: OpenSegment, stats: SegmentStats, hooks: UploadHooks) -> SegmentEntry:
        base = opened.segment.base_offset
        kinds = [k for k in UPLOAD_ORDER if k in opened.files]
        entry = SegmentEntry(
            topic=topic,
            partition=partition,
            object_key=self.keyspace.segment_key(topic, partition, base, FileKind.LOG),
            base_offset=base,
            last_offset=stats.last_offset,
            size=stats.size,
            record_count=stats.record_count,
            min_timestamp=stats.min_timestamp,
            max_timestamp=stats.max_timestamp,
            checksum=stats.checksum,
            leader_epoch=stats.leader_epoch,
            upload_time_ms=time.time_ns() // 1_000_000,
            files=tuple(k.value for k in kinds) + ((FileKind.BATCHINDEX.value,) if stats.batch_index is not None else ()),
            aborted_txns=stats.aborted_txns,
            control_records=stats.control_records,
            open_txn_first_offset=stats.open_txn_first_offset,
            sparse_index=stats.sparse_index,
        )
        companions = [
            self._companions.submit(self._upload_file, opened, kind, self.keyspace.segment_key(topic, partition, base, kind), {}, hooks)
            for kind in kinds
            if kind != FileKind.LOG
        ]
        if stats.batch_index is not None:
            key = self.keyspace.segment_key(topic, partition, base, FileKind.BATCHINDEX)
            companions.append(self._companions.submit(self.put_bytes, key, stats.batch_index, hooks))
        try:
            log_key = self.keyspace.segment_key(topic, partition, base, FileKind.LOG)
            self._upload_file(opened, FileKind.LOG, log_key, {"Metadata": entry_metadata(entry)}, hooks)
            hooks.checkpoint("after_log")
        finally:
            for future in companions:  # wait for all (the files stay open until then), then raise the first error
                future.exception()
        for future in companions:
            future.result()
        return entry

    def _upload_file(self, opened: OpenSegment, kind: FileKind, key: str, extra: dict[str, Any], hooks: UploadHooks) -> None:
        size = opened.size(kind)
        threshold = self.transfer.multipart_threshold

        def progress(sent: int) -> None:
            hooks.on_bytes(sent)
            if kind == FileKind.LOG and size >= threshold:
                hooks.checkpoint("during_part")

        def attempt() -> None:
            self.client.upload_file(opened.fd_path(kind), self.bucket, key, ExtraArgs=extra or None, Config=self.transfer, Callback=progress)

        self.retry.call(attempt, what=f"upload of s3://{self.bucket}/{key}", on_retry=hooks.on_retry, pause=hooks.pause)

    def put_bytes(self, key: str, body: bytes, hooks: UploadHooks | None = None) -> None:
        """Upload a small object held in memory (a batch index), with retries."""
        hooks = hooks or UploadHooks()

        def attempt() -> None:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
            hooks.on_bytes(len(body))

        self.retry.call(attempt, what=f"upload of s3://{self.bucket}/{key}", on_retry=hooks.on_retry, pause=hooks.pause)

    # -- offset.wm -------------------------------------------------------------------------
    def read_watermark(self, topic: str, partition: int) -> int | None:
        """The base offset in the partition's offset.wm, or None when there is none yet."""
        key = self.keyspace.offset_wm_key(topic, partition)
        data = self._get_or_none(key)
        if data is None:
            return None
        try:
            return parse_offset_wm(data, f"s3://{self.bucket}/{key}")
        except CorruptCheckpointError:
            log.error("s3://%s/%s is corrupt (%r); scanning from the registry instead", self.bucket, key, data[:40])
            return None

    def write_watermark(self, topic: str, partition: int, base_offset: int) -> None:
        key = self.keyspace.offset_wm_key(topic, partition)
        body = format_offset_wm(base_offset)
        self.retry.call(lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=body), what=f"write of s3://{self.bucket}/{key}")

    # -- coverage start --------------------------------------------------------------------
    def read_coverage_start(self, topic: str, partition: int) -> CoverageStart | None:
        """The partition's coverage.json, or None when there is none.

        Raises MetadataError when it is malformed: the coverage start is never guessed."""
        key = self.keyspace.coverage_start_key(topic, partition)
        data = self._get_or_none(key)
        if data is None:
            return None
        try:
            return CoverageStart.from_dict(json.loads(data), where=f"s3://{self.bucket}/{key}")
        except (ValueError, MalformedRegistryDataError) as err:
            raise MetadataError(f"s3 object {key}: malformed coverage start ({err})") from err

    def write_coverage_start(self, topic: str, partition: int, start: CoverageStart) -> None:
        key = self.keyspace.coverage_start_key(topic, partition)
        body = json.dumps(start.to_dict(), sort_keys=True).encode()
        self.retry.call(lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=body), what=f"write of s3://{self.bucket}/{key}")

    def _get_or_none(self, key: str) -> bytes | None:
        def get() -> bytes | None:
            try:
                return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None
                raise

        return self.retry.call(get, what=f"read of s3://{self.bucket}/{key}")

    # -- remote retention mark -------------------------------------------------------------
    def read_expired(self, topic: str, partition: int) -> int | None:
        """Offsets below the returned one were deleted by remote retention (None: no mark)."""
        key = self.keyspace.expired_key(topic, partition)
        data = self._get_or_none(key)
        if data is None:
            return None
        try:
            value = json.loads(data)["expired_until"]
            if not isinstance(value, int) or value < 0:
                raise TypeError(value)
            return value
        except (ValueError, KeyError, TypeError) as err:
            raise MetadataError(f"s3 object {key}: malformed remote retention mark ({err})") from err

    def write_expired(self, topic: str, partition: int, expired_until: int) -> None:
        key = self.keyspace.expired_key(topic, partition)
        body = json.dumps({"expired_until": expired_until}).encode()
        self.retry.call(lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=body), what=f"write of s3://{self.bucket}/{key}")

    # -- gap markers -----------------------------------------------------------------------
    def write_gap_marker(self, topic: str, partition: int, start: int, end: int, reason: str, detected_ms: int) -> None:
        key = self.keyspace.gap_key(topic, partition, start, end)
        body = json.dumps({"start_offset": start, "end_offset": end, "reason": reason, "detected_ms": detected_ms}).encode()
        self.retry.call(lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=body), what=f"write of s3://{self.bucket}/{key}")

    def read_gap_marker(self, key: str) -> dict[str, Any]:
        body = self.retry.call(lambda: self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read(), what=f"read of {key}")
        try:
            marker = json.loads(body)
            return {k: marker[k] for k in ("start_offset", "end_offset", "reason", "detected_ms")}
        except (ValueError, KeyError, TypeError) as err:
            raise MetadataError(f"s3 object {key}: malformed gap marker ({err})") from err

    # -- listing and deleting (retention, rebuild) -----------------------------------------
    def list_keys(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every object under ``prefix``."""
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", ()):
                yield item["Key"], int(item["Size"])

    def head_metadata(self, key: str) -> tuple[int, dict[str, str]]:
        response = self.retry.call(lambda: self.client.head_object(Bucket=self.bucket, Key=key), what=f"HEAD s3://{self.bucket}/{key}")
        return int(response["ContentLength"]), {k.lower(): v for k, v in response.get("Metadata", {}).items()}

    def delete_segment_objects(self, topic: str, partition: int, base_offset: int, kinds: list[FileKind]) -> None:
        """Delete a segment's objects, the .log first: a crash midway leaves index objects that
        rebuild ignores (no .log) and the next retention sweep removes."""
        ordered = [FileKind.LOG] + [k for k in kinds if k != FileKind.LOG]
        for kind in ordered:
            key = self.keyspace.segment_key(topic, partition, base_offset, kind)
            self.retry.call(lambda key=key: self.client.delete_object(Bucket=self.bucket, Key=key), what=f"delete of s3://{self.bucket}/{key}")


def transfer_config(threshold: int, chunk: int, concurrency: int) -> TransferConfig:
    return TransferConfig(multipart_threshold=threshold, multipart_chunksize=chunk, max_concurrency=concurrency, use_threads=concurrency > 1)

