"""Issue 18: the gateway's own reads of a compressed RSM segment (batch headers for plans) GET and
decompress each chunk once, through the bounded cache of de-transformed chunks, not once per 64 KiB
header window (SeaweedFS; the reader in process, to count its GETs)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.rsm.conftest import PREFIX
from tests.support.fixtures import FIXTURES
from tests.support.rsm_writer import random_uuid, write_rsm_segment
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.rsm_reader import RsmClusterReader

pytestmark = pytest.mark.integration

SEGMENT = FIXTURES / "large_segments-0" / "00000000000000000000.log"  # 1 MiB: one 4 MiB chunk, as the RSM's default chunk.size


def _reader(s3_server: Any, bucket: str, **cache: Any) -> RsmClusterReader:
    cluster = {
        "kind": "kip405",
        "rsm": {"bucket": bucket, "key_prefix": PREFIX, "endpoint_url": s3_server.endpoint_url, "region": s3_server.region,
                "access_key_id": s3_server.access_key, "secret_access_key": s3_server.secret_key},
    }
    settings = load_settings(clusters={"rsm": cluster}, cache={"listing_ttl_s": 60, **cache})
    return RsmClusterReader.connect("rsm", settings.clusters["rsm"], settings)


def test_header_windows_share_one_fetched_chunk(s3_server: Any, s3_bucket: str) -> None:
    write_rsm_segment(s3_server.client(), s3_bucket, prefix=PREFIX, topic="big", topic_id=random_uuid(), partition=0,
                      segment_dir_or_files=SEGMENT, chunk_size=4 * 1024 * 1024, compression=True)
    reader = _reader(s3_server, s3_bucket)
    try:
        plan = reader.plan("big", 0, 0, 1024 * 1024, range_bytes=16 * 1024)
        assert len(plan.ranges) > 16 and plan.ranges[-1].end > 15 * 64 * 1024  # over many 64 KiB header windows
        assert reader.s3_gets_by_kind["log"] == 1, reader.s3_gets_by_kind
        assert reader.chunks.misses == 1 and reader.chunks.hits > 0 and reader.chunks.bytes > SEGMENT.stat().st_size
    finally:
        reader.close()

    # a cache too small for the chunk keeps nothing: every read GETs again, still correct
    small = _reader(s3_server, s3_bucket, rsm_chunk_bytes=4096)
    try:
        assert small.plan("big", 0, 0, 1024 * 1024, range_bytes=16 * 1024).ranges == plan.ranges
        assert small.s3_gets_by_kind["log"] > 1 and len(small.chunks) == 0
    finally:
        small.close()
