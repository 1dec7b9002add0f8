"""The audit's accounting as pure logic: ranges merged and subtracted, each kind of coverage counted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tiered_kafka.registry import Coverage, CoverageStart, Gap
from tiered_kafka_agent.__main__ import main
from tiered_kafka_agent.audit import AuditError, KafkaOffsets, audit_partition, merge_ranges, report, subtract


@pytest.mark.parametrize(
    ("ranges", "merged"),
    [
        pytest.param([], [], id="none"),
        pytest.param([(0, 9), (10, 19)], [(0, 19)], id="adjacent"),
        pytest.param([(20, 29), (0, 9)], [(0, 9), (20, 29)], id="apart-unsorted"),
        pytest.param([(0, 50), (10, 20)], [(0, 50)], id="contained"),
    ],
)
def test_merge_ranges(ranges: list[tuple[int, int]], merged: list[tuple[int, int]]) -> None:
    assert merge_ranges(ranges) == merged


@pytest.mark.parametrize(
    ("covered", "missing"),
    [
        pytest.param([], [(10, 19)], id="nothing-covered"),
        pytest.param([(0, 100)], [], id="all-covered"),
        pytest.param([(12, 13)], [(10, 11), (14, 19)], id="hole-in-the-middle"),
        pytest.param([(0, 11), (18, 30)], [(12, 17)], id="both-ends"),
        pytest.param([(20, 30)], [(10, 19)], id="after"),
    ],
)
def test_subtract(covered: list[tuple[int, int]], missing: list[tuple[int, int]]) -> None:
    assert subtract((10, 19), merge_ranges(covered)) == missing


@dataclass
class _Segment:
    base_offset: int
    last_offset: int

    @property
    def first(self) -> int:  # SegmentEntry.first: the registered range starts here
        return self.base_offset


@dataclass
class _Registry:
    """The three reads the audit makes, over plain values."""

    coverage_: Coverage
    segments_: list[_Segment] = field(default_factory=list)
    gaps_: list[Gap] = field(default_factory=list)

    def coverage(self, topic: str, partition: int) -> Coverage:
        return self.coverage_

    def segments(self, topic: str, partition: int) -> list[_Segment]:
        return self.segments_

    def gaps(self, topic: str, partition: int) -> list[Gap]:
        return self.gaps_


START = CoverageStart(100, 1)


def test_every_kind_of_coverage_counts() -> None:
    registry = _Registry(
        Coverage(START, 500, 200),  # 100..199 expired by remote retention
        [_Segment(200, 299), _Segment(300, 349)],
        [Gap(350, 399, "deleted before upload", 5)],
    )
    result = audit_partition(registry, "t", 0, (400, 650))  # type: ignore[arg-type]
    assert result.ok and result.unaccounted == []
    assert result.remote == [(200, 349)]


def test_an_offset_nobody_accounts_for_fails() -> None:
    registry = _Registry(Coverage(START, 400, -1), [_Segment(100, 199), _Segment(250, 399)])
    result = audit_partition(registry, "t", 0, (380, 700))  # type: ignore[arg-type]
    assert not result.ok and result.unaccounted == [(200, 249)]
    assert "UNACCOUNTED:    200..249" in result.to_text()
    assert '"ok": false' in report([result], as_json=True)


def test_offsets_before_the_coverage_start_are_not_claimed() -> None:
    registry = _Registry(Coverage(START, -1, -1))
    assert audit_partition(registry, "t", 0, (100, 150)).ok  # type: ignore[arg-type]
    assert not audit_partition(registry, "t", 0, (120, 150)).ok  # type: ignore[arg-type]
    assert audit_partition(_Registry(Coverage(None, -1, -1)), "t", 0, (120, 150)).ok  # type: ignore[arg-type]


def test_a_partition_kafka_does_not_know_is_checked_up_to_what_the_agent_accounted_for() -> None:
    registry = _Registry(Coverage(START, 400, -1), [_Segment(100, 299)])
    result = audit_partition(registry, "gone", 0, None, "UNKNOWN_TOPIC_OR_PART")  # type: ignore[arg-type]
    assert result.unaccounted == [(300, 399)]
    assert "unknown to Kafka (UNKNOWN_TOPIC_OR_PART)" in result.to_text()


# -- the broker side and the command ---------------------------------------------------------------


def test_the_watermarks_consumer_reads_uncommitted_so_the_high_watermark_is_the_log_end() -> None:
    """librdkafka defaults to read_committed, whose ListOffsets answers the LSO: the audit must not."""
    kafka = KafkaOffsets("127.0.0.1:9", 0.1, **{"isolation.level": "read_committed", "client.id": "audit-test"})
    try:
        assert kafka.config["isolation.level"] == "read_uncommitted"
        assert kafka.config["client.id"] == "audit-test"
    finally:
        kafka.close()


def test_a_kafka_client_that_cannot_be_created_is_an_audit_error() -> None:
    with pytest.raises(AuditError, match=r"could not create a Kafka client for '127.0.0.1:9'.*no.such.property"):
        KafkaOffsets("127.0.0.1:9", **{"no.such.property": "x"})


def _config(tmp_path: Path, redis_url: str) -> Path:
    path = tmp_path / "agent.properties"
    path.write_text(f"cluster=c\nbroker_id=0\nlog_dirs={tmp_path}\ns3.bucket=b\nredis.url={redis_url}\nleadership.mode=static\n")
    return path


def test_audit_exits_4_when_the_registry_cannot_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Redis refusing connections is not "Kafka could not be asked" (3): it has its own code."""
    config = _config(tmp_path, "redis://127.0.0.1:9/0")  # nothing listens on port 9
    assert main(["audit", "--config", str(config), "--bootstrap-servers", "127.0.0.1:9"]) == 4
    assert "the registry could not be read" in capsys.readouterr().err


def test_audit_exits_2_without_a_kafka_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--config", str(_config(tmp_path, "redis://127.0.0.1:9/0"))]) == 2
    assert "--bootstrap-servers" in capsys.readouterr().err
