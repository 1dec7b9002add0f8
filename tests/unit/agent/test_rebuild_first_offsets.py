"""Rebuild's choice among S3's segment objects when two leaders uploaded overlapping ones (rebuild)."""

from __future__ import annotations

from typing import Any

from tiered_kafka.registry import SegmentEntry
from tiered_kafka_agent.rebuild import RebuildReport, _without_overlaps


def entry(base: int, last: int, first: int | None = None, uploaded: int = 1, **overrides: Any) -> SegmentEntry:
    return SegmentEntry(
        topic="t", partition=0, base_offset=base, last_offset=last, object_key=f"t-0/{base:020d}.log", size=10, record_count=last - base + 1,
        min_timestamp=-1, max_timestamp=-1, checksum=f"crc32c:{base:08x}", leader_epoch=0, upload_time_ms=uploaded, files=("log",),
        first_offset=first, **overrides,
    )


def ranges(entries: list[SegmentEntry]) -> list[tuple[int, int, int]]:
    return [(e.first, e.base_offset, e.last_offset) for e in entries]


def test_first_offsets_are_restored_and_raised_past_the_segment_before() -> None:
    report = RebuildReport()
    # A's 0..99 and 100..199; B's 150..299 recorded tk-first-offset 160 (registered later from 200)
    kept = _without_overlaps([entry(150, 299, 160), entry(100, 199), entry(0, 99)], report)
    assert ranges(kept) == [(0, 0, 99), (100, 100, 199), (200, 150, 299)]
    assert report.skipped == 0


def test_an_object_holding_nothing_new_is_left_out() -> None:
    report = RebuildReport()
    kept = _without_overlaps([entry(0, 199), entry(50, 150, uploaded=2), entry(200, 299, 200)], report)
    assert ranges(kept) == [(0, 0, 199), (200, 200, 299)]
    assert report.skipped == 1


def test_without_overlaps_nothing_changes() -> None:
    entries = [entry(0, 99), entry(100, 149), entry(150, 299, 160)]
    assert _without_overlaps(list(reversed(entries)), RebuildReport()) == entries
