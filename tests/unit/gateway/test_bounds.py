"""Issue 29's bounds on the gateway, over fakes: decoding per /records response (``records.DecodeBudget``),
the segment list cache, registry object keys outside their partition, a
dependency's failure answered without its detail, and ``/readyz`` answered from a one-second cache."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tests.support.batches import Rec, build_v2
from tests.unit.gateway.fakes import TOPIC, transactional_cluster
from tiered_kafka.format.codecs import decompress_bounded
from tiered_kafka.format.record_batch import HEADER_V2_SIZE, iter_batches
from tiered_kafka.read_plan import ByteRange
from tiered_kafka.registry import RegistryUnavailableError
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, answer_for
from tiered_kafka_gateway.records import DecodeBudget, decoded_size_bound
from tiered_kafka_gateway.routes.health import ReadyChecks

MIB = 2**20


class Bytes:
    """The one ClusterSource call ``DecodeBudget.read`` makes, over one object."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_range(self, key: str, byte_range: ByteRange) -> bytes:
        return self.data[byte_range.start : byte_range.end]


def bombs(count: int, value_bytes: int, codec: int = 4) -> bytes:
    """``count`` batches of one record each whose value is ``value_bytes`` zeros (a thousandfold and more once compressed)."""
    return b"".join(build_v2([Rec(b"k", bytes(value_bytes), 1_700_000_000_000)], codec=codec, base_offset=i) for i in range(count))


def whole(data: bytes) -> ByteRange:
    return ByteRange(0, len(data), 0, 10**6)


