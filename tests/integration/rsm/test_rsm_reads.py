"""Issue 18: the SDK, the records endpoint, offsets by time and the CLI read every RSM variant offset for
offset equal to the broker-written fixtures (SeaweedFS, the gateway on uvicorn, listing discovery)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.rsm.conftest import VARIANTS, Expected, RsmBucket, expected_records, rsm_gateway
from tiered_kafka.bulk import read_table
from tiered_kafka.client.gateway import GatewayClient, coalesce_ranges
from tiered_kafka.modes import Mode
from tiered_kafka.client.remote_read import decode_range, fetch_range

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).parent / "tiered-kafka"
EXPECTED = expected_records()
LAST = EXPECTED[-1].offset


def read_through_plans(url: str, topic: str, *, max_bytes: int = 20_000, range_bytes: int = 4096) -> tuple[list[Expected], int]:
    """REMOTE_ONLY through GatewayClient + remote_read.fetch_range (what the consumer, bulk and Spark use):
    every record from offset 0, and how many of the ranges were chunk-aligned (transformed)."""
    out: list[Expected] = []
    transformed = 0
    with GatewayClient(url, "rsm") as client:
        offset = 0
        while offset <= LAST:
            plan = client.plan(topic, 0, offset, max_bytes, range_bytes=range_bytes)
            for planned in coalesce_ranges(plan.ranges, max_bytes):
                transformed += planned.transformed is not None
                for batch in decode_range(fetch_range(client, topic, 0, planned), planned, object_key=plan.object_key):
                    out.extend(Expected(r.offset, r.timestamp, r.key, r.value) for r in batch.records if r.offset >= offset)
            offset = plan.next_offset
    return out, transformed


def read_records_endpoint(url: str, topic: str) -> list[Expected]:
    out: list[Expected] = []
    offset = 0
    with httpx.Client(base_url=f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0", timeout=60) as http:
        while offset <= LAST:
            response = http.get("/records", params={"offset": offset, "max_records": 200, "mode": Mode.REMOTE_ONLY.value, "max_bytes": 30_000})
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["source"] == "remote" and body["records"], body
            out.extend(
                Expected(r["offset"], r["timestamp"], None if r["key"] is None else base64.b64decode(r["key"]),
                         None if r["value"] is None else base64.b64decode(r["value"]))
                for r in body["records"]
            )
            offset = body["next_offset"]
    return out


@pytest.mark.parametrize("topic", sorted(VARIANTS))
def test_each_variant_reads_offset_for_offset(rsm_bucket: RsmBucket, topic: str) -> None:
    with rsm_gateway(rsm_bucket) as url:
        with GatewayClient(url, "rsm") as client:
            assert client.topics() == {t: [0] for t in VARIANTS}
            extent = client.partition(topic, 0).remote
            assert extent is not None and (extent.earliest_offset, extent.latest_offset, extent.segment_count) == (0, LAST, 3)

        got, transformed = read_through_plans(url, topic)
        assert got == EXPECTED
        # compressed-only segments come as chunk-aligned presigned ranges; plain and encrypted ones do not
        chunked = VARIANTS[topic]["compression"] and not VARIANTS[topic]["encryption"]
        assert (transformed > 0) == chunked, transformed

        assert read_records_endpoint(url, topic) == EXPECTED

        table = read_table(url, "rsm", topic, 0)
        assert table.column("offset").to_pylist() == [e.offset for e in EXPECTED]
        assert table.column("value").to_pylist() == [e.value for e in EXPECTED]
        assert table.column("key").to_pylist() == [e.key for e in EXPECTED]

        target = EXPECTED[500].timestamp
        assert target is not None
        wanted = next(e.offset for e in EXPECTED if e.timestamp is not None and e.timestamp >= target)
        with GatewayClient(url, "rsm") as client:
            assert client.offset_for_timestamp(topic, 0, target) == wanted


def test_the_cli_cats_each_variant(rsm_bucket: RsmBucket) -> None:
    """``tiered-kafka cat`` (TieredConsumer, REMOTE_ONLY) prints every offset of every variant."""
    with rsm_gateway(rsm_bucket) as url:
        for topic in sorted(VARIANTS):
            done = subprocess.run([str(CLI), "cat", "--gateway", url, "--cluster", "rsm", topic, "0"], capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            lines = [json.loads(line) for line in done.stdout.splitlines()]
            assert [line["offset"] for line in lines] == [e.offset for e in EXPECTED], topic


def test_plans_of_compressed_segments_never_merge_chunked_ranges(rsm_bucket: RsmBucket) -> None:
    with rsm_gateway(rsm_bucket) as url, GatewayClient(url, "rsm") as client:
        plan = client.plan("zipped", 0, 0, 64 * 1024, range_bytes=4096)
        assert len(plan.ranges) > 1 and all(r.transformed is not None for r in plan.ranges)
        assert coalesce_ranges(plan.ranges, 10**9) == list(plan.ranges)
        first = plan.ranges[0].transformed
        assert first is not None and first.original_start <= plan.ranges[0].start
        assert sum(first.chunk_sizes) == first.fetch_end - first.fetch_start


def _first_plan(url: str, topic: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0/plan", params={"offset": 0, "max_bytes": 20_000}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_encrypted_plans_point_at_signed_gateway_urls(rsm_bucket: RsmBucket) -> None:
    """The client never sees a key: an encrypted segment's URLs are the gateway's, scoped like presigned URLs."""
    with rsm_gateway(rsm_bucket) as url:
        planned = _first_plan(url, "sealed")["ranges"][0]
        assert planned["url"].startswith(f"{url}/rsm-ranges/v1/rsm/") and planned["transformed"] is None
        ok = httpx.get(planned["url"], headers={"Range": planned["range_header"]}, timeout=30)
        assert ok.status_code == 206 and len(ok.content) == planned["size"]
        assert ok.headers["content-range"].startswith(f"bytes {planned['start']}-{planned['end'] - 1}/")
        original = (Path(__file__).resolve().parents[2] / "fixtures" / "kafka-segments" / "test_topic_a-0" / "00000000000000000000.log").read_bytes()
        assert ok.content == original[planned["start"] : planned["end"]]

        other_range = httpx.get(planned["url"], headers={"Range": f"bytes=0-{planned['end']}"}, timeout=30)
        assert (other_range.status_code, other_range.json()["error"]["code"]) == (403, "rsm_url_refused")
        forged = planned["url"].replace(f"end={planned['end']}", f"end={planned['end'] + 1}")
        refused = httpx.get(forged, headers={"Range": f"bytes={planned['start']}-{planned['end']}"}, timeout=30)
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "rsm_url_refused")
        assert "signature" in refused.json()["error"]["message"]


def test_probes_and_metrics_cover_a_kip405_cluster(rsm_bucket: RsmBucket) -> None:
    with rsm_gateway(rsm_bucket) as url:
        ready = httpx.get(f"{url}/readyz", timeout=30)
        assert ready.status_code == 200 and ready.json()["clusters"]["rsm"] == {"s3": "ok", "segments": "ok"}, ready.text
        _first_plan(url, "zipped")
        metrics = httpx.get(f"{url}/metrics", timeout=30)
        assert metrics.status_code == 200 and 'cache="rsm_manifest"' in metrics.text, metrics.text[:500]
