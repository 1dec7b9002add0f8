"""Fakes of the clients a cluster source is handed (``sources``): an S3 client over a dict of objects
and a registry over a list of entries, and a ``ClusterReader`` over them holding the hand-built
transactional log of ``tests/support/transactions.py`` (segments 0 and 14 uploaded; the active
segment's COMMIT of p11, offset 22, not)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.support.transactions import write_transactional_log
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import CoverageStart, Gap, PartitionInfo, SegmentEntry, partition_index_member
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.remote import ClusterReader
from tiered_kafka_gateway.s3_objects import S3Objects

TOPIC = "txn"
BUCKET = "bucket"


class FakeS3:
    """The boto3 S3 client calls ``S3Objects`` makes, over ``objects`` (key -> bytes)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.gets: list[tuple[str, str | None]] = []
        self._request_signer = type("Signer", (), {"_credentials": Credentials("AKIDEXAMPLE", "secret")})()
        self.closed = False

    def get_object(self, *, Bucket: str, Key: str, Range: str | None = None) -> dict[str, Any]:  # noqa: N803 (boto3's names)
        self.gets.append((Key, Range))
        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": "no such key"}}, "GetObject")
        data = self.objects[Key]
        if Range is None:
            return {"Body": io.BytesIO(data)}
        first, last = (int(x) for x in Range.removeprefix("bytes=").split("-"))
        return {"Body": io.BytesIO(data[first : last + 1]), "ContentRange": f"bytes {first}-{last}/{len(data)}"}

    def list_objects_v2(self, *, Bucket: str, Prefix: str, Delimiter: str = "/", ContinuationToken: str | None = None) -> dict[str, Any]:  # noqa: N803
        """One page: the "directories" right below ``Prefix``."""
        below = sorted({k[len(Prefix):].split(Delimiter, 1)[0] for k in self.objects if k.startswith(Prefix) and Delimiter in k[len(Prefix):]})
        return {"CommonPrefixes": [{"Prefix": f"{Prefix}{d}{Delimiter}"} for d in below], "IsTruncated": False}

    def head_bucket(self, *, Bucket: str) -> dict[str, Any]:  # noqa: N803
        return {}

    def get_paginator(self, name: str) -> Any:
        objects = self.objects

        class Paginator:
            def paginate(self, *, Bucket: str, Prefix: str) -> list[dict[str, Any]]:  # noqa: N803
                return [{"Contents": [{"Key": k, "Size": len(v)} for k, v in sorted(objects.items()) if k.startswith(Prefix)]}]

        return Paginator()

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeRegistry:
    """The registry reads a ``ClusterReader`` makes, over ``entries`` of one cluster."""

    entries: list[SegmentEntry]
    gap_list: list[Gap] = field(default_factory=list)
    coverage: CoverageStart | None = None
    failure: Exception | None = None  # raised by every read (a broken registry)
    client: Any = None

    def __post_init__(self) -> None:
        self.client = type("Redis", (), {"ping": lambda self: True, "close": lambda self: None})()

    def _of(self, topic: str, partition: int) -> list[SegmentEntry]:
        if self.failure is not None:
            raise self.failure
        return sorted((e for e in self.entries if (e.topic, e.partition) == (topic, partition)), key=lambda e: e.first)

    def find(self, topic: str, partition: int, offset: int) -> SegmentEntry | None:
        return next((e for e in self._of(topic, partition) if e.first <= offset <= e.last_offset), None)

    def next_segment(self, topic: str, partition: int, offset: int) -> SegmentEntry | None:
        return next((e for e in self._of(topic, partition) if e.first > offset), None)

    def segments(self, topic: str, partition: int, *, from_offset: int | None = None, to_offset: int | None = None, limit: int | None = None) -> list[SegmentEntry]:
        found = [e for e in self._of(topic, partition) if (from_offset is None or e.last_offset >= from_offset) and (to_offset is None or e.first <= to_offset)]
        return found if limit is None else found[:limit]

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        found = self._of(topic, partition)
        if not found:
            return None
        return PartitionInfo(found[0].first, found[-1].last_offset, len(found), sum(e.size for e in found), 0)

    def gaps(self, topic: str, partition: int) -> list[Gap]:
        self._of(topic, partition)
        return list(self.gap_list)

    def coverage_start(self, topic: str, partition: int) -> CoverageStart | None:
        self._of(topic, partition)
        return self.coverage

    def topics(self) -> dict[str, list[int]]:
        if self.failure is not None:
            raise self.failure
        out: dict[str, list[int]] = {}
        for e in self.entries:
            out.setdefault(e.topic, []).append(e.partition)
        return {t: sorted(set(ps)) for t, ps in out.items()}

    # the registry's paged reads (layout 2), over the same entries
    def _partitions(self, topic: str | None = None) -> list[tuple[str, int]]:
        return sorted({(e.topic, e.partition) for e in self.entries if topic is None or e.topic == topic}, key=lambda tp: partition_index_member(*tp))

    def partition_count(self, topic: str | None = None) -> int:
        return len(self._partitions(topic))

    def partitions_page(self, *, after: tuple[str, int] | None = None, start: int | None = None, limit: int = 1000, topic: str | None = None) -> list[tuple[str, int]]:
        if self.failure is not None:
            raise self.failure
        found = [tp for tp in self._partitions(topic) if after is None or partition_index_member(*tp) > partition_index_member(*after)]
        return found[start or 0 :][:limit]

    def listed(self, partitions: list[tuple[str, int]]) -> list[bool]:
        known = set(self._partitions())
        return [tp in known for tp in partitions]

    def segment_at_time(self, topic: str, partition: int, timestamp: int) -> SegmentEntry | None:
        return next((e for e in self._of(topic, partition) if e.max_timestamp >= timestamp), None)

    def ranges_before_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        out = []
        for e in self._of(topic, partition):
            if e.max_timestamp >= timestamp:
                break
            out.append((e.first, e.last_offset, e.size))
        return out

    def ranges_after_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        run: list[tuple[int, int, int]] = []
        for e in self._of(topic, partition):
            run = run + [(e.first, e.last_offset, e.size)] if e.min_timestamp_exact and e.min_timestamp > timestamp else []
        return run

    def segments_page(self, topic: str, partition: int, start: int, count: int) -> list[SegmentEntry]:
        return self._of(topic, partition)[start : start + count]


