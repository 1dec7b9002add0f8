"""The offset-range registry against a real Redis (and a real three-node Redis Cluster)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from tiered_kafka.registry import (
    Coverage,
    CoverageStart,
    Gap,
    MalformedRegistryDataError,
    PartitionInfo,
    Registry,
    RegistryConflictError,
    RegistryError,
    RegistryUnavailableError,
    RegistryValueError,
    SegmentEntry,
    SegmentOverlapError,
    connect,
    hash_tag,
)
from tiered_kafka_dev.services._process import free_ports

pytestmark = pytest.mark.integration


def entry(base: int, last: int, *, topic: str = "orders", partition: int = 3, **overrides: Any) -> SegmentEntry:
    fields: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "base_offset": base,
        "last_offset": last,
        "object_key": f"prefix/kc/{topic}-{partition}/{base:020d}.log",
        "size": 10 * (last - base + 1),
        "record_count": last - base + 1,
        "min_timestamp": 1_700_000_000_000 + base,
        "max_timestamp": 1_700_000_000_000 + last,
        "checksum": f"crc32c:{base:08x}",
        "leader_epoch": 1,
        "upload_time_ms": 1_700_000_100_000,
        "files": ("log", "index", "timeindex"),
    }
    fields.update(overrides)
    return SegmentEntry(**fields)


@pytest.fixture(params=[False, True], ids=["bytes", "str"])
def client(redis_server: Any, request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A client with decode_responses off and on: the registry works with both."""
    c = redis.Redis.from_url(redis_server.url, decode_responses=request.param)
    yield c
    c.close()


@pytest.fixture
def cluster_name() -> str:
    return f"kc-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def clock() -> list[int]:
    """A settable clock: the registry reads now[0]."""
    return [1_000]


@pytest.fixture
def registry(client: redis.Redis, cluster_name: str, clock: list[int]) -> Registry:
    return Registry(client, cluster_name, clock=lambda: clock[0])


def our_keys(client: redis.Redis, cluster: str) -> list[str]:
    keys = [k.decode() if isinstance(k, bytes) else k for k in client.scan_iter(match="tk:{*", count=1000)]
    return sorted(k for k in keys if hash_tag(k) == cluster or hash_tag(k).startswith(cluster + "/"))


# -- register, find, segments ---------------------------------------------------------------------


def test_register_find_and_segments_across_gaps(registry: Registry) -> None:
    s0, s1, s2 = entry(0, 99), entry(100, 199), entry(300, 399)  # 200..299 never arrives
    assert [registry.register(e) for e in (s2, s0, s1)] == [True, True, True]

    assert registry.find("orders", 3, 0) == s0
    assert registry.find("orders", 3, 99) == s0
    assert registry.find("orders", 3, 100) == s1
    assert registry.find("orders", 3, 250) is None  # in the gap
    assert registry.find("orders", 3, 399) == s2
    assert registry.find("orders", 3, 400) is None  # past the end
    assert registry.find("orders", 4, 0) is None  # another partition
    assert registry.find("other", 3, 0) is None

    assert registry.next_segment("orders", 3, 250) == s2
    assert registry.next_segment("orders", 3, 99) == s1
    assert registry.next_segment("orders", 3, -1) == s0
    assert registry.next_segment("orders", 3, 300) is None

    assert registry.segments("orders", 3) == [s0, s1, s2]
    assert registry.segments("orders", 3, from_offset=150) == [s1, s2]  # the segment holding 150 first
    assert registry.segments("orders", 3, from_offset=250) == [s2]  # in the gap: from the next one
    assert registry.segments("orders", 3, from_offset=100, to_offset=300) == [s1, s2]
    assert registry.segments("orders", 3, from_offset=100, to_offset=299) == [s1]
    assert registry.segments("orders", 3, to_offset=0) == [s0]
    assert registry.segments("orders", 3, limit=2) == [s0, s1]
    assert registry.segments("orders", 3, from_offset=50, limit=1) == [s0]
    assert registry.segments("orders", 3, limit=0) == []
    assert registry.segments("orders", 3, from_offset=400) == []
    assert registry.segments("orders", 9) == []


