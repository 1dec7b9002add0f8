"""The agent's S3 side: segment uploads, offset.wm, and the object metadata the registry is rebuilt from.

Upload of one segment (what a crash at each step leaves behind, all harmless):

1. the ``.log``, with the segment's facts as user metadata (``x-amz-meta-tk-*``, below), as a
   *conditional* PUT (``If-None-Match: *``, on the single PUT or on CompleteMultipartUpload): it
   is created only if no object has the key. Refused (412 PreconditionFailed), the object there is
   read (HEAD): the same size and ``tk-checksum`` means the same bytes (this agent's own earlier
   attempt whose answer was lost or which crashed, or the other leader's copy of the same segment
   after a leadership move): the upload goes on. Other bytes raise :class:`ObjectKeyTakenError`
   and nothing more is written: the key belongs to another leader's upload, and the registry
   decides (``partition_uploader``). A crash leaves a ``.log`` nobody references;
2. then, in parallel, ``.index``, ``.timeindex``, and ``.txnindex``/``.snapshot`` when present
   (the snapshot is the broker's ``{next base}.snapshot``, stored under the segment's stem:
   ``local_segments``), and the ``.batchindex`` built by the scan (``format.batch_index``; none
   for a segment that is not magic 2 throughout). Only once the ``.log`` is ours (or the same
   bytes), so an upload that lost its key never overwrites the indexes of the segment that won
   it; indexes of the same ``.log`` bytes from two replicas are both valid for it. A crash leaves
   objects nobody references (rebuild ignores a segment whose listed files are not all there);
   the next attempt overwrites them;
3. (the caller) registration in Redis, once every file has landed, then ``offset.wm``; the entry
   carries the sparse plan index derived from the batch index (``format.sparse_index``; not in the
   object metadata, which is too small: a rebuilt registry gets it back from ``backfill-batch-index``).

**Another uploader's object under our key** (Pinterest's ts-segment-uploader writes the same keys, with no
``tk-*`` metadata: issue 37's hand-over). A ``.log`` found there without any ``tk-*`` metadata is read once
(a streamed GET, CRC-32C): the same size and checksum as this segment's is the same bytes, and it is kept as
it is: nothing is rewritten, its ``.index``/``.timeindex`` already there are kept too (they were cut from the
same broker files), only the files missing beside it are written, and the ``.batchindex`` (a key of our own)
goes up carrying the entry's ``tk-*`` metadata so that ``rebuild`` can restore the entry
(:func:`adopted_entry`). Other bytes raise :class:`ForeignObjectError`, naming both objects; nothing is
written, and the uploader retries with a backoff (``partition_uploader``), never deleting another system's
object.

Before the PUT the key is read (HEAD): an earlier attempt (a crashed agent's, or the other
leader's) that left the same bytes costs a HEAD, not a refused upload of the whole body (a
refused multipart upload has sent every part before CompleteMultipartUpload is answered 412).
Uploading the same segment again finds its own ``.log`` (step 1) and writes its indexes again
(the same content when this replica wrote them; otherwise indexes of the same ``.log`` bytes,
equally valid). The store must honour ``If-None-Match: *`` on PutObject and
CompleteMultipartUpload (AWS S3 since August 2024, botocore 1.35.2; SeaweedFS): the agent checks
it at startup (:meth:`RemoteStore.check_conditional_writes`: two conditional PUTs of a probe
key, the second must be refused) and refuses to start against a store that ignores it, which
would let a leader overwrite another's ``.log``. An unregistered object left by a leader that died
is removed only with ``If-Match: <its ETag>`` (:meth:`RemoteStore.delete_if_unchanged`; DeleteObject
with If-Match: botocore 1.35.67), so an object rewritten meanwhile is never deleted.
Files at or above ``s3.multipart_threshold_bytes`` go up as multipart uploads whose parts are
sent in parallel (boto3's transfer manager), read through the open descriptor
(``/proc/self/fd/N``) so that a rename to ``.deleted`` cannot get in the way.

User metadata on the ``.log`` object (the registry entry, ``tk-*``): ``object_metadata``.

Beside offset.wm, the partition's coverage start (``coverage.json``, ``{"offset", "observed_ms"}``),
the remote retention mark (``expired.json``, ``{"expired_until"}``) and gap markers (``gaps/{start}-{end}``, JSON with the reason): see ``tiered_kafka.keyspace``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import crc32c
from boto3.s3.transfer import TransferConfig
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from tiered_kafka.errors import CorruptCheckpointError
from tiered_kafka.format.checkpoints import format_offset_wm, parse_offset_wm
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import CoverageStart, MalformedRegistryDataError, SegmentEntry
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_service.s3_direct import DirectS3
from tiered_kafka_agent.errors import RemoteObjectError
from tiered_kafka_agent.conditional_writes import add_if_none_match_hook, check_conditional_writes, exclusive_key, s3_error_code
from tiered_kafka_agent.local_segments import OpenSegment, SegmentStats
from tiered_kafka_agent.object_metadata import (  # noqa: F401 (re-exported: the names others import from here)
    META_PREFIX,
    MetadataError,
    adopted_entry,
    entry_from_metadata,
    entry_metadata,
    registered_from,
)

log = logging.getLogger(__name__)

UPLOAD_ORDER = (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX, FileKind.TXNINDEX, FileKind.SNAPSHOT)


class ObjectKeyTakenError(RemoteObjectError):
    """A segment's ``.log`` key holds other bytes than this upload's (another leader's segment with
    the same base offset): the conditional PUT was refused and nothing of this upload was written.

    ``theirs`` is the entry the object's metadata describes (None when it has none readable),
    ``etag`` the object's ETag (for a conditional delete) and ``age_s`` how long ago the store says
    it was written (for messages only: the store's clock, and for a multipart upload possibly its
    start; waits are timed with the agent's monotonic clock, ``two_leaders``)."""

    def __init__(self, key: str, ours: SegmentEntry, theirs: SegmentEntry | None, age_s: float, etag: str = "") -> None:
        described = "no readable tk-* metadata" if theirs is None else f"offsets {theirs.base_offset}..{theirs.last_offset}, {theirs.checksum}"
        super().__init__(f"s3 object {key} holds another upload ({described}, written {age_s:.0f}s ago), not this segment's {ours.checksum}")
        self.key = key
        self.ours = ours
        self.theirs = theirs
        self.age_s = age_s
        self.etag = etag


class ForeignObjectError(ObjectKeyTakenError):
    """A segment's ``.log`` key holds an object another uploader wrote (no ``tk-*`` metadata: Pinterest's
    ts-segment-uploader) with other bytes than this segment's: nothing was written (module doc). Unless a
    registry entry names that object (then it is another leader's, ``two_leaders``), the uploader reports it
    once and retries with a backoff, never deleting it (``partition_uploader``).

    ``etag`` identifies their object, so the uploader reports each conflict once."""

    def __init__(self, key: str, size: int, etag: str, checksum: str | None, ours: SegmentEntry, source: str, age_s: float = 0.0) -> None:
        theirs = f"{size} bytes" + (f", {checksum}" if checksum else "") + f", ETag {etag or '?'}"
        RemoteObjectError.__init__(
            self,
            f"s3 object {key} was written by another uploader (no tk-* metadata: {theirs}) and is not segment "
            f"{ours.base_offset} of {source} ({ours.size} bytes, {ours.checksum}): it is left as it is and the partition "
            "does not advance past it; compare the two and remove the wrong one, or run `tiered-kafka-agent adopt`",
        )
        self.key = key
        self.ours = ours
        self.theirs = None
        self.age_s = age_s
        self.etag = etag


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
        # a segment's small files (.index, .timeindex, ...) go up in parallel once its .log is up
        self._companions = ThreadPoolExecutor(max_workers=8, thread_name_prefix="upload-companion")
        add_if_none_match_hook(client)
        self._probe_prefix: str | None = None  # set while the conditional write check has not passed
        self._probe_lock = threading.Lock()
        # HEADs without botocore's per-call pipeline on an http:// endpoint (rebuild: one a segment; s3_direct)
        self._direct = DirectS3.of(client, bucket, client.meta.config.read_timeout) if isinstance(client, BaseClient) else None

    def check_conditional_writes(self, where: str) -> None:
        """Refuse a store that ignores ``If-None-Match: *`` (module doc; ``conditional_writes``): from
        now on, until the check has passed once, every ``.log`` upload first runs it again (a store
        unreachable at startup is checked before anything is written to it)."""
        with self._probe_lock:
            self._probe_prefix = where
            check_conditional_writes(self.client, self.bucket, where, self.retry)
            self._probe_prefix = None

    def _ensure_conditional_writes(self) -> None:
        with self._probe_lock:
            if self._probe_prefix is not None:
                check_conditional_writes(self.client, self.bucket, self._probe_prefix, self.retry)
                self._probe_prefix = None

    def delete_if_unchanged(self, key: str, etag: str) -> bool:
        """Delete ``key`` only while it still has ``etag`` (``If-Match``); False when it changed or is gone,
        and when ``etag`` is empty (an object never seen: an empty ``If-Match`` may be no condition at all)."""
        if not etag:
            return False
        try:
            self.retry.call(lambda: self.client.delete_object(Bucket=self.bucket, Key=key, IfMatch=etag), what=f"delete of s3://{self.bucket}/{key}")
        except ClientError as err:
            if s3_error_code(err) in ("PreconditionFailed", "NoSuchKey", "404"):
                return False
            raise
        return True

    def object_exists(self, key: str) -> bool:
        """True when ``key`` holds an object (HEAD)."""
        return self._head_or_none(key) is not None

    # -- uploads ---------------------------------------------------------------------------
    def upload_segment(
        self, topic: str, partition: int, opened: OpenSegment, stats: SegmentStats, hooks: UploadHooks, *, first_offset: int | None = None
    ) -> SegmentEntry:
        """Upload one segment (module doc) and return the entry to register, from ``first_offset``
        (None: its base offset). Raises :class:`ObjectKeyTakenError` when its ``.log`` key holds
        other bytes (then nothing was written)."""
        base = opened.segment.base_offset
        kinds = [k for k in UPLOAD_ORDER if k in opened.files]
        entry = stats.entry(topic, partition, self.keyspace.segment_key(topic, partition, base, FileKind.LOG), base, kinds, time.time_ns() // 1_000_000)
        if first_offset is not None:
            entry = registered_from(entry, first_offset, stats.batch_index)
        log_key = self.keyspace.segment_key(topic, partition, base, FileKind.LOG)
        foreign = self._put_log_exclusively(opened, log_key, entry, hooks)
        hooks.checkpoint("after_log")
        companions = [
            self._companions.submit(self._upload_file, opened, kind, self.keyspace.segment_key(topic, partition, base, kind), {}, hooks)
            for kind in kinds
            if kind != FileKind.LOG and not (foreign and self.object_exists(self.keyspace.segment_key(topic, partition, base, kind)))
        ]
        if stats.batch_index is not None:
            key = self.keyspace.segment_key(topic, partition, base, FileKind.BATCHINDEX)
            metadata = entry_metadata(entry) if foreign else None  # the adopted entry, for rebuild (module doc)
            companions.append(self._companions.submit(self.put_bytes, key, stats.batch_index, hooks, metadata))
        for future in companions:  # wait for all (the files stay open until then), then raise the first error
            future.exception()
        for future in companions:
            future.result()
        return entry

    def _put_log_exclusively(self, opened: OpenSegment, key: str, entry: SegmentEntry, hooks: UploadHooks) -> bool:
        """Create the ``.log`` object only if the key is free (module doc, step 1); return when it
        holds this segment's bytes (True: another uploader's object with them, kept as it is), raise
        :class:`ObjectKeyTakenError` when it holds others (:class:`ForeignObjectError` for another uploader's)."""
        self._ensure_conditional_writes()
        found = self._head_or_none(key)  # an earlier attempt or the other leader may hold it: no body sent for nothing
        for _ in range(5):
            if found is None:
                try:
                    exclusive_key(self.bucket, key, True)
                    self._upload_file(opened, FileKind.LOG, key, {"Metadata": entry_metadata(entry)}, hooks)
                    return False
                except Exception as err:
                    code = s3_error_code(err)
                    if code == "ConditionalRequestConflict":  # S3's 409: a concurrent conditional write of the key; ask again
                        hooks.pause(0.2)
                        found = self._head_or_none(key)
                        continue
                    if code != "PreconditionFailed":
                        raise
                finally:
                    exclusive_key(self.bucket, key, False)
                found = self._head_or_none(key)
                if found is None:  # deleted since (e.g. a refused multipart's cleanup): try again
                    continue
            size, metadata, age_s, etag = found
            if not any(name.startswith(META_PREFIX) for name in metadata):  # another uploader's (module doc)
                checksum = self.object_checksum(key) if size == entry.size else None
                if checksum == entry.checksum:
                    log.info("s3 object %s, written by another uploader, holds this segment's bytes: kept as it is", key)
                    return True
                raise ForeignObjectError(key, size, etag, checksum, entry, str(opened.names.get(FileKind.LOG, opened.segment.base_offset)), age_s)
            if size == entry.size and metadata.get(f"{META_PREFIX}checksum") == entry.checksum:
                log.debug("s3 object %s holds this segment's bytes already (an earlier attempt or the other leader's copy)", key)
                return False
            try:
                theirs: SegmentEntry | None = entry_from_metadata(entry.topic, entry.partition, key, size, metadata)
            except MetadataError:
                theirs = None
            raise ObjectKeyTakenError(key, entry, theirs, age_s, etag)
        raise ObjectKeyTakenError(key, entry, None, 0.0)

    def object_checksum(self, key: str) -> str:
        """``crc32c:xxxxxxxx`` of a whole object, read as a stream (another uploader's ``.log``: module doc)."""

        def read() -> str:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            value = 0
            for chunk in iter(lambda: body.read(8 << 20), b""):
                value = crc32c.crc32c(chunk, value)
            return f"crc32c:{value:08x}"

        return self.retry.call(read, what=f"checksum of s3://{self.bucket}/{key}")

    def _head_or_none(self, key: str) -> tuple[int, dict[str, str], float, str] | None:
        """(size, tk-* metadata, age in seconds by the store's clock, ETag) of an object, None when there is none."""

        def head() -> tuple[int, dict[str, str], float, str] | None:
            try:
                response = self.client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as err:
                if s3_error_code(err) in ("NoSuchKey", "404", "NotFound"):
                    return None
                raise
            modified = response.get("LastModified")
            age = max(0.0, time.time() - modified.timestamp()) if modified is not None else 0.0
            metadata = {k.lower(): v for k, v in response.get("Metadata", {}).items()}
            return int(response["ContentLength"]), metadata, age, str(response.get("ETag", ""))

        return self.retry.call(head, what=f"HEAD s3://{self.bucket}/{key}")

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

    def put_bytes(self, key: str, body: bytes, hooks: UploadHooks | None = None, metadata: dict[str, str] | None = None) -> None:
        """Upload a small object held in memory (a batch index), with retries, and user ``metadata`` when given."""
        hooks = hooks or UploadHooks()
        extra: dict[str, Any] = {"Metadata": metadata} if metadata else {}

        def attempt() -> None:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **extra)
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

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from ``start`` (a ranged GET, with retries)."""
        what = f"read of s3://{self.bucket}/{key} bytes {start}-{start + length - 1}"
        return self.retry.call(lambda: self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")["Body"].read(), what=what)

    def get_bytes(self, key: str) -> bytes | None:
        """The whole object (a small one: a batch index), None when there is none."""
        return self._get_or_none(key)

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
        """(size, user metadata with lower-case names): ``head_object``'s, through ``s3_direct.DirectS3`` on an
        http:// endpoint (its HEAD costs a tenth of botocore's CPU; the same answers, ``ClientError`` included)."""
        if self._direct is not None:
            direct = self._direct
            return self.retry.call(lambda: direct.head(key), what=f"HEAD s3://{self.bucket}/{key}")
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

