"""The executor's GETs: a slice's contiguous ranges coalesced within the task's memory budget (#15)."""

from __future__ import annotations

from tiered_kafka.client.gateway import PlannedRange
from tiered_kafka.spark.planning import ReadTask, Slice
from tiered_kafka.spark.planning import GET_BYTES, MAX_PLAN_BYTES, PREFETCH, TASK_MEMORY_BYTES
from tiered_kafka.spark.reading import task_gets


def ranges(url: str, sizes: list[int], first_offset: int = 0, signed_ranges: bool = False) -> list[PlannedRange]:
    """Back-to-back ranges of one object; ``signed_ranges``: each with its own URL (the gateway signs the Range header)."""
    out, start, offset = [], 0, first_offset
    for size in sizes:
        out.append(PlannedRange(start, start + size, offset, offset + 9, f"{url}?sig={start}" if signed_ranges else url, f"bytes={start}-{start + size - 1}"))
        start, offset = start + size, offset + 10
    return out


def task(*slices: Slice) -> ReadTask:
    return ReadTask(0, "http://gw", "c", None, False, False, tuple(slices))


def test_contiguous_ranges_of_one_object_become_one_get_within_the_budget() -> None:
    a = ranges("http://s3/a.log", [1000, 2000, 3000])
    b = ranges("http://s3/b.log", [500, 500], first_offset=30)
    piece = Slice("t", 0, 0, 50, tuple([("a.log", r) for r in a] + [("b.log", r) for r in b]))
    gets = task_gets(task(piece))
    assert [(key, g.start, g.end, g.first_offset, g.last_offset, g.range_header) for _s, key, g in gets] == [
        ("a.log", 0, 6000, 0, 29, "bytes=0-5999"),
        ("b.log", 0, 1000, 30, 49, "bytes=0-999"),
    ]
    assert all(s is piece for s, _k, _g in gets)
    signed = ranges("http://s3/a.log", [1000, 2000], signed_ranges=True)  # a URL per range: never merged
    assert [g for _s, _k, g in task_gets(task(Slice("t", 0, 0, 20, tuple(("a.log", r) for r in signed))))] == signed


def test_gets_stay_within_the_task_budget_and_slices_are_never_merged() -> None:
    assert GET_BYTES * 2 * (PREFETCH + 1) <= TASK_MEMORY_BYTES and MAX_PLAN_BYTES == GET_BYTES  # plans are sized by the budget
    big = ranges("http://s3/a.log", [GET_BYTES // 2] * 3)
    first = Slice("t", 0, 0, 20, tuple(("a.log", r) for r in big[:2]))
    second = Slice("t", 0, 20, 30, tuple(("a.log", r) for r in big[2:]))
    gets = task_gets(task(first, second))
    assert [(s is first, g.size) for s, _k, g in gets] == [(True, GET_BYTES // 2 * 2), (False, GET_BYTES // 2)]
    assert task_gets(task(first), get_bytes=GET_BYTES // 2) == [(first, "a.log", r) for r in big[:2]]