def test_a_straddling_segment_is_registered_from_its_first_offset(client: redis.Redis, registry: Registry, cluster_name: str) -> None:
    """A new leader's segment 150..299 whose offsets 150..199 another leader's 100..199 holds is
    registered for 200..299 (first_offset), keyed, looked up and deleted by that range."""
    old, straddling = entry(100, 199), entry(150, 299, first_offset=200)
    assert registry.register(old) and registry.register(straddling)
    assert straddling.object_key.endswith("00000000000000000150.log")  # the object is still named by its base
    assert registry.find("orders", 3, 170) == old  # not the later-based straddling segment
    assert registry.find("orders", 3, 199) == old
    assert registry.find("orders", 3, 200) == straddling
    assert registry.find("orders", 3, 299) == straddling and registry.find("orders", 3, 300) is None
    assert registry.next_segment("orders", 3, 199) == straddling
    assert registry.segments("orders", 3, from_offset=250) == [straddling]
    assert registry.segments("orders", 3) == [old, straddling]
    assert registry.partition_info("orders", 3) == PartitionInfo(100, 299, 2, old.size + straddling.size, 1_000)
    assert registry.coverage("orders", 3).next_offset == 300
    assert f"tk:{{{cluster_name}/orders-3}}:segment:{200:020d}" in our_keys(client, cluster_name)
    # idempotent: the same segment from the same first offset again is a no-op
    assert registry.register(entry(150, 299, first_offset=200, upload_time_ms=5)) is False
    # the same first offset with other content, or another base offset, is a conflict
    for other in (entry(150, 299, first_offset=200, checksum="crc32c:ffffffff"), entry(200, 299)):
        with pytest.raises(RegistryConflictError):
            registry.register(other)
    # ranges overlap by their first offsets: registered whole, the segment would overlap 100..199
    with pytest.raises(SegmentOverlapError, match=r"150\.\.299.*100\.\.199|100\.\.199.*150\.\.299"):
        registry.register(entry(150, 299, first_offset=150, object_key="other.log"))
    with pytest.raises(SegmentOverlapError):
        registry.register(entry(150, 349, first_offset=250))
    assert registry.register(entry(150, 349, first_offset=300, object_key="later.log"))  # adjacent: fine
    # deletion is by the registered first offset
    assert registry.delete_segment("orders", 3, 150) is None
    assert registry.delete_segment("orders", 3, 200) == straddling
    assert registry.find("orders", 3, 250) is None and registry.find("orders", 3, 170) == old


def test_entries_without_first_offset_read_as_registered_whole(client: redis.Redis, registry: Registry, cluster_name: str) -> None:
    """An entry written before the field existed (no first_offset in its hash) reads, is found and
    re-registers exactly as before."""
    old = entry(100, 199)
    assert registry.register(old)
    key = registry.keys("orders", 3).segment(100)
    client.hdel(key, "first_offset")
    assert registry.find("orders", 3, 100) == old and registry.segments("orders", 3) == [old]
    assert registry.register(old) is False
    assert registry.delete_segment("orders", 3, 100) == old


def test_rebuild_restores_first_offsets(registry: Registry) -> None:
    old, straddling = entry(100, 199), entry(150, 299, first_offset=200)
    for e in (old, straddling):
        registry.register(e)
    before = registry.dump()
    assert [s["first_offset"] for s in before["partitions"]["orders-3"]["segments"]] == [100, 200]
    registry.clear_partition("orders", 3)
    for e in (straddling, old):  # any order
        registry.register(e)
    assert registry.dump() == before


def test_reregistering_is_a_noop_that_keeps_the_first_entry(registry: Registry, clock: list[int]) -> None:
    first = entry(100, 199)
    assert registry.register(first) is True
    info = registry.partition_info("orders", 3)
    clock[0] = 2_000
    again = entry(100, 199, upload_time_ms=1_800_000_000_000, leader_epoch=2, files=("log", "index", "timeindex", "snapshot"))
    assert registry.register(again) is False
    assert registry.register(first) is False
    assert registry.find("orders", 3, 150) == first
    assert registry.partition_info("orders", 3) == info  # not even updated_ms moved
    assert registry.segments("orders", 3) == [first]


@pytest.mark.parametrize(
    "changed",
    [{"last_offset": 150, "record_count": 51}, {"checksum": "crc32c:deadbeef"}, {"size": 1}],
    ids=["last_offset", "checksum", "size"],
)
def test_same_base_with_other_content_is_a_conflict(registry: Registry, changed: dict[str, Any]) -> None:
    registered = entry(100, 199)
    registry.register(registered)
    registry.register(entry(0, 99))
    info = registry.partition_info("orders", 3)
    changed = dict(changed)  # parametrize shares the dict between runs
    refused = entry(100, changed.pop("last_offset", 199), **changed)
    with pytest.raises(RegistryConflictError) as caught:
        registry.register(refused)
    err = caught.value
    assert err.existing == registered and err.new == refused and err.existing_range == (100, 199)
    assert (err.topic, err.partition) == ("orders", 3)
    assert registry.segments("orders", 3) == [entry(0, 99), registered]
    assert registry.partition_info("orders", 3) == info


@pytest.mark.parametrize(
    ("new", "conflicting"),
    [
        ((150, 249), (100, 199)),  # overlaps its predecessor
        ((50, 100), (100, 199)),  # overlaps its successor by one offset
        ((150, 160), (100, 199)),  # inside a segment
        ((50, 250), (100, 199)),  # covers a segment
        ((250, 300), (300, 399)),  # reaches into the next one
        ((199, 199), (100, 199)),  # the last offset of a segment
    ],
)
def test_overlaps_are_refused_with_both_ranges(registry: Registry, new: tuple[int, int], conflicting: tuple[int, int]) -> None:
    for e in (entry(100, 199), entry(300, 399)):
        registry.register(e)
    before = (registry.segments("orders", 3), registry.partition_info("orders", 3))
    with pytest.raises(SegmentOverlapError) as caught:
        registry.register(entry(*new))
    err = caught.value
    assert (err.topic, err.partition, err.new_range, err.conflicting_range) == ("orders", 3, new, conflicting)
    assert f"{new[0]}..{new[1]}" in str(err) and f"{conflicting[0]}..{conflicting[1]}" in str(err)
    assert (registry.segments("orders", 3), registry.partition_info("orders", 3)) == before


