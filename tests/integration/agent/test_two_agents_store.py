"""The conditional PUT two agents rely on, against SeaweedFS, and a segment's tail (two_leaders).

Two replicas' logs are written with the project's log writer (``format.log_writer``): the same
batches, rolled at different offsets, so both have a segment at base 0 with other bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import pytest
from botocore.exceptions import ClientError

from tests.support.batches import Rec, build_v2
from tiered_kafka.format import batch_index
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.local_segments import list_segments, open_segment, read_stats
from tiered_kafka_agent.remote_store import ObjectKeyTakenError, RemoteStore, UploadHooks, transfer_config
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.segment_tail import segment_tail

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
BATCHES = 12


def _batch(i: int, value_size: int) -> bytes:
    return build_v2([Rec(f"k{i}-{j}".encode(), os.urandom(value_size), 1_700_000_000_000 + i) for j in range(4)])


def _replica(directory: Path, batches: list[bytes], roll_after: list[int]) -> Path:
    """A partition log of ``batches`` (each 4 records), rolled after the batches numbered in ``roll_after``."""
    plog = PartitionLog.create(directory / "t-0", LogConfig(retention_ms=-1))
    for i, batch in enumerate(batches):
        plog.append(batch)
        if i in roll_after:
            plog.roll()
    plog.close()
    return directory / "t-0"


def _store(s3_server, bucket: str, threshold: int = 64 * MIB) -> RemoteStore:
    return RemoteStore(s3_server.client(), bucket, Keyspace("tk", "two-agents", 0), transfer_config(threshold, max(5 * MIB, threshold), 4), RetryPolicy(attempts=3, base_s=0.01))


def _upload(store: RemoteStore, directory: Path, base: int, *, first_offset: int | None = None):
    segments, active = list_segments(directory)
    bases = [s.base_offset for s in segments] + [active]
    segment = next(s for s in segments if s.base_offset == base)
    next_base = bases[bases.index(base) + 1]
    with open_segment(segment, next_base) as opened:
        stats = read_stats(opened)
        return store.upload_segment("t", 0, opened, stats, UploadHooks(), first_offset=first_offset), stats


def test_seaweedfs_honours_if_none_match(s3_server, s3_bucket) -> None:
    """The store the tests run on refuses a second create of a key, on both upload paths."""
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="probe", Body=b"one", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=s3_bucket, Key="probe", Body=b"two", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    upload = client.create_multipart_upload(Bucket=s3_bucket, Key="probe")
    part = client.upload_part(Bucket=s3_bucket, Key="probe", UploadId=upload["UploadId"], PartNumber=1, Body=b"three")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.complete_multipart_upload(
            Bucket=s3_bucket, Key="probe", UploadId=upload["UploadId"], IfNoneMatch="*", MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]}
        )
    assert client.get_object(Bucket=s3_bucket, Key="probe")["Body"].read() == b"one"


@pytest.mark.parametrize("multipart", [False, True], ids=["put", "multipart"])
def test_an_upload_never_overwrites_another_leaders_segment(multipart: bool, s3_server, s3_bucket, tmp_path, monkeypatch) -> None:
    value_size = 400 * 1024 if multipart else 1024  # multipart: segments of 7.8 and 10.9 MiB, above a 5 MiB threshold
    batches = [_batch(i, value_size) for i in range(BATCHES)]
    old = _replica(tmp_path / "old", batches, [4, 9])  # segments 0..19, 20..39, 40..
    new = _replica(tmp_path / "new", batches, [6])  # segments 0..27, 28..: the same base 0, other bytes
    store = _store(s3_server, s3_bucket, threshold=5 * MIB if multipart else 64 * MIB)
    calls: list[tuple[str, str]] = []
    store.client.meta.events.register("before-parameter-build.s3", lambda params, model, **_: calls.append((model.name, str(params.get("IfNoneMatch")))))
    keyspace = store.keyspace
    theirs, _ = _upload(store, old, 0)
    # the other leader's object lands between our HEAD and our PUT: the PUT itself must be refused
    head = store._head_or_none
    raced: set[str] = set()

    def head_after_the_race(key: str):
        if key.endswith(".log") and key not in raced:
            raced.add(key)
            return None
        return head(key)

    monkeypatch.setattr(store, "_head_or_none", head_after_the_race)
    stored = {kind: s3_server.client().get_object(Bucket=s3_bucket, Key=keyspace.segment_key("t", 0, 0, FileKind(kind)))["Body"].read() for kind in theirs.files}

    with pytest.raises(ObjectKeyTakenError) as taken:
        _upload(store, new, 0, first_offset=20)
    assert taken.value.theirs is not None and (taken.value.theirs.last_offset, taken.value.theirs.checksum) == (19, theirs.checksum)
    for kind, body in stored.items():  # neither the .log nor its indexes were replaced
        assert s3_server.client().get_object(Bucket=s3_bucket, Key=keyspace.segment_key("t", 0, 0, FileKind(kind)))["Body"].read() == body, kind

    sent = "CompleteMultipartUpload" if multipart else "PutObject"
    assert calls.count((sent, "*")) == 2  # theirs, then ours, refused
    assert calls.count(("CreateMultipartUpload", "None")) == (2 if multipart else 0)

    again, _ = _upload(store, old, 0)  # the same bytes (a retry, or the other leader's identical segment): fine
    assert again.same_segment(theirs)
    assert store.client.get_object(Bucket=s3_bucket, Key=theirs.object_key)["Metadata"]["tk-first-offset"] == "0"


def test_the_conditional_write_probe_passes_on_seaweedfs(s3_server, s3_bucket) -> None:
    """The agent's startup check (``RemoteStore.check_conditional_writes``) accepts SeaweedFS and leaves no probe behind."""
    store = _store(s3_server, s3_bucket)
    store.check_conditional_writes("tk/two-agents/")
    assert list(store.list_keys("tk/")) == []


def test_a_tail_is_a_segment_of_its_own(s3_server, s3_bucket, tmp_path) -> None:
    """The batches from the one holding the first missing offset, named by that batch's base offset."""
    batches = [_batch(i, 1024) for i in range(BATCHES)]
    new = _replica(tmp_path / "new", batches, [6])  # 0..27, 28..
    segments, active = list_segments(new)
    with open_segment(segments[0], active) as opened:
        stats = read_stats(opened)
        log_bytes = (new / f"{0:020d}.log").read_bytes()
        with segment_tail(opened, stats.batch_index, 21, active) as (tail, tail_next):  # offset 21: inside the batch 20..23
            assert (tail.base_offset, tail_next) == (20, active)
            with open_segment(tail, tail_next) as tail_opened:
                tail_stats = read_stats(tail_opened)
                entry = _store(s3_server, s3_bucket).upload_segment("t", 0, tail_opened, tail_stats, UploadHooks(), first_offset=21)
        assert not tail.directory.exists()  # removed on exit
    index = batch_index.BatchIndex.from_bytes(stats.batch_index)
    position = index.holding(21).position
    body = s3_server.client().get_object(Bucket=s3_bucket, Key=entry.object_key)["Body"].read()
    assert body == log_bytes[position:]
    assert (entry.base_offset, entry.first_offset, entry.last_offset, entry.record_count) == (20, 21, 27, 8)
    assert entry.checksum == f"crc32c:{crc32c.crc32c(body):08x}" and entry.object_key.endswith(f"{20:020d}.log")
    assert FileKind.BATCHINDEX.value in entry.files
