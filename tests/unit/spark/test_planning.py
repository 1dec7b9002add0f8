"""Planning of tiered-kafka Spark reads: offsets, plan chaining and gaps, balancing by bytes.

The gateway is replaced by ``FakeGateway``, which serves plans over a made-up partition the way
the read-plan contract says (batch-aligned ranges of one segment, the first holding the offset,
a gap reported when the offset lies in no segment); the real gateway is exercised by the
integration tests."""

from __future__ import annotations

import pytest

from tiered_kafka.errors import OffsetNotRemoteError, RemoteGapError
from tiered_kafka.client.gateway import PartitionExtent, Plan, PlanGap, PlannedRange, RemoteExtent
from tiered_kafka.spark.options import OptionError, parse_options
from tiered_kafka.spark.planning import (
    MAX_PLAN_BYTES,
    MIN_PLAN_BYTES,
    OffsetRange,
    RangeUnit,
    balance,
    collect_units,
    make_tasks,
    partition_count,
    plan_bytes,
    resolve_partition,
)

BATCH = 1000  # bytes per batch of 10 records


class FakeGateway:
    """One partition: segments [base, last] of 10-record, 1000-byte batches; ``missing`` segments lie in gaps."""

    def __init__(self, segments: list[tuple[int, int]], missing: tuple[int, ...] = (), timestamps: dict[int, int | None] | None = None) -> None:
        self.segments = segments
        self.missing = set(missing)
        self.timestamps = timestamps or {}
        self.plans: list[tuple[int, int]] = []

    def plan(self, topic: str, partition: int, offset: int, max_bytes: int) -> Plan:
        self.plans.append((offset, max_bytes))
        present = [s for s in self.segments if s[0] not in self.missing]
        if offset > self.segments[-1][1]:
            raise OffsetNotRemoteError("past", offset=offset, earliest=present[0][0], latest=present[-1][1])
        gap = None
        segment = next((s for s in present if s[0] <= offset <= s[1]), None)
        if segment is None:
            segment = next(s for s in present if s[0] > offset)
            gap = PlanGap(offset, segment[0] - 1, "segment lost")
            offset = segment[0]
        base, last = segment
        first = base + (offset - base) // 10 * 10
        ranges = []
        budget = max(max_bytes, BATCH)
        while first <= last and budget >= BATCH:
            batches = min((last - first) // 10 + 1, budget // BATCH, 3)  # ranges of at most 3 batches
            start = (first - base) // 10 * BATCH
            end_offset = min(last, first + batches * 10 - 1)
            ranges.append(PlannedRange(start, start + batches * BATCH, first, end_offset, f"http://s3/{base}?{start}", f"bytes={start}-{start + batches * BATCH - 1}"))
            budget -= batches * BATCH
            first = end_offset + 1
        return Plan(topic, partition, offset, f"seg-{base}", base, last, tuple(ranges), ranges[-1].last_offset + 1, 0, gap)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return self.timestamps.get(timestamp_ms)


def options(**extra: str):  # type: ignore[no-untyped-def]
    return parse_options({"tiered.gateway.url": "http://gw", "tiered.cluster": "c", "assign": '{"t":[0]}', **extra})


def extent(earliest: int, latest: int, total: int = 0) -> PartitionExtent:
    return PartitionExtent(RemoteExtent(earliest, latest, 3, total), None, None)


def test_resolve_offsets_against_remote_storage() -> None:
    gateway = FakeGateway([(100, 199)], timestamps={5000: 120})
    remote = extent(100, 199, 10_000)
    warnings: list[str] = []

    def resolve(**extra: str) -> OffsetRange:
        return resolve_partition(options(**extra), gateway, ("t", 0), remote, warnings)  # type: ignore[arg-type]

    assert resolve() == OffsetRange("t", 0, 100, 200, 10_000)  # earliest = first remote offset, latest = one past the last
    assert resolve(startingOffsets='{"t":{"0":150}}', endingOffsets='{"t":{"0":175}}') == OffsetRange("t", 0, 150, 175, 2_500)
    assert resolve(startingOffsets='{"t":{"0":-2}}', endingOffsets='{"t":{"0":-1}}').count == 100
    assert resolve(startingTimestamp="5000").start == 120
    assert resolve(endingTimestamp="6000").end == 200  # no record at or after: latest
    assert resolve(startingOffsets='{"t":{"0":200}}').count == 0  # the end itself: nothing to read

    with pytest.raises(OffsetNotRemoteError, match=r"offset 90 of t-0 is below remote storage's earliest offset 100: offsets 90..99 are lost \(set failOnDataLoss=false"):
        resolve(startingOffsets='{"t":{"0":90}}')
    assert resolve(startingOffsets='{"t":{"0":90}}', failOnDataLoss="false").start == 100
    assert "reading from 100 (failOnDataLoss=false)" in warnings[-1]
    with pytest.raises(OffsetNotRemoteError, match=r"option 'endingOffsets': offset 250 of t-0 is past remote storage's end \(its last offset is 199\)"):
        resolve(endingOffsets='{"t":{"0":250}}', failOnDataLoss="false")  # not data loss: not remote yet
    with pytest.raises(OptionError, match=r"t-0: the starting offset 180 \(option 'startingOffsets'\) is after the ending offset 150"):
        resolve(startingOffsets='{"t":{"0":180}}', endingOffsets='{"t":{"0":150}}')
    with pytest.raises(OptionError, match=r"option 'startingTimestamp': no record of t-0 in remote storage has a timestamp >= 7000"):
        resolve(startingTimestamp="7000")
    assert resolve(startingTimestamp="7000", startingOffsetsByTimestampStrategy="latest").count == 0


def test_a_partition_with_nothing_remote() -> None:
    empty = PartitionExtent(None, None, None)
    gateway = FakeGateway([(0, 9)])
    assert resolve_partition(options(), gateway, ("t", 0), empty, []).count == 0  # type: ignore[arg-type]
    with pytest.raises(OffsetNotRemoteError, match="which holds nothing of t-0"):
        resolve_partition(options(startingOffsets='{"t":{"0":5}}'), gateway, ("t", 0), empty, [])  # type: ignore[arg-type]


def test_collect_units_chains_plans_and_trims_to_the_end() -> None:
    gateway = FakeGateway([(0, 99), (100, 199), (200, 299)])
    units = collect_units(gateway, OffsetRange("t", 0, 35, 215), 2_000, True, [])  # type: ignore[arg-type]
    assert units[0].planned.first_offset == 30  # the batch holding 35
    assert units[-1].planned.first_offset <= 214 <= units[-1].planned.last_offset
    offsets = [(u.planned.first_offset, u.planned.last_offset) for u in units]
    assert all(a[1] + 1 == b[0] for a, b in zip(offsets, offsets[1:], strict=False))  # contiguous, no overlap
    assert {u.object_key for u in units} == {"seg-0", "seg-100", "seg-200"}
    assert all(max_bytes == 2_000 for _offset, max_bytes in gateway.plans)


def test_gaps_fail_unless_data_loss_is_allowed() -> None:
    gateway = FakeGateway([(0, 99), (100, 199), (200, 299)], missing=(100,))
    with pytest.raises(RemoteGapError, match=r"t-0: remote storage lacks offsets 100..199 \(segment lost\); set failOnDataLoss=false") as error:
        collect_units(gateway, OffsetRange("t", 0, 0, 300), 5_000, True, [])  # type: ignore[arg-type]
    assert (error.value.start_offset, error.value.end_offset) == (100, 199)
    warnings: list[str] = []
    units = collect_units(gateway, OffsetRange("t", 0, 50, 250), 5_000, False, warnings)  # type: ignore[arg-type]
    assert [u.object_key for u in units][0] == "seg-0" and {u.object_key for u in units} == {"seg-0", "seg-200"}
    assert warnings == ["t-0: remote storage lacks offsets 100..199 (segment lost); skipped (failOnDataLoss=false)"]
    # a gap after the end of the read does not matter
    assert collect_units(gateway, OffsetRange("t", 0, 0, 100), 5_000, True, [])  # type: ignore[arg-type]


class CompactedGateway(FakeGateway):
    """Batches of offsets ``removed`` are gone (Kafka's cleaner), with no recorded gap: a plan asked
    inside them starts at the next batch, as the gateway's does."""

    def __init__(self, segments: list[tuple[int, int]], removed: range) -> None:
        super().__init__(segments)
        self.removed = removed

    def plan(self, topic: str, partition: int, offset: int, max_bytes: int) -> Plan:
        plan = super().plan(topic, partition, self.removed.stop if offset in self.removed else offset, max_bytes)
        ranges = tuple(r for r in plan.ranges if r.last_offset not in self.removed)
        return Plan(topic, partition, offset, plan.object_key, plan.segment_base_offset, plan.segment_last_offset, ranges, plan.next_offset, 0, None)


def test_offsets_compaction_removed_are_not_data_loss() -> None:
    """As Spark's Kafka source (``KafkaDataConsumer``: an offset still valid but invisible is skipped):
    a plan starting after the asked offset with no ``plan.gap`` is no gap, even with failOnDataLoss."""
    gateway = CompactedGateway([(0, 99), (100, 199)], removed=range(100, 130))
    warnings: list[str] = []
    units = collect_units(gateway, OffsetRange("t", 0, 50, 200), 5_000, True, warnings)  # type: ignore[arg-type]
    assert [u.planned.first_offset for u in units if u.planned.first_offset >= 100][0] == 130 and warnings == []
    units = collect_units(gateway, OffsetRange("t", 0, 110, 200), 5_000, True, warnings)  # type: ignore[arg-type]
    assert units[0].planned.first_offset == 130 and units[-1].planned.last_offset == 199 and warnings == []


def test_remote_storage_ending_early_is_an_error() -> None:
    gateway = FakeGateway([(0, 99)])
    with pytest.raises(OffsetNotRemoteError, match="t-0: remote storage ends at offset 99 while the read asks up to 149"):
        collect_units(gateway, OffsetRange("t", 0, 0, 150), 50_000, True, [])  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13])
