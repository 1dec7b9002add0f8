"""``remote.ClusterReader`` over fakes of its registry and S3 client (``fakes``): plans (batch-aligned,
presigned, gaps, offsets outside the range), offsets (extent, remote last stable offset, offsets for
a timestamp) and the registry's failures answered by ``errors.ANSWERS``."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.transactions import BASE_TIMESTAMP
from tiered_kafka.registry import CoverageStart, Gap, MalformedRegistryDataError, RegistryUnavailableError
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, code_of
from tiered_kafka_gateway.records import IsolationLevel
from tiered_kafka_gateway.routes.partitions import remote_offset_for_timestamp
from tests.unit.gateway.fakes import TOPIC, transactional_cluster


def test_a_plan_is_batch_aligned_presigned_and_counted(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    plan = cluster.reader.plan(TOPIC, 0, 3, 1 << 20)
    assert plan.segment.object_key.endswith("00000000000000000000.log") and plan.gap is None
    assert plan.ranges[0].first_offset == 2 and plan.ranges[-1].last_offset == 13  # from the batch holding 3 to the segment's end
    assert plan.ranges[-1].end == plan.segment.size
    query = parse_qs(urlsplit(plan.urls[0]).query)
    assert "range" in query["X-Amz-SignedHeaders"][0] and urlsplit(plan.urls[0]).path == f"/bucket/{plan.segment.object_key}"
    assert cluster.reader.presigns == len(plan.urls) and cluster.reader.s3_gets_by_kind["index"] == 1
    gets = cluster.reader.s3_gets
    cluster.reader.plan(TOPIC, 0, 3, 1 << 20)
    assert cluster.reader.s3_gets == gets  # a repeated plan: no S3 request (indexes and headers cached)


def test_a_plan_in_a_gap_starts_at_the_next_segment_and_names_the_gap(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    first, second = cluster.registry.entries
    cluster.registry.entries = [first.__class__(**{**first.__dict__, "last_offset": 9}), second]  # 10..13 not registered
    cluster.registry.gap_list = [Gap(10, 13, "segment lost", 0)]
    plan = cluster.reader.plan(TOPIC, 0, 11, 1 << 20)
    assert plan.segment.base_offset == 14 and plan.gap == Gap(10, 13, "segment lost", 0) and plan.ranges[0].first_offset == 14


def test_offsets_outside_the_range_and_before_the_coverage_start_are_416(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    with pytest.raises(GatewayError) as past:
        cluster.reader.plan(TOPIC, 0, 22, 1 << 20)
    assert past.value.error is ErrorCode.OFFSET_NOT_REMOTE and past.value.details == {"earliest_offset": 0, "latest_offset": 21}
    first, second = cluster.registry.entries
    cluster.registry.entries = [second]
    cluster.registry.coverage = CoverageStart(14, 1)
    with pytest.raises(GatewayError) as before:
        cluster.reader.plan(TOPIC, 0, 3, 1 << 20)
    assert before.value.error is ErrorCode.OFFSET_OUT_OF_RANGE and before.value.details["coverage_start_offset"] == 14
    cluster.registry.coverage = None
    with pytest.raises(GatewayError) as unknown:
        cluster.reader.plan("other", 0, 0, 1 << 20)
    assert unknown.value.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_extent_and_remote_last_stable_offset(tmp_path: Path) -> None:
    open_txn = transactional_cluster(tmp_path / "a")
    info = open_txn.reader.partition_info(TOPIC, 0)
    assert info is not None and (info.earliest_offset, info.latest_offset, info.segment_count) == (0, 21, 2)
    assert open_txn.reader.last_stable_offset(TOPIC, 0) == 19  # p11 open since 19 at the end of remote data
    assert transactional_cluster(tmp_path / "b", open_txn_first_offset=-1).reader.last_stable_offset(TOPIC, 0) == 22  # none open: the end
    assert transactional_cluster(tmp_path / "c", open_txn_first_offset=-2).reader.last_stable_offset(TOPIC, 0) is None  # unknown
    assert open_txn.reader.topics() == ({TOPIC: [0]}, True)


def test_offsets_for_a_timestamp_follow_listoffsets_and_read_committed(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path, open_txn_first_offset=-2)
    reader = cluster.reader
    assert remote_offset_for_timestamp(reader, TOPIC, 0, BASE_TIMESTAMP + 13) == (13, BASE_TIMESTAMP + 13)
    assert remote_offset_for_timestamp(reader, TOPIC, 0, BASE_TIMESTAMP + 14) == (15, BASE_TIMESTAMP + 15)  # 14 is a marker
    assert remote_offset_for_timestamp(reader, TOPIC, 0, BASE_TIMESTAMP + 22) is None  # past every record
    committed = IsolationLevel.READ_COMMITTED
    assert remote_offset_for_timestamp(reader, TOPIC, 0, BASE_TIMESTAMP + 3, committed) == (3, BASE_TIMESTAMP + 3)  # p7: COMMIT read ahead
    assert remote_offset_for_timestamp(reader, TOPIC, 0, BASE_TIMESTAMP + 19, committed) is None  # p11: its marker is not remote


def test_registry_failures_are_raised_as_they_are_and_answered_by_the_table(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    cluster.registry.failure = RegistryUnavailableError("connection refused")
    with pytest.raises(RegistryUnavailableError) as down:
        cluster.reader.plan(TOPIC, 0, 0, 1 << 20)
    assert code_of(down.value) is ErrorCode.REGISTRY_UNAVAILABLE
    cluster.registry.failure = MalformedRegistryDataError("tk:c1:txn:0:segments holds 'x' in field size")
    with pytest.raises(MalformedRegistryDataError) as corrupt:
        cluster.reader.partition_info(TOPIC, 0)
    assert code_of(corrupt.value) is ErrorCode.CORRUPT_REGISTRY_DATA


def test_a_missing_object_is_corrupt_remote_data_and_close_releases_the_clients(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    del cluster.s3.objects[cluster.registry.entries[1].object_key[: -len("log")] + "index"]
    with pytest.raises(GatewayError, match="is missing") as missing:
        cluster.reader.plan(TOPIC, 0, 15, 1 << 20)
    assert missing.value.error is ErrorCode.CORRUPT_REMOTE_DATA
    assert cluster.reader.check() == {"redis": "ok", "s3": "ok"}
    cluster.reader.close()
    assert cluster.s3.closed