def test_adjacent_segments_do_not_overlap(registry: Registry) -> None:
    assert registry.register(entry(100, 199))
    assert registry.register(entry(200, 200))
    assert registry.register(entry(99, 99))
    assert registry.register(entry(201, 299))
    assert [e.base_offset for e in registry.segments("orders", 3)] == [99, 100, 200, 201]


def test_partition_info_follows_registrations(registry: Registry, clock: list[int]) -> None:
    assert registry.partition_info("orders", 3) is None
    registry.register(entry(500, 599))
    assert registry.partition_info("orders", 3) == PartitionInfo(500, 599, 1, 1000, 1_000)
    clock[0] = 2_000
    registry.register(entry(100, 199))  # older, registered later (a rebuild, or a late upload)
    assert registry.partition_info("orders", 3) == PartitionInfo(100, 599, 2, 2000, 2_000)
    clock[0] = 3_000
    registry.register(entry(600, 649))
    assert registry.partition_info("orders", 3) == PartitionInfo(100, 649, 3, 2500, 3_000)
    assert registry.partition_info("orders", 4) is None


# -- delete ----------------------------------------------------------------------------------------


def test_delete_segment_recomputes_the_partition(registry: Registry, clock: list[int]) -> None:
    segs = [entry(0, 99), entry(100, 199), entry(200, 299), entry(300, 349)]
    for e in segs:
        registry.register(e)
    assert registry.delete_segment("orders", 3, 50) is None  # not a base offset
    assert registry.delete_segment("orders", 3, 1000) is None
    clock[0] = 5_000
    assert registry.delete_segment("orders", 3, 0) == segs[0]  # retention: oldest first
    assert registry.partition_info("orders", 3) == PartitionInfo(100, 349, 3, 2500, 5_000)
    assert registry.delete_segment("orders", 3, 0) is None  # idempotent
    assert registry.find("orders", 3, 50) is None
    assert registry.delete_segment("orders", 3, 300) == segs[3]  # the newest: latest moves back
    assert registry.partition_info("orders", 3) == PartitionInfo(100, 299, 2, 2000, 5_000)
    assert registry.delete_segment("orders", 3, 200) == segs[2]
    assert registry.delete_segment("orders", 3, 100) == segs[1]
    # the last segment gone: the partition stays known, empty, with offsets -1
    assert registry.partition_info("orders", 3) == PartitionInfo(-1, -1, 0, 0, 5_000)
    assert registry.segments("orders", 3) == []
    assert registry.partitions() == [("orders", 3)]
    # and it can fill again
    assert registry.register(entry(1000, 1099))
    assert registry.partition_info("orders", 3) == PartitionInfo(1000, 1099, 1, 1000, 5_000)


def test_delete_in_the_middle(registry: Registry) -> None:
    for e in (entry(0, 99), entry(100, 199), entry(200, 299)):
        registry.register(e)
    assert registry.delete_segment("orders", 3, 100) == entry(100, 199)
    assert registry.partition_info("orders", 3) == PartitionInfo(0, 299, 2, 2000, 1_000)
    assert registry.find("orders", 3, 150) is None
    assert registry.next_segment("orders", 3, 150) == entry(200, 299)
    assert registry.register(entry(100, 199))  # the hole can be filled again


# -- gaps ------------------------------------------------------------------------------------------


def test_gaps(registry: Registry, clock: list[int]) -> None:
    assert registry.gaps("orders", 3) == []
    registry.register(entry(0, 99))
    registry.register(entry(300, 399))
    assert registry.record_gap("orders", 3, 100, 299, "deleted before upload: segment 100 gone") is True
    clock[0] = 9_000
    assert registry.record_gap("orders", 3, 100, 299, "another reason") is False  # same range: first kept
    assert registry.record_gap("orders", 3, 500, 599, "retention", detected_ms=42) is True
    assert registry.record_gap("orders", 3, 350, 399, "overlaps a segment uploaded by another leader") is True
    assert registry.gaps("orders", 3) == [
        Gap(100, 299, "deleted before upload: segment 100 gone", 1_000),
        Gap(350, 399, "overlaps a segment uploaded by another leader", 9_000),
        Gap(500, 599, "retention", 42),
    ]
    # gaps are advisory: segments win, readers skip gaps with next_segment
    assert registry.find("orders", 3, 150) is None
    assert registry.next_segment("orders", 3, 150) == entry(300, 399)
    assert registry.find("orders", 3, 360) == entry(300, 399)
    assert registry.register(entry(100, 199))  # a late upload of gap offsets is allowed
    assert len(registry.gaps("orders", 3)) == 3
    with pytest.raises(RegistryError):
        registry.record_gap("orders", 3, 10, 9, "backwards")
    with pytest.raises(RegistryError):
        registry.record_gap("orders", 3, 10, 19, "")