def test_decoding_stops_at_the_decompressed_bound_and_says_where_to_continue() -> None:
    data = bombs(10, MIB)
    assert len(data) < 10 * MIB // 1000  # a thousandfold
    budget = DecodeBudget(0, 500, 3 * MIB + MIB // 2)
    batches = budget.read(Bytes(data), "k", whole(data))  # type: ignore[arg-type]
    assert [b.base_offset for b in batches] == [0, 1, 2] and budget.full and budget.next_offset == 3
    assert budget.spent <= budget.limit
    again = DecodeBudget(budget.next_offset, 500, 3 * MIB + MIB // 2)  # the next read continues exactly
    rest = data[sum(len(b) for b in [build_v2([Rec(b"k", bytes(MIB), 1_700_000_000_000)], codec=4, base_offset=i) for i in range(3)]) :]
    assert [b.base_offset for b in again.read(Bytes(rest), "k", whole(rest))] == [3, 4, 5]  # type: ignore[arg-type]


def test_decoding_stops_at_max_records() -> None:
    data = b"".join(build_v2([Rec(None, b"v", 1)] * 5, base_offset=5 * i) for i in range(10))
    budget = DecodeBudget(0, 12, 64 * MIB)
    batches = budget.read(Bytes(data), "k", whole(data))  # type: ignore[arg-type]
    assert len(batches) == 3 and budget.next_offset == 15 and budget.full  # 15 records decoded for 12 wanted, not 50


def test_a_first_batch_above_the_bound_is_a_clear_422() -> None:
    data = bombs(1, 4 * MIB, codec=1)
    with pytest.raises(GatewayError) as too_large:
        DecodeBudget(0, 500, MIB).read(Bytes(data), "k", whole(data))  # type: ignore[arg-type]
    assert too_large.value.error is ErrorCode.BATCH_TOO_LARGE and too_large.value.details == {"offset": 0, "max_decoded_bytes": MIB}


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_the_size_bound_holds_for_every_codec(codec: int) -> None:
    records = [Rec(f"k{i}".encode(), bytes(range(256)) * (i + 1) + bytes(5000), 1) for i in range(20)]
    batch = next(iter(iter_batches(build_v2(records, codec=codec))))
    actual = len(decompress_bounded(codec, batch.buffer[HEADER_V2_SIZE:]))
    assert actual <= decoded_size_bound(batch, 64 * MIB)
    assert decoded_size_bound(batch, 1000) > 1000  # gzip stops counting past the limit; the others declare it


def test_a_gzip_stream_is_counted_without_keeping_it() -> None:
    batch = next(iter(iter_batches(build_v2([Rec(None, bytes(50 * MIB), 1)], codec=1))))
    assert batch.size < 100_000 and 5 * MIB < decoded_size_bound(batch, 5 * MIB) <= 6 * MIB
    assert decoded_size_bound(batch, 64 * MIB) >= 50 * MIB


def test_the_segment_list_is_loaded_once_per_registry_extent(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    loads = []
    real = cluster.registry.segments
    cluster.registry.segments = lambda topic, partition: loads.append(1) or real(topic, partition)  # type: ignore[method-assign]
    first = cluster.reader.segments(TOPIC, 0)
    assert cluster.reader.segments(TOPIC, 0) == first and len(loads) == 1
    cluster.registry.entries = cluster.registry.entries[1:]  # retention: the extent changes
    assert [s.base_offset for s in cluster.reader.segments(TOPIC, 0)] == [14] and len(loads) == 2


@pytest.mark.parametrize("key", ["p/c1/other-0/00000000000000000000.log", "p/c1/txn-0/../../x/txn-0/00000000000000000000.log",
                                 "elsewhere/secret", "p/c1/txn-0/00000000000000000000.index"])
def test_an_object_key_outside_the_partition_is_never_presigned(tmp_path: Path, key: str, caplog: pytest.LogCaptureFixture) -> None:
    cluster = transactional_cluster(tmp_path)
    first, second = cluster.registry.entries
    cluster.registry.entries = [first.__class__(**{**first.__dict__, "object_key": key}), second]
    presigns = cluster.reader.presigns
    for call in (lambda: cluster.reader.plan(TOPIC, 0, 3, 1 << 20), lambda: cluster.reader.segments(TOPIC, 0)):
        with pytest.raises(Exception) as refused, caplog.at_level(logging.ERROR):
            call()
        answer = answer_for(refused.value, "c1")  # type: ignore[arg-type]
        assert answer is not None and answer[0] is ErrorCode.CORRUPT_REGISTRY_DATA
        assert f"{TOPIC}-0" in answer[1] and "segment 0" in answer[1] and key not in answer[1]
    assert cluster.reader.presigns == presigns and key in caplog.text  # the key: in the log only
    assert cluster.reader.plan(TOPIC, 0, 15, 1 << 20).ranges  # the partition's other segment still serves


def test_a_dependency_failure_names_the_dependency_and_an_error_id_not_its_text(caplog: pytest.LogCaptureFixture) -> None:
    raw = "Could not connect to the endpoint URL: http://10.1.2.3:8333/bucket"
    with caplog.at_level(logging.WARNING):
        code, message, details = answer_for(GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 read of p/t-0/0.log failed: {raw}"), "c1")  # type: ignore[misc]
        registry = answer_for(RegistryUnavailableError("Error 111 connecting to redis.internal:6379. Connection refused."), "c1")
    assert code is ErrorCode.STORAGE_UNAVAILABLE and "10.1.2.3" not in message and message.startswith("S3 read of p/t-0/0.log failed (s3; error id ")
    assert details["dependency"] == "s3" and details["error_id"] in caplog.text and raw in caplog.text
    assert registry is not None and registry[2]["dependency"] == "redis" and "redis.internal" not in registry[1]
    assert registry[1].startswith("the registry of cluster c1 is unavailable (redis; error id ")


class Reader:
    def __init__(self, status: str) -> None:
        self.status, self.calls = status, 0

    def check(self) -> dict[str, str]:
        self.calls += 1
        return {"redis": "ok", "segments": self.status}


def test_readiness_is_checked_once_per_second_and_shows_no_detail() -> None:
    readers = {"a": Reader("ok"), "b": Reader("unavailable (kip405): connection to 10.9.8.7:9092 refused")}
    checks = ReadyChecks(ttl_s=60)
    first = checks.get(readers)
    for _ in range(50):
        assert checks.get(readers) == first
    assert readers["a"].calls == 1 and readers["b"].calls == 1
    assert first["b"]["segments"].startswith("unavailable (kip405) (error id ") and "10.9.8.7" not in first["b"]["segments"]
    assert ReadyChecks(ttl_s=0).get(readers) and readers["a"].calls == 2
