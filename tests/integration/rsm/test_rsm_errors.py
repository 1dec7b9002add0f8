"""Issue 18: wrong keys, a tampered GCM tag and truncated or corrupt chunks are clear errors, each with
its gateway error code (``rsm_decryption_failed``, ``corrupt_remote_data``), never wrong bytes."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import httpx
import pytest

from tests.integration.rsm.conftest import FIXTURE_PARTITION, KEY_ID, PREFIX, URL_SECRET, RsmBucket, rsm_gateway
from tests.support.batches import Rec, build_v2
from tests.support.fixtures import FIXTURES
from tests.support.rsm_writer import make_rsa_key_pair, random_uuid, write_rsm_segment
from tiered_kafka.errors import CorruptRecordError, GatewayRequestError
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka.client.gateway import GatewayClient, PlannedRange
from tiered_kafka.client.remote_read import fetch_range
from tiered_kafka.rsm.keyring import KeyRing
from tiered_kafka.rsm.manifest import parse_manifest
from tiered_kafka_gateway import rsm_urls

pytestmark = pytest.mark.integration
FIXTURE_LOGS = FIXTURES / FIXTURE_PARTITION


def _error(url: str, topic: str, what: str, offset: int) -> tuple[int, str, str]:
    response = httpx.get(f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0/{what}", params={"offset": offset, "mode": "REMOTE_ONLY"}, timeout=60)
    body = response.json()
    return response.status_code, body.get("error", {}).get("code", ""), body.get("error", {}).get("message", "")


def _rewrite(bucket: RsmBucket, key: str, change: Any) -> None:
    client = bucket.s3_server.client()
    data = client.get_object(Bucket=bucket.bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket.bucket, Key=key, Body=change(bytearray(data)))


def _chunks(bucket: RsmBucket, topic: str, segment: int) -> Any:
    key = bucket.keys[topic][segment]
    manifest = bucket.s3_server.client().get_object(Bucket=bucket.bucket, Key=key.object_key("rsm-manifest"))["Body"].read()
    return key, parse_manifest(manifest, KeyRing.from_pem({KEY_ID: bucket.private_pem})).chunk_index.chunks()


def test_wrong_keys_are_clear_errors(rsm_bucket: RsmBucket) -> None:
    other_private, _ = make_rsa_key_pair()
    with rsm_gateway(rsm_bucket, key_ring={KEY_ID: other_private.decode()}) as url:
        status, code, message = _error(url, "sealed", "plan", 0)
        assert (status, code) == (502, "rsm_decryption_failed") and f"key pair {KEY_ID!r}" in message, message
        assert _error(url, "sealed", "records", 0)[:2] == (502, "rsm_decryption_failed")
        with GatewayClient(url, "rsm", retries=0) as client, pytest.raises(GatewayRequestError) as raised:
            client.plan("vault", 0, 0, 10_000)
        assert raised.value.code == "rsm_decryption_failed"
        assert _error(url, "plain", "plan", 0)[0] == 200  # unencrypted segments do not need the key
    with rsm_gateway(rsm_bucket, key_ring={"another-id": other_private.decode()}) as url:
        status, code, message = _error(url, "sealed", "plan", 0)
        assert (status, code) == (502, "rsm_decryption_failed") and "does not hold" in message, message


def test_a_tampered_gcm_tag_is_a_clear_error(rsm_bucket: RsmBucket) -> None:
    key, chunks = _chunks(rsm_bucket, "sealed", 0)

    def flip_tag(data: bytearray) -> bytes:
        data[chunks[0].transformed_size - 1] ^= 0x01  # the last byte of chunk 0's GCM tag
        return bytes(data)

    _rewrite(rsm_bucket, key.object_key("log"), flip_tag)
    with rsm_gateway(rsm_bucket) as url:
        for what in ("plan", "records"):
            status, code, message = _error(url, "sealed", what, 0)
            assert (status, code) == (502, "rsm_decryption_failed") and key.object_key("log") in message, message
        assert _error(url, "sealed", "plan", 400)[0] == 200  # the other segments are intact


def test_truncated_and_corrupt_chunks_are_clear_errors(rsm_bucket: RsmBucket) -> None:
    key, chunks = _chunks(rsm_bucket, "vault", 2)
    _rewrite(rsm_bucket, key.object_key("log"), lambda data: bytes(data[: chunks[-1].transformed_position + 10]))  # the last chunk cut short
    with rsm_gateway(rsm_bucket) as url:
        status, code, message = _error(url, "vault", "records", 900)
        assert status == 502 and code in ("rsm_decryption_failed", "corrupt_remote_data") and key.object_key("log") in message, message

        # a compressed segment is decompressed by the client: a chunk that is not a zstd frame is a CorruptRecordError
        zipped, zipped_chunks = _chunks(rsm_bucket, "zipped", 0)
        with GatewayClient(url, "rsm") as client:
            plan = client.plan("zipped", 0, 0, 8192, range_bytes=4096)
            planned = plan.ranges[0]
            assert planned.transformed is not None

            def scramble(data: bytearray) -> bytes:
                data[0:4] = b"\0\0\0\0"  # chunk 0's zstd magic number
                return bytes(data)

            _rewrite(rsm_bucket, zipped.object_key("log"), scramble)
            with pytest.raises(CorruptRecordError, match="zstd|frame|decompress"):
                fetch_range(client, "zipped", 0, planned)


def _sealed_range(client: GatewayClient, chunks: Any) -> tuple[PlannedRange, list[Any]]:
    """The first range of a plan of ``sealed`` covering many 4 KiB chunks, and the chunks it covers."""
    planned = client.plan("sealed", 0, 0, 64 * 1024, range_bytes=64 * 1024).ranges[0]
    covered = [c for c in chunks if c.original_position < planned.end and c.original_position + c.original_size > planned.start]
    assert planned.url.split("?")[0].endswith(".log") and "/rsm-ranges/v1/" in planned.url and len(covered) >= 4, (planned, len(covered))
    return planned, covered


def test_the_sdk_names_a_failed_decryption_of_a_signed_range(rsm_bucket: RsmBucket) -> None:
    """A chunk that fails its GCM tag *after* the first ones of a range, found by the gateway's byte-range
    URL: a JSON 502 ``rsm_decryption_failed`` before any byte (never a 206 cut short), which the SDK raises
    at once (not retried as an S3 5xx) as a GatewayRequestError naming the object and the code."""
    key, chunks = _chunks(rsm_bucket, "sealed", 0)
    with rsm_gateway(rsm_bucket) as url, GatewayClient(url, "rsm", retries=3, backoff_s=0.01) as client:
        planned, covered = _sealed_range(client, chunks)
        assert fetch_range(client, "sealed", 0, planned) == (FIXTURE_LOGS / "00000000000000000000.log").read_bytes()[planned.start : planned.end]
        late = covered[-2]  # neither the first chunk of the range nor its last

        def flip_tag(data: bytearray) -> bytes:
            data[late.transformed_position + late.transformed_size - 1] ^= 0x01
            return bytes(data)

        _rewrite(rsm_bucket, key.object_key("log"), flip_tag)
        raw = httpx.get(planned.url, headers={"Range": planned.range_header}, timeout=60)
        assert raw.status_code == 502 and raw.json()["error"]["code"] == "rsm_decryption_failed", raw.text[:300]
        with pytest.raises(GatewayRequestError) as raised:  # retried, it would end as a RemoteReadError "failed after 4 attempts"
            fetch_range(client, "sealed", 0, planned)
        message = str(raised.value)
        assert (raised.value.status, raised.value.code) == (502, "rsm_decryption_failed")
        assert "rsm_decryption_failed" in message and key.object_key("log") in message and "signature" not in message, message


def test_the_sdk_names_a_wrong_key_behind_a_signed_range(rsm_bucket: RsmBucket) -> None:
    """A plan signed by a gateway holding the key, served by one whose key ring holds another key under
    the same id (a replica configured differently): rsm_decryption_failed from the SDK, naming the object."""
    other_private, _ = make_rsa_key_pair()
    key, chunks = _chunks(rsm_bucket, "sealed", 0)
    with rsm_gateway(rsm_bucket) as good, rsm_gateway(rsm_bucket, key_ring={KEY_ID: other_private.decode()}) as wrong:
        with GatewayClient(good, "rsm") as client:
            planned, _ = _sealed_range(client, chunks)
            elsewhere = dataclasses.replace(planned, url=planned.url.replace(good, wrong))
            with pytest.raises(GatewayRequestError) as raised:
                client.fetch(elsewhere)
        assert raised.value.code == "rsm_decryption_failed" and key.object_key("log") in str(raised.value), raised.value
        assert f"key pair {KEY_ID!r}" in str(raised.value)


def test_a_signed_range_past_the_bound_is_refused(rsm_bucket: RsmBucket) -> None:
    """The byte-range endpoint verifies a whole range before answering, so it serves at most
    max_bytes_limit (or one batch): a larger signed range is a clear 422, raised by the SDK."""
    key = rsm_bucket.keys["sealed"][0].object_key("log")
    with rsm_gateway(rsm_bucket, gateway_settings={"max_bytes_limit": 8192, "default_max_bytes": 4096}) as url:
        signed = rsm_urls.signed_url(url, URL_SECRET.encode(), "rsm", key, 0, 20_000, 60)
        planned = PlannedRange(0, 20_000, 0, 99, signed, "bytes=0-19999")
        with GatewayClient(url, "rsm") as client, pytest.raises(GatewayRequestError) as raised:
            client.fetch(planned)
        assert (raised.value.status, raised.value.code) == (422, "invalid_request")
        assert "max_bytes_limit (8192)" in str(raised.value) and key in str(raised.value), raised.value


def test_a_tampered_chunk_past_the_first_mebibytes_of_a_range_is_a_json_error(rsm_bucket: RsmBucket, tmp_path: Any) -> None:
    """A range of several MiB (1 MiB chunks) whose last chunk fails its GCM tag: 502 ``rsm_decryption_failed``
    before the status line, not a 206 whose body stops short after the chunks that did decrypt."""
    directory = tmp_path / "big-0"
    plog = PartitionLog.create(directory, LogConfig(retention_ms=-1))
    while plog.log_end_offset < 5 * 1024:  # ~5.3 MiB: batches of 64 records of 1 KiB
        plog.append(build_v2([Rec(None, os.urandom(1024), 1_700_000_000_000) for _ in range(64)]))
    plog.roll()
    plog.close()
    key = write_rsm_segment(
        rsm_bucket.s3_server.client(), rsm_bucket.bucket, prefix=PREFIX, topic="big", topic_id=random_uuid(), partition=0,
        segment_dir_or_files=directory / f"{0:020d}.log", chunk_size=1024 * 1024, encryption_key=(KEY_ID, rsm_bucket.public_pem),
    )
    manifest = rsm_bucket.s3_server.client().get_object(Bucket=rsm_bucket.bucket, Key=key.object_key("rsm-manifest"))["Body"].read()
    chunks = parse_manifest(manifest, KeyRing.from_pem({KEY_ID: rsm_bucket.private_pem})).chunk_index.chunks()
    with rsm_gateway(rsm_bucket) as url, GatewayClient(url, "rsm", retries=1) as client:
        planned = client.plan("big", 0, 0, 8 * 1024 * 1024).ranges[0]
        assert planned.end == chunks[-1].original_position + chunks[-1].original_size and planned.size > 5 * 1024 * 1024 and len(chunks) == 6

        def flip_last_tag(data: bytearray) -> bytes:
            data[-1] ^= 0x01
            return bytes(data)

        _rewrite(rsm_bucket, key.object_key("log"), flip_last_tag)
        raw = httpx.get(planned.url, headers={"Range": planned.range_header}, timeout=60)
        assert raw.status_code == 502 and raw.json()["error"]["code"] == "rsm_decryption_failed", (raw.status_code, raw.content[:200])
        with pytest.raises(GatewayRequestError, match="rsm_decryption_failed") as raised:
            fetch_range(client, "big", 0, planned)
        assert key.object_key("log") in str(raised.value)