def test_balance_cuts_contiguous_runs_of_nearly_equal_size(n: int) -> None:
    sizes = [5, 1, 1, 9, 2, 2, 2, 7, 3, 3, 1, 1, 6, 4, 4, 2]
    runs = balance(sizes, n)
    assert len(runs) == min(n, len(sizes))
    assert runs[0][0] == 0 and runs[-1][1] == len(sizes)
    assert all(a < b for a, b in runs) and all(r[1] == s[0] for r, s in zip(runs, runs[1:], strict=False))
    totals = [sum(sizes[a:b]) for a, b in runs]
    target = sum(sizes) / len(runs)
    assert max(totals) <= target + max(sizes)  # each cut at the boundary nearest its target


def test_balance_edge_cases() -> None:
    assert balance([], 4) == []
    assert balance([7], 4) == [(0, 1)]
    assert balance([1, 1, 1, 1], 0) == []
    assert balance([100, 1, 1, 1], 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]  # more runs than balance allows: one each
    assert balance([1] * 12, 4) == [(0, 3), (3, 6), (6, 9), (9, 12)]


def test_partition_count_and_plan_bytes() -> None:
    assert partition_count(options(), 0, 10**9) == 0
    assert partition_count(options(), 4, 10**6) == 4  # one per Kafka partition, as Spark
    assert partition_count(options(minPartitions="10"), 4, 10**6) == 10
    assert partition_count(options(minPartitions="2"), 4, 10**6) == 4
    assert partition_count(options(maxBytesPerPartition="1m"), 4, 10 * 1024 * 1024 + 1) == 11
    assert plan_bytes(10**6, 0) == MAX_PLAN_BYTES
    assert plan_bytes(1000, 4) == MIN_PLAN_BYTES
    assert plan_bytes(64 * 10**6, 4) == 4 * 10**6
    assert plan_bytes(10**13, 4) == MAX_PLAN_BYTES