def test_retention_forgets_gaps_it_moved_past(registry: Registry) -> None:
    for e in (entry(0, 99), entry(200, 299), entry(400, 499)):
        registry.register(e)
    registry.record_gap("orders", 3, 100, 199, "a")
    registry.record_gap("orders", 3, 300, 399, "b")
    registry.delete_segment("orders", 3, 0)  # earliest 200: gap 100..199 lies before it
    assert [g.reason for g in registry.gaps("orders", 3)] == ["b"]
    registry.delete_segment("orders", 3, 400)  # deleting the newest leaves older gaps alone
    assert [g.reason for g in registry.gaps("orders", 3)] == ["b"]
    registry.record_gap("orders", 3, 1000, 1099, "c")  # past the last segment
    registry.record_gap("orders", 3, 250, 299, "d")
    registry.delete_segment("orders", 3, 200)  # empty now: gaps ending by 299 go, later ones stay
    assert [g.reason for g in registry.gaps("orders", 3)] == ["b", "c"]


# -- listing ---------------------------------------------------------------------------------------


def test_partitions_and_topics(client: redis.Redis, registry: Registry, cluster_name: str) -> None:
    assert registry.partitions() == [] and registry.topics() == {}
    for topic, partition in [("orders", 3), ("orders", 0), ("orders", 10), ("payments", 1), ("a.b_c-d", 0)]:
        registry.register(entry(0, 9, topic=topic, partition=partition))
    registry.record_gap("gaps-only", 2, 0, 9, "lost")
    expected = [("a.b_c-d", 0), ("gaps-only", 2), ("orders", 0), ("orders", 3), ("orders", 10), ("payments", 1)]
    assert registry.partitions() == expected
    assert registry.topics() == {"a.b_c-d": [0], "gaps-only": [2], "orders": [0, 3, 10], "payments": [1]}
    # another cluster in the same Redis sees nothing of ours
    other = Registry(client, cluster_name + "-other")
    assert other.partitions() == [] and other.find("orders", 3, 5) is None
    other.register(entry(0, 9))
    assert registry.partitions() == expected and other.partitions() == [("orders", 3)]


def test_listing_lag_heals(client: redis.Redis, registry: Registry) -> None:
    registry.register(entry(0, 9))
    registry.register(entry(0, 9, partition=1))
    # a writer that died between registration and SADD: the set misses the partition
    client.srem(registry.partitions_key, "orders-3")
    assert registry.partitions() == [("orders", 1)]
    assert registry.find("orders", 3, 5) == entry(0, 9)  # readers of a known partition do not care
    assert registry.discover_partitions() == [("orders", 1), ("orders", 3)]
    assert registry.register(entry(0, 9)) is False  # a retry of the same registration relists it
    assert registry.partitions() == [("orders", 1), ("orders", 3)]
    client.srem(registry.partitions_key, "orders-3")
    for topic, partition in registry.discover_partitions():  # the repair job
        registry.ensure_listed(topic, partition)
    assert registry.partitions() == [("orders", 1), ("orders", 3)]


# -- dump, clear and rebuild -----------------------------------------------------------------------


def populate(registry: Registry, order: Callable[[list[SegmentEntry]], list[SegmentEntry]] = list) -> None:
    entries = [entry(b, b + 99, topic=t, partition=p) for t, p in [("orders", 0), ("orders", 1), ("clicks", 7)] for b in (0, 100, 300)]
    for e in order(entries):
        registry.register(e)
    registry.record_gap("orders", 0, 200, 299, "deleted before upload", detected_ms=77)
    registry.delete_segment("clicks", 7, 0)


def test_dump_is_canonical_and_comparable(client: redis.Redis, cluster_name: str) -> None:
    a = Registry(client, cluster_name + "-a", clock=lambda: 1)
    b = Registry(client, cluster_name + "-b", clock=lambda: 2)
    populate(a)
    populate(b, order=lambda es: list(reversed(es)))
    dump_a, dump_b = a.dump(), b.dump()
    assert dump_a["cluster"] == cluster_name + "-a"
    assert dump_a["partitions"] == dump_b["partitions"]  # order of registration and clocks do not matter
    assert json.loads(json.dumps(dump_a)) == dump_a
    assert list(dump_a["partitions"]) == ["clicks-7", "orders-0", "orders-1"]
    orders0 = dump_a["partitions"]["orders-0"]
    assert orders0["info"] == {"earliest_offset": 0, "latest_offset": 399, "segment_count": 3, "total_bytes": 3000}
    assert [s["base_offset"] for s in orders0["segments"]] == [0, 100, 300]
    assert orders0["segments"][0] == entry(0, 99, partition=0).to_dict()
    assert orders0["gaps"] == [{"start_offset": 200, "end_offset": 299, "reason": "deleted before upload", "detected_ms": 77}]
    assert [s["base_offset"] for s in dump_a["partitions"]["clicks-7"]["segments"]] == [100, 300]

    assert a.dump(include_updated_ms=True)["partitions"]["orders-0"]["info"]["updated_ms"] == 1
    assert "gaps" not in a.dump(include_gaps=False)["partitions"]["orders-0"]
    assert list(a.dump(topics=["clicks"])["partitions"]) == ["clicks-7"]
    assert list(a.dump(topics="orders")["partitions"]) == ["orders-0", "orders-1"]

    b.register(entry(500, 599, partition=1))
    assert a.dump()["partitions"] != b.dump()["partitions"]


