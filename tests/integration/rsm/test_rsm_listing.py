"""Issue 18, discovery by listing (no Kafka): segments of one lineage overlapping in part are both
served (clipped, never dropped), an unreadable manifest fails its own partition only, and a segment
whose key the ring lacks fails only the reads of its bytes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.rsm.conftest import CHUNK_SIZE, KEY_ID, PREFIX, SEGMENTS, VARIANTS, RsmBucket, expected_records, log_path, rsm_gateway
from tests.integration.rsm.test_rsm_reads import read_records_endpoint, read_through_plans
from tests.support.rsm_writer import make_rsa_key_pair, random_uuid, write_rsm_segment
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.client.gateway import GatewayClient

pytestmark = pytest.mark.integration

EXPECTED = expected_records()
LAST = EXPECTED[-1].offset


def _joined_segment(directory: Path, first: str, second: str) -> Path:
    """One segment holding the batches of fixture segments ``first`` then ``second`` (as a replica that
    rolled later holds them), with ``first``'s .index and .timeindex (sparse indexes: still right) and
    the producer snapshot at ``second``'s end."""
    base, following = log_path(first), log_path(second)
    log = directory / base.name
    log.write_bytes(base.read_bytes() + following.read_bytes())
    for suffix in (".index", ".timeindex"):
        shutil.copy(base.with_suffix(suffix), log.with_suffix(suffix))
    next_offset = list(iter_batches(following.read_bytes()))[-1].last_offset + 1
    snapshot = base.parent / f"{next_offset:020d}.snapshot"
    shutil.copy(snapshot, directory / snapshot.name)
    return log


def test_segments_of_one_lineage_overlapping_in_part_are_both_served(s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    # A holds 0..643 (fixture segments 0 and 362), B holds 362..925 (segments 362 and 644): leadership
    # moved to a replica that rolled at 362. B ranks first (higher end offset, same epochs); A serves 0..361.
    first, second, third = SEGMENTS
    a = _joined_segment(tmp_path, first, second)
    b = _joined_segment(tmp_path, second, third)
    topic_id = random_uuid()
    client = s3_server.client()
    keys = [
        write_rsm_segment(client, s3_bucket, prefix=PREFIX, topic="moved", topic_id=topic_id, partition=0, segment_dir_or_files=log,
                          chunk_size=CHUNK_SIZE, compression=True)
        for log in (a, b)
    ]
    assert [k.start_offset for k in keys] == [0, 362]
    bucket = RsmBucket(s3_server, s3_bucket, {"moved": topic_id}, {"moved": keys}, b"", b"")
    with rsm_gateway(bucket, key_ring={}) as url:
        detail = httpx.get(f"{url}/v1/clusters/rsm/topics/moved/partitions/0", timeout=60).json()
        assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"], detail["remote"]["segment_count"]) == (0, LAST, 2)
        assert detail["gaps"] == []
        with GatewayClient(url, "rsm") as gateway:
            plan = gateway.plan("moved", 0, 0, 10**7)
            assert plan.object_key == keys[0].object_key("log") and plan.next_offset == 362  # A's plan stops where B starts
        got, transformed = read_through_plans(url, "moved")
        assert got == EXPECTED and transformed > 0
        assert read_records_endpoint(url, "moved") == EXPECTED


@pytest.mark.parametrize("compression", [False, True])
def test_manifests_without_segment_metadata_are_read_to_their_last_batch(s3_server: Any, s3_bucket: str, compression: bool) -> None:
    """Manifests of RSM versions before ``remoteLogSegmentMetadata``: a segment ends where the next
    one starts, the last one where its last batch ends (offset index, then batch headers)."""
    topic_id = random_uuid()
    keys = [
        write_rsm_segment(s3_server.client(), s3_bucket, prefix=PREFIX, topic="old", topic_id=topic_id, partition=0, segment_dir_or_files=log_path(name),
                          chunk_size=CHUNK_SIZE, compression=compression, segment_metadata=False)
        for name in SEGMENTS
    ]
    bucket = RsmBucket(s3_server, s3_bucket, {"old": topic_id}, {"old": keys}, b"", b"")
    with rsm_gateway(bucket, key_ring={}) as url:
        detail = httpx.get(f"{url}/v1/clusters/rsm/topics/old/partitions/0", timeout=60)
        assert detail.status_code == 200, detail.text
        remote = detail.json()["remote"]
        assert (remote["earliest_offset"], remote["latest_offset"], remote["segment_count"]) == (0, LAST, len(SEGMENTS))
        got, _ = read_through_plans(url, "old")
        assert got == EXPECTED
        assert read_records_endpoint(url, "old") == EXPECTED


def test_an_unreadable_manifest_fails_its_own_partition_only(rsm_bucket: RsmBucket) -> None:
    bad = rsm_bucket.keys["plain"][1].object_key("rsm-manifest")
    rsm_bucket.s3_server.client().put_object(Bucket=rsm_bucket.bucket, Key=bad, Body=b"{not json")
    with rsm_gateway(rsm_bucket) as url:
        with GatewayClient(url, "rsm") as client:
            assert client.topics() == {t: [0] for t in VARIANTS}  # still listed: its reads say what is wrong
            extent = client.partition("zipped", 0).remote
            assert extent is not None and (extent.earliest_offset, extent.latest_offset) == (0, LAST)
        broken = httpx.get(f"{url}/v1/clusters/rsm/topics/plain/partitions/0", timeout=60)
        assert broken.status_code == 502 and broken.json()["error"]["code"] == "corrupt_remote_data", broken.text
        assert bad in broken.json()["error"]["message"]


def test_a_segment_whose_key_is_missing_fails_only_its_own_reads(s3_server: Any, s3_bucket: str) -> None:
    # segment 0 encrypted with a key pair the gateway's ring lacks; 362 and 644 plain
    _, other_public = make_rsa_key_pair()
    topic_id = random_uuid()
    client = s3_server.client()
    keys = [
        write_rsm_segment(client, s3_bucket, prefix=PREFIX, topic="mixed", topic_id=topic_id, partition=0, segment_dir_or_files=log_path(name),
                          chunk_size=CHUNK_SIZE, encryption_key=("key-9", other_public) if i == 0 else None)
        for i, name in enumerate(SEGMENTS)
    ]
    private, public = make_rsa_key_pair()
    bucket = RsmBucket(s3_server, s3_bucket, {"mixed": topic_id}, {"mixed": keys}, private, public)
    late = next(e for e in EXPECTED if e.offset >= 700)
    assert late.timestamp is not None
    wanted = next(e.offset for e in EXPECTED if e.timestamp is not None and e.timestamp >= late.timestamp)
    with rsm_gateway(bucket, key_ring={KEY_ID: private.decode()}) as url:
        with GatewayClient(url, "rsm") as gateway:
            assert gateway.offset_for_timestamp("mixed", 0, late.timestamp) == wanted  # never reads segment 0's manifest key
        base = f"{url}/v1/clusters/rsm/topics/mixed/partitions/0"
        ok = httpx.get(f"{base}/records", params={"offset": 700, "max_records": 5, "mode": "REMOTE_ONLY", "isolation_level": "read_committed"}, timeout=60)
        assert ok.status_code == 200 and [r["offset"] for r in ok.json()["records"]][0] == 700, ok.text
        failed = httpx.get(f"{base}/records", params={"offset": 0, "max_records": 5, "mode": "REMOTE_ONLY"}, timeout=60)
        assert failed.status_code == 502 and failed.json()["error"]["code"] == "rsm_decryption_failed", failed.text