def test_make_tasks_groups_slices_and_carries_the_gateway() -> None:
    def unit(partition: int, first: int, size: int) -> RangeUnit:
        return RangeUnit(OffsetRange("t", partition, 5, 95), "seg", PlannedRange(0, size, first, first + 9, "u", "bytes=0-1"))

    units = [unit(1, 40, 10), unit(0, 0, 10), unit(0, 10, 10), unit(1, 30, 10), unit(0, 20, 10), unit(1, 50, 10)]
    read_options = options(**{"tiered.gateway.token": "tok", "includeHeaders": "true"})
    tasks = make_tasks(units, 2, read_options)
    assert [t.index for t in tasks] == [0, 1] and [t.size for t in tasks] == [30, 30]
    assert [(s.partition, [r.first_offset for _k, r in s.ranges]) for s in tasks[0].slices] == [(0, [0, 10, 20])]
    assert [(s.partition, [r.first_offset for _k, r in s.ranges]) for s in tasks[1].slices] == [(1, [30, 40, 50])]
    assert (tasks[0].slices[0].start, tasks[0].slices[0].end) == (5, 95)
    assert (tasks[0].gateway_url, tasks[0].cluster, tasks[0].token, tasks[0].include_headers) == ("http://gw", "c", "tok", True)
    three = make_tasks(units, 3, read_options)
    assert [[s.partition for s in t.slices] for t in three] == [[0], [0, 1], [1]]  # a run may span two partitions


def test_read_committed_never_cuts_a_partition_whose_stable_end_is_unknown() -> None:
    """Rule 4's decision: one slice per such partition, so one filter stops at its first undecided offset."""
    unknown, known = OffsetRange("t", 0, 0, 60, stable_end=None), OffsetRange("t", 1, 0, 60, stable_end=60)

    def unit(offsets: OffsetRange, first: int) -> RangeUnit:
        return RangeUnit(offsets, "seg", PlannedRange(0, 10, first, first + 9, "u", "bytes=0-9"))

    units = [unit(unknown, f) for f in range(0, 60, 10)] + [unit(known, f) for f in range(0, 60, 10)]
    committed = make_tasks(units, 6, options(**{"kafka.isolation.level": "read_committed"}))
    slices = [(s.partition, [r.first_offset for _k, r in s.ranges]) for t in committed for s in t.slices]
    assert slices[0] == (0, [0, 10, 20, 30, 40, 50])  # partition 0 whole, in one task
    assert [p for p, _ in slices].count(0) == 1 and [p for p, _ in slices].count(1) > 1  # partition 1 is still cut
    assert all(t.read_committed for t in committed)
    uncommitted = make_tasks(units, 6, options())  # read_uncommitted: every partition may be cut
    assert sum(1 for t in uncommitted for s in t.slices if s.partition == 0) > 1