def test_clear_partition_and_rebuild_give_the_same_dump(client: redis.Redis, registry: Registry, cluster_name: str) -> None:
    populate(registry)
    before = registry.dump(include_gaps=False)
    # what a rebuild from S3 does: clear each partition, register what the objects say, in any order
    for topic, partition in registry.partitions():
        found = registry.segments(topic, partition)
        assert registry.clear_partition(topic, partition) == len(found)
        assert registry.partition_info(topic, partition) is None
        assert registry.segments(topic, partition) == [] and registry.gaps(topic, partition) == []
        assert (topic, partition) not in registry.partitions()
        for e in reversed(found):
            assert registry.register(e)
    assert registry.dump(include_gaps=False) == before
    for topic, partition in registry.partitions():
        registry.clear_partition(topic, partition)
    assert registry.clear_partition("orders", 0) == 0
    assert registry.partitions() == []
    assert our_keys(client, cluster_name) == []


# -- coverage (DESIGN.md, contract 5) --------------------------------------------------------------


def test_coverage_start_is_set_once_and_the_first_observation_wins(registry: Registry, clock: list[int]) -> None:
    assert registry.coverage_start("orders", 3) is None
    assert registry.coverage("orders", 3) == Coverage(None, -1, -1)
    assert registry.set_coverage_start("orders", 3, 100) == CoverageStart(100, 1_000)
    clock[0] = 2_000
    assert registry.set_coverage_start("orders", 3, 500, observed_ms=5) == CoverageStart(100, 1_000)  # kept
    assert registry.coverage_start("orders", 3) == CoverageStart(100, 1_000)
    assert registry.coverage_start("orders", 4) is None
    with pytest.raises(RegistryValueError):
        registry.set_coverage_start("orders", 3, -1)


