"""Pure parts of the two-leaders rules: a straddling segment's counts, the backfill's count rule
over them, S3 error codes through boto3's wrapper, and the refusal of a store without conditional writes."""

from __future__ import annotations

from typing import Any

import pytest
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import ClientError

from tests.support.batches import Rec, build_control, build_v2
from tiered_kafka.errors import ConfigError
from tiered_kafka.format import batch_index
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import SegmentEntry
from tiered_kafka.spark.backfill import expected_from_registry, registry_control_records
from tiered_kafka_agent.conditional_writes import s3_error_code
from tiered_kafka_agent.remote_store import RemoteStore, registered_from, transfer_config
from tiered_kafka.retry import RetryPolicy


def _segment() -> tuple[SegmentEntry, bytes]:
    """A segment 100..111: batches 100..103, 104..107, a control batch at 108, 109..111."""
    recs = [Rec(b"k", b"v", 1_700_000_000_000)]
    data = build_v2(recs * 4, base_offset=100) + build_v2(recs * 4, base_offset=104) + build_control(1, base_offset=108) + build_v2(recs * 3, base_offset=109)
    index = batch_index.build(data, 100).to_bytes()
    entry = SegmentEntry(
        topic="t", partition=0, base_offset=100, last_offset=111, object_key="t-0/00000000000000000100.log", size=len(data), record_count=12,
        min_timestamp=-1, max_timestamp=-1, checksum="crc32c:00000000", leader_epoch=0, upload_time_ms=1, files=("log",), control_records=1,
    )
    return entry, index


def test_a_straddling_segment_counts_the_batches_from_its_first_offset() -> None:
    entry, index = _segment()
    straddling = registered_from(entry, 104, index)
    assert (straddling.first, straddling.range_records, straddling.range_control_records) == (104, 8, 1)
    assert (straddling.record_count, straddling.control_records) == (12, 1)  # the object's, unchanged
    later = registered_from(straddling, 109, index)
    assert (later.records_in_range, later.control_records_in_range) == (3, 0)
    assert registered_from(entry, 104, None).records_in_range == -1  # no batch index: unknown
    whole = registered_from(later, 100, index)
    assert (whole.range_records, whole.records_in_range) == (-1, 12)


def test_the_backfill_counts_a_straddling_segment_from_its_first_offset() -> None:
    """Registered from 104 after another segment holding ..103: inside [0, 112) it counts 8
    records and 1 control record, not the object's 12 (nor "partly inside")."""
    entry, index = _segment()
    before = SegmentEntry(
        topic="t", partition=0, base_offset=0, last_offset=103, object_key="t-0/00000000000000000000.log", size=10, record_count=104,
        min_timestamp=-1, max_timestamp=-1, checksum="crc32c:00000001", leader_epoch=0, upload_time_ms=1, files=("log",), control_records=0,
    )
    straddling = registered_from(entry, 104, index)
    assert expected_from_registry([before, straddling], 0, 112) == (112, 2, ())
    assert registry_control_records([before, straddling], 0, 112) == 1
    assert expected_from_registry([before, straddling], 104, 112) == (8, 1, ())  # the range starts at its first offset
    unknown = registered_from(entry, 104, None)
    assert expected_from_registry([before, unknown], 0, 112) == (104, 1, (100,))  # named, never guessed
    assert registry_control_records([before, unknown], 0, 112) is None


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


def test_s3_error_codes_are_found_through_boto3s_wrapper() -> None:
    try:
        try:
            raise _client_error("PreconditionFailed", 412)
        except ClientError as err:
            raise S3UploadFailedError("upload failed") from err
    except S3UploadFailedError as wrapped:
        assert s3_error_code(wrapped) == "PreconditionFailed"
    assert s3_error_code(_client_error("", 412)) == "PreconditionFailed"
    assert s3_error_code(_client_error("ConditionalRequestConflict", 409)) == "ConditionalRequestConflict"
    assert s3_error_code(ValueError("not S3")) is None


class _Store:
    """A client for a store that ignores If-None-Match: every PUT succeeds."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.meta = type("Meta", (), {"endpoint_url": "http://store.example:9000"})()

    def put_object(self, Bucket: str, Key: str, Body: bytes, **_: Any) -> dict[str, Any]:
        self.objects[Key] = Body
        return {}

    def delete_object(self, Bucket: str, Key: str, **_: Any) -> dict[str, Any]:
        self.objects.pop(Key, None)
        return {}


def test_a_store_that_ignores_conditional_writes_is_refused() -> None:
    client = _Store()
    store = RemoteStore(client, "b", Keyspace("tk", "c", 0), transfer_config(8 << 20, 8 << 20, 1), RetryPolicy(attempts=1))
    with pytest.raises(ConfigError, match=r"http://store\.example:9000 \(bucket b\).*ignores conditional writes"):
        store.check_conditional_writes("tk/c/")
    assert client.objects == {}  # the probe is deleted
    with pytest.raises(ConfigError, match="ignores conditional writes"):  # and every .log upload refuses to go on
        store._ensure_conditional_writes()