@dataclass
class TransactionalCluster:
    reader: ClusterReader
    s3: FakeS3
    registry: FakeRegistry


def transactional_cluster(tmp_path: Path, *, open_txn_first_offset: int = 19, **settings: Any) -> TransactionalCluster:
    """A ``ClusterReader`` over fakes holding segments 0 and 14 of the transactional log (module
    docstring), registered with their ``.index``, ``.timeindex`` and ``.txnindex``; the last
    segment's ``open_txn_first_offset`` is ``open_txn_first_offset`` (p11 is open at its end)."""
    directory = tmp_path / f"{TOPIC}-0"
    plog = write_transactional_log(directory)
    plog.close()
    keyspace = Keyspace("p", "c1", 0)
    objects: dict[str, bytes] = {}
    entries = []
    for base, last in ((0, 13), (14, 21)):
        key = f"p/c1/{TOPIC}-0/{base:020d}.log"
        data = (directory / f"{base:020d}.log").read_bytes()
        files = ["log", "index", "timeindex"]
        for kind in ("log", "index", "timeindex", "txnindex"):
            path = directory / f"{base:020d}.{kind}"
            if path.exists():
                objects[key[: -len("log")] + kind] = path.read_bytes()
                if kind == "txnindex":
                    files.append(kind)
        batches = list(iter_batches(data))
        entries.append(SegmentEntry(
            topic=TOPIC, partition=0, base_offset=base, last_offset=last, object_key=key, size=len(data), record_count=last - base + 1,
            min_timestamp=min(b.max_timestamp for b in batches), max_timestamp=max(b.max_timestamp for b in batches), checksum="none:test",
            leader_epoch=0, upload_time_ms=0, files=tuple(files), open_txn_first_offset=open_txn_first_offset if base == 14 else -1,
        ))
    s3 = FakeS3(objects)
    registry = FakeRegistry(entries)
    gateway = load_settings(clusters={"c1": {"redis_url": "redis://unused", "s3": {"bucket": BUCKET}}}, **settings)
    reader = ClusterReader("c1", gateway, registry=registry, objects=S3Objects(s3, BUCKET, "http://s3.test", "us-east-1"),  # type: ignore[arg-type]
                           keyspace=keyspace)
    return TransactionalCluster(reader, s3, registry)