def test_concurrent_coverage_starts_agree(redis_server: Any, cluster_name: str) -> None:
    results: list[CoverageStart] = []

    def observe(offset: int) -> None:
        client = redis.Redis.from_url(redis_server.url)
        results.append(Registry(client, cluster_name).set_coverage_start("orders", 0, offset, observed_ms=offset))
        client.close()

    threads = [threading.Thread(target=observe, args=(o,)) for o in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20 and len(set(results)) == 1


def test_a_partition_with_only_a_coverage_start_or_gaps_is_listed(registry: Registry) -> None:
    registry.set_coverage_start("fresh", 0, 0)
    registry.record_gap("lost", 2, 0, 9, "deleted before upload")
    assert registry.topics() == {"fresh": [0], "lost": [2]}
    assert registry.discover_partitions() == [("fresh", 0), ("lost", 2)]
    assert registry.partition_info("fresh", 0) is None and registry.partition_info("lost", 2) is None


def test_coverage_marks_survive_remote_retention_emptying_the_partition(registry: Registry) -> None:
    registry.set_coverage_start("orders", 3, 0)
    registry.record_gap("orders", 3, 0, 99, "deleted before upload")
    for base in (100, 200):
        registry.register(entry(base, base + 99))
    assert registry.coverage("orders", 3) == Coverage(CoverageStart(0, 1_000), 300, -1)
    assert registry.delete_segment("orders", 3, 100) is not None  # the oldest: remote log start moves
    assert registry.coverage("orders", 3) == Coverage(CoverageStart(0, 1_000), 300, 200)
    assert registry.gaps("orders", 3) == []  # retention moved past it
    assert registry.delete_segment("orders", 3, 200) is not None
    assert registry.partition_info("orders", 3) == PartitionInfo(-1, -1, 0, 0, 1_000)
    assert registry.coverage("orders", 3) == Coverage(CoverageStart(0, 1_000), 300, 300)  # still known
    registry.record_expired("orders", 3, 250)  # never lowered
    assert registry.coverage("orders", 3).expired_until == 300
    assert ("orders", 3) in registry.partitions()


def test_deleting_a_segment_other_than_the_oldest_expires_nothing(registry: Registry) -> None:
    for base in (0, 100, 200):
        registry.register(entry(base, base + 99))
    registry.delete_segment("orders", 3, 100)
    assert registry.coverage("orders", 3) == Coverage(None, 300, -1)


def test_next_offset_counts_entries_registered_before_the_mark(client: redis.Redis, registry: Registry) -> None:
    registry.register(entry(0, 99))
    registry.record_gap("orders", 3, 100, 149, "x")
    client.delete(registry.keys("orders", 3).coverage)  # as an older registry left it
    assert registry.coverage("orders", 3).next_offset == 150
    registry.register(entry(0, 99))  # a no-op registration heals the mark
    assert client.hget(registry.keys("orders", 3).coverage, "next_offset") in (b"100", "100")


def test_transaction_fields_are_stored_and_read_back(client: redis.Redis, registry: Registry) -> None:
    e = entry(0, 99, aborted_txns=2, control_records=7)
    registry.register(e)
    assert registry.find("orders", 3, 5) == e
    key = registry.keys("orders", 3).segment(0)
    client.hdel(key, "aborted_txns", "control_records")  # an entry registered before the fields
    old = registry.find("orders", 3, 5)
    assert old is not None and (old.aborted_txns, old.control_records) == (-1, -1)


def test_sparse_index_is_not_stored_but_an_old_entry_s_is_read(client: redis.Redis, registry: Registry) -> None:
    """Layout 2 (issue 34): the sparse index stays out of Redis (the gateway derives it from the
    batch index); an entry written before, with its base64 field, is still read."""
    blob = bytes(range(256)) * 40  # binary, ~10 KB: as large as a 1 GiB segment's
    registry.register(entry(100, 199, sparse_index=blob))
    found = registry.find("orders", 3, 150)
    assert found is not None and found.sparse_index is None
    assert client.hexists(registry.keys("orders", 3).segment(100), "sparse_index") == 0
    old = entry(200, 299)
    registry.register(old)
    assert registry.add_files(old, ["batchindex"], sparse_index=b"\x01\x02")
    backfilled = registry.find("orders", 3, 250)
    assert backfilled is not None and backfilled.sparse_index is None and "batchindex" in backfilled.files
    client.hset(registry.keys("orders", 3).segment(200), "sparse_index", "AQI=")  # as the layout before wrote it
    assert registry.find("orders", 3, 250).sparse_index == b"\x01\x02"
    assert registry.segments("orders", 3)[1].sparse_index == b"\x01\x02"
    assert not registry.add_files(entry(300, 399), [], sparse_index=b"\x01")  # not registered: nothing written
    assert registry.find("orders", 3, 350) is None


def test_a_sparse_index_that_is_not_base64_reads_as_none_with_one_warning(client: redis.Redis, registry: Registry, caplog: pytest.LogCaptureFixture) -> None:
    """Optional and derived (the gateway then plans from the batch index): never a failed lookup."""
    registry.register(entry(100, 199))
    registry.register(entry(200, 299))
    client.hset(registry.keys("orders", 3).segment(200), "sparse_index", "Aw==")  # entries written by the layout before
    client.hset(registry.keys("orders", 3).segment(100), "sparse_index", "%%%")
    caplog.set_level(logging.WARNING, logger="tiered_kafka.registry")
    for _ in range(3):
        found = registry.find("orders", 3, 150)
        assert found is not None and found.sparse_index is None and found.base_offset == 100
        assert [s.sparse_index for s in registry.segments("orders", 3)] == [None, b"\x03"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "sparse_index '%%%' is not base64; ignored" in warnings[0], warnings  # once per entry


def test_malformed_coverage_is_reported_with_its_key(client: redis.Redis, registry: Registry) -> None:
    key = registry.keys("orders", 3).coverage
    client.hset(key, mapping={"start_offset": "x", "observed_ms": "1"})
    with pytest.raises(MalformedRegistryDataError, match=re.escape(key)):
        registry.coverage_start("orders", 3)
    with pytest.raises(MalformedRegistryDataError, match="start_offset"):
        registry.coverage("orders", 3)


# -- the Redis Cluster contract: one hash tag per partition ----------------------------------------


def test_every_key_of_a_partition_is_in_one_slot(client: redis.Redis, registry: Registry, cluster_name: str) -> None:
    populate(registry)
    registry.record_gap("orders", 1, 1000, 1099, "x")
    keys = our_keys(client, cluster_name)
    by_tag: dict[str, list[str]] = defaultdict(list)
    for k in keys:
        by_tag[hash_tag(k)].append(k)
    assert set(by_tag) == {cluster_name, f"{cluster_name}/orders-0", f"{cluster_name}/orders-1", f"{cluster_name}/clicks-7"}
    assert by_tag[cluster_name] == [f"tk:{{{cluster_name}}}:partition-index", f"tk:{{{cluster_name}}}:partitions"]
    for tag, tagged in by_tag.items():
        assert len({key_slot(k.encode()) for k in tagged}) == 1, tag
        if tag != cluster_name:
            assert all(k.startswith(f"tk:{{{tag}}}:") for k in tagged)
    assert sorted(k.rsplit(":", 1)[-1] for k in by_tag[f"{cluster_name}/orders-0"]) == sorted(
        ["segments", "info", "gaps", "gap-details", "coverage", "times", *(f"{b:020d}" for b in (0, 100, 300))]
    )


_MONITOR_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", '"': '"', "\\": "\\"}


def _monitor_args(line: str) -> tuple[str, list[str]]:
    """(client, args) of a MONITOR line such as ``1.2 [0 lua] "ZADD" "k" "1" "m"``."""
    client = line.split("[", 1)[1].split("]", 1)[0].split(" ", 1)[1]
    body = line.split("]", 1)[1]

    def unescape(text: str) -> str:
        return re.sub(r"\\(x[0-9a-fA-F]{2}|.)", lambda m: chr(int(m[1][1:], 16)) if m[1][0] == "x" and len(m[1]) == 3 else _ESCAPES.get(m[1], m[1]), text)

    return client, [unescape(a) for a in _MONITOR_ARG.findall(body)]


def test_no_command_touches_two_slots(redis_server: Any, client: redis.Redis, registry: Registry) -> None:
    """Every command the registry sends, and every command its Lua scripts run, stays in one slot.

    Watched through MONITOR (which shows commands inside scripts as client "lua"); each command's
    keys are found by the server itself (COMMAND GETKEYS).
    """
    stop = f"monitor-stop-{uuid.uuid4().hex}"
    seen: list[tuple[str, list[str]]] = []
    conn = redis.Connection(host=redis_server.host, port=redis_server.port, socket_timeout=30)
    conn.connect()
    conn.send_command("MONITOR")
    assert conn.read_response() in (b"OK", "OK")

    def watch() -> None:
        while True:
            raw = conn.read_response()
            line = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
            who, args = _monitor_args(line)
            if args[:2] == ["ECHO", stop] or args[:2] == ["echo", stop]:
                return
            seen.append((who, args))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        time.sleep(0.1)
        populate(registry)
        registry.register(entry(0, 99, partition=0))  # no-op
        with contextlib.suppress(SegmentOverlapError):
            registry.register(entry(50, 150, partition=0))
        with contextlib.suppress(RegistryConflictError):
            registry.register(entry(0, 99, partition=0, size=1))
        registry.record_gap("orders", 0, 200, 299, "again")
        registry.set_coverage_start("orders", 0, 0)
        registry.set_coverage_start("orders", 0, 5)  # already set
        registry.record_expired("orders", 0, 10)
        for topic, partition in registry.partitions():
            registry.coverage_start(topic, partition)
            registry.coverage(topic, partition)
            registry.find(topic, partition, 150)
            registry.next_segment(topic, partition, 150)
            registry.segments(topic, partition, from_offset=150, limit=5)
            registry.partition_info(topic, partition)
            registry.gaps(topic, partition)
        registry.dump()
        registry.delete_segment("orders", 0, 0)
        registry.clear_partition("orders", 1)
        client.echo(stop)
        watcher.join(timeout=30)
        assert not watcher.is_alive()
    finally:
        conn.disconnect()

    checked = lua = evalsha = 0
    for who, args in seen:
        try:
            keys = client.command_getkeys(*args)
        except redis.exceptions.ResponseError:
            continue  # no key arguments (CLIENT, HELLO, SCRIPT LOAD, ...)
        keys = [k.decode() if isinstance(k, bytes) else k for k in keys]
        assert len({key_slot(k.encode()) for k in keys}) == 1, (who, args)
        checked += 1
        lua += who == "lua"
        evalsha += args[0].upper() == "EVALSHA"
    assert checked > 50 and lua > 20 and evalsha > 10


# -- concurrency -----------------------------------------------------------------------------------


def _race(workers: list[Callable[[], Any]]) -> list[Any]:
    barrier = threading.Barrier(len(workers))
    results: list[Any] = [None] * len(workers)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = workers[i]()
        except Exception as err:  # noqa: BLE001 - the outcome is what the test checks
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_concurrent_registration_of_one_segment_succeeds_once(redis_server: Any, cluster_name: str) -> None:
    clients = [redis.Redis.from_url(redis_server.url) for _ in range(4)]
    registries = [Registry(c, cluster_name) for c in clients]
    for r in range(40):
        e = entry(r * 100, r * 100 + 99)
        results = _race([lambda reg=reg, e=e: reg.register(e) for reg in registries])
        assert sorted(results) == [False, False, False, True], results
    assert registries[0].partition_info("orders", 3) == PartitionInfo(0, 3999, 40, 40_000, registries[0].partition_info("orders", 3).updated_ms)
    for c in clients:
        c.close()


def test_concurrent_overlapping_registrations_let_one_win(redis_server: Any, cluster_name: str) -> None:
    clients = [redis.Redis.from_url(redis_server.url) for _ in range(2)]
    a, b = (Registry(c, cluster_name) for c in clients)
    for r in range(30):
        first, second = entry(r * 1000, r * 1000 + 99), entry(r * 1000 + 50, r * 1000 + 149)
        results = _race([lambda: a.register(first), lambda: b.register(second)])
        assert sum(x is True for x in results) == 1, results
        assert sum(isinstance(x, SegmentOverlapError) for x in results) == 1, results
    assert a.partition_info("orders", 3).segment_count == 30
    for c in clients:
        c.close()


# -- errors ----------------------------------------------------------------------------------------


def test_malformed_data_is_reported_with_its_key(client: redis.Redis, registry: Registry) -> None:
    registry.register(entry(0, 99))
    registry.register(entry(100, 199))
    keys = registry.keys("orders", 3)
    client.hset(keys.segment(0), "size", "lots")
    with pytest.raises(MalformedRegistryDataError) as caught:
        registry.find("orders", 3, 5)
    assert caught.value.key == keys.segment(0) and caught.value.field == "size"
    assert keys.segment(0) in str(caught.value)
    client.hset(keys.segment(0), "size", "1000")
    client.hdel(keys.segment(0), "checksum")
    with pytest.raises(MalformedRegistryDataError, match="checksum"):
        registry.segments("orders", 3)
    client.delete(keys.segment(100))  # a member whose hash is gone for good
    with pytest.raises(MalformedRegistryDataError, match="without"):
        registry.find("orders", 3, 150)
    client.set(keys.info, "not a hash")
    with pytest.raises(RegistryError, match="WRONGTYPE") as wrongtype:
        registry.partition_info("orders", 3)
    assert not isinstance(wrongtype.value, RegistryUnavailableError)
    client.sadd(registry.partitions_key, "no partition here")
    with pytest.raises(MalformedRegistryDataError, match="partitions"):
        registry.partitions()


def test_unreachable_redis_is_retriable() -> None:
    (port,) = free_ports(1)
    registry = Registry(redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, retry=None), "kc")
    for call in (lambda: registry.register(entry(0, 9)), lambda: registry.find("orders", 3, 0), registry.partitions):
        with pytest.raises(RegistryUnavailableError) as caught:
            call()
        assert caught.value.retriable and isinstance(caught.value, ConnectionError)
        assert isinstance(caught.value.__cause__, redis.exceptions.ConnectionError)


# -- a real Redis Cluster (the ``redis_cluster`` fixture: three masters with a replica each) ---------


def test_works_on_redis_cluster(redis_cluster: Any, cluster_name: str) -> None:
    """On a real cluster the server refuses cross-slot commands and scripts: everything must stay in one slot."""
    client = connect(redis_cluster.url)
    assert isinstance(client.cluster_client(), redis.RedisCluster)  # connect() gives a LazyRedisCluster
    try:
        registry = Registry(client, cluster_name, clock=lambda: 7)
        partitions = [("orders", p) for p in range(8)] + [("clicks", 0)]
        nodes = {client.get_node_from_key(registry.keys(t, p).info).name for t, p in partitions}
        assert len(nodes) >= 2  # the partitions really are spread over several nodes
        for t, p in partitions:
            for base in (0, 100, 300):
                assert registry.register(entry(base, base + 99, topic=t, partition=p))
            assert registry.register(entry(0, 99, topic=t, partition=p)) is False
            registry.record_gap(t, p, 200, 299, "deleted before upload")
        with pytest.raises(SegmentOverlapError):
            registry.register(entry(50, 150, partition=1))
        with pytest.raises(RegistryConflictError):
            registry.register(entry(100, 199, partition=1, size=1))
        assert registry.partitions() == sorted(partitions)
        assert registry.topics() == {"clicks": [0], "orders": list(range(8))}
        assert registry.discover_partitions() == sorted(partitions)
        assert registry.find("orders", 5, 150) == entry(100, 199, partition=5)
        assert registry.find("orders", 5, 250) is None
        assert registry.next_segment("orders", 5, 250) == entry(300, 399, partition=5)
        assert registry.segments("orders", 5, from_offset=150) == [entry(100, 199, partition=5), entry(300, 399, partition=5)]
        assert registry.partition_info("orders", 5) == PartitionInfo(0, 399, 3, 3000, 7)
        assert registry.gaps("orders", 5) == [Gap(200, 299, "deleted before upload", 7)]
        assert registry.set_coverage_start("orders", 5, 0) == CoverageStart(0, 7)
        assert registry.set_coverage_start("orders", 5, 50, observed_ms=9) == CoverageStart(0, 7)
        assert registry.coverage_start("orders", 5) == CoverageStart(0, 7)
        assert registry.delete_segment("orders", 5, 0) == entry(0, 99, partition=5)
        assert registry.partition_info("orders", 5) == PartitionInfo(100, 399, 2, 2000, 7)
        assert registry.coverage("orders", 5) == Coverage(CoverageStart(0, 7), 400, 100)
        registry.set_coverage_start("only-coverage", 0, 42)
        assert registry.topics()["only-coverage"] == [0]
        assert ("only-coverage", 0) in registry.discover_partitions()
        partitions.append(("only-coverage", 0))
        dump = registry.dump()
        assert len(dump["partitions"]) == 10 and len(dump["partitions"]["orders-5"]["segments"]) == 2
        assert registry.clear_partition("orders", 5) == 2
        assert ("orders", 5) not in registry.partitions()
        for t, p in registry.partitions():
            registry.clear_partition(t, p)
        assert registry.partitions() == [] and registry.discover_partitions() == []
    finally:
        client.close()
