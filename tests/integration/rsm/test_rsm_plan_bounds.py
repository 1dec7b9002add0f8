"""Issue 36: a KIP-405 cluster's plans hold at most ``max_ranges_per_plan`` ranges, as our agent's do,
and continue exactly where the last one ends (SeaweedFS; a broker-written segment of 7,729 small
batches, written as Aiven's RSM writes it, plain and compressed+encrypted). The reader is asked
directly, as ``/records`` asks it: the ``/plan`` route also lowers ``max_bytes`` first, which hid
the missing cut there."""

from __future__ import annotations

import secrets

import pytest

from tests.integration.rsm.conftest import KEY_ID, PREFIX, URL_SECRET, RsmBucket
from tests.support.fixtures import FIXTURES, MANIFEST
from tests.support.rsm_writer import write_rsm_segment
from tiered_kafka.rsm.keys import uuid_from_bytes
from tiered_kafka_gateway.app import create_app
from tiered_kafka_gateway.config import load_settings

pytestmark = pytest.mark.integration

FIXTURE = "large_segments-0"
SEGMENT = sorted(MANIFEST[FIXTURE])[0]
MAX_RANGES = 2
PLANS = 25  # of the segment's ~128 at this bound: enough to see each cut and each continuation


@pytest.mark.parametrize("variant", [{"compression": False, "encryption": False}, {"compression": True, "encryption": True}])
def test_kip405_plans_are_cut_to_max_ranges_per_plan_and_continue_exactly(rsm_bucket: RsmBucket, variant: dict) -> None:
    topic = f"large-{secrets.token_hex(4)}"
    write_rsm_segment(
        rsm_bucket.s3_server.client(), rsm_bucket.bucket, prefix=PREFIX, topic=topic, topic_id=uuid_from_bytes(secrets.token_bytes(16)), partition=0,
        segment_dir_or_files=FIXTURES / FIXTURE / SEGMENT, compression=variant["compression"],
        encryption_key=(KEY_ID, rsm_bucket.public_pem) if variant["encryption"] else None,
    )
    settings = load_settings(clusters={"rsm": rsm_bucket.cluster()}, rsm_url_secret=URL_SECRET, public_url="http://127.0.0.1:9",
                             max_ranges_per_plan=MAX_RANGES, cache={"listing_ttl_s": 0})
    reader = create_app(settings).state.readers["rsm"]
    try:
        offset, covered = 0, []
        for _ in range(PLANS):
            plan = reader.plan(topic, 0, offset, 2**20, range_bytes=4096)  # 1 MiB of 4 KiB ranges: ~256 without the cut
            assert len(plan.ranges) == MAX_RANGES and len(plan.urls) == MAX_RANGES, (offset, len(plan.ranges))
            assert plan.ranges[0].first_offset <= offset <= plan.ranges[-1].last_offset
            covered += [(r.start, r.end, r.first_offset, r.last_offset) for r in plan.ranges]
            offset = plan.ranges[-1].last_offset + 1  # the plan's next_offset
        assert covered[0][0] == 0 and covered[0][2] == 0
        assert all(a[1] == b[0] and a[3] + 1 == b[2] for a, b in zip(covered, covered[1:]))  # contiguous: nothing skipped, nothing twice
    finally:
        reader.close()
