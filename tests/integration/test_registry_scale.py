"""Layout 2 of the registry (issue 34) against a real Redis: the time index, summaries, paged
listings, pipelined registration, and the in-place migration of a registry written by the layout
before it (its raw Redis commands, as that code wrote them)."""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tiered_kafka.registry import LAYOUT_VERSION, Registry, SegmentEntry, segment_member, time_member, time_member_of

pytestmark = pytest.mark.integration


def entry(base: int, last: int, *, topic: str = "orders", partition: int = 3, max_ts: int | None = None, **overrides: Any) -> SegmentEntry:
    fields: dict[str, Any] = {
        "topic": topic, "partition": partition, "base_offset": base, "last_offset": last,
        "object_key": f"prefix/kc/{topic}-{partition}/{base:020d}.log", "size": 10 * (last - base + 1),
        "record_count": last - base + 1, "min_timestamp": 1_000 + base, "max_timestamp": 1_000 + last if max_ts is None else max_ts,
        "checksum": f"crc32c:{base:08x}", "leader_epoch": 1, "upload_time_ms": 5, "files": ("log", "index", "timeindex", "batchindex"),
        "sparse_index": b"\x01" + b"\x00" * 8 + bytes(range(256)) * 40,  # ~10 KB, as a 1 GiB segment's
    }
    fields.update(overrides)
    return SegmentEntry(**fields)


@pytest.fixture(params=[False, True], ids=["bytes", "str"])
def client(redis_server: Any, request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_server.url, decode_responses=request.param)
    yield c
    c.close()


@pytest.fixture
def registry(client: redis.Redis) -> Registry:
    return Registry(client, f"kc-{uuid.uuid4().hex[:12]}")


def brute_force(entries: list[SegmentEntry], ts: int) -> int | None:
    """Kafka's rule over segments in offset order: the first whose max timestamp reaches ts."""
    return next((e.first for e in sorted(entries, key=lambda e: e.first) if e.max_timestamp >= ts), None)


def test_time_index_answers_like_a_scan_through_registrations_and_deletions(registry: Registry) -> None:
    rng = random.Random(34)
    entries = [entry(i * 10, i * 10 + 9, max_ts=rng.choice([-1, rng.randrange(0, 1000)])) for i in range(60)]
    shuffled = entries[:]
    rng.shuffle(shuffled)  # out of order, as a rebuild or a straddling segment registers them
    for e in shuffled:
        registry.register(e)
    live = list(entries)
    for _ in range(4):
        for ts in [0, 1, 250, 500, 999, 1000, *rng.sample(range(1000), 20)]:
            found = registry.segment_at_time("orders", 3, ts)
            assert (None if found is None else found.first) == brute_force(live, ts), ts
            before = [(e.first, e.last_offset, e.size) for e in live if found is None or e.first < found.first]
            assert registry.ranges_before_time("orders", 3, ts) == before, ts
        for doomed in [live[0], live[len(live) // 2]]:  # retention's oldest, and one in the middle
            registry.delete_segment("orders", 3, doomed.first)
            live.remove(doomed)


def newer_run(entries: list[SegmentEntry], ts: int) -> list[tuple[int, int, int]]:
    """The longest run of last segments (by offset) whose exact min timestamps are all above ts."""
    run: list[tuple[int, int, int]] = []
    for e in sorted(entries, key=lambda e: e.first):
        run = run + [(e.first, e.last_offset, e.size)] if e.min_timestamp_exact and e.min_timestamp > ts else []
    return run


def test_the_run_of_newer_segments_answers_like_a_scan_through_registrations_and_deletions(registry: Registry) -> None:
    rng = random.Random(3434)
    entries = []
    for i in range(70):  # mostly in time order, some out of it, some without an exact min timestamp
        low = i * 10 + rng.choice([0, 0, 0, -300, 200])
        entries.append(entry(i * 10, i * 10 + 9, min_timestamp=max(low, -1), max_ts=max(low, -1) + 9, min_timestamp_exact=rng.random() > 0.1))
    shuffled = entries[:]
    rng.shuffle(shuffled)
    registry.register_many(shuffled[:35])
    for e in shuffled[35:]:
        registry.register(e)
    live = list(entries)
    for _ in range(4):
        for ts in [-2, -1, 0, 350, 690, 700, 1000, *rng.sample(range(-300, 900), 25)]:
            assert registry.ranges_after_time("orders", 3, ts) == newer_run(live, ts), ts
        for doomed in [live[0], live[len(live) // 2], live[-1]]:
            registry.delete_segment("orders", 3, doomed.first)
            live.remove(doomed)


def test_time_index_members_written_before_the_min_timestamp_end_the_newer_run(client: redis.Redis, registry: Registry) -> None:
    entries = [entry(i * 10, i * 10 + 9, min_timestamp=i * 10, max_ts=i * 10 + 9, min_timestamp_exact=True) for i in range(6)]
    registry.register_many(entries)
    assert registry.ranges_after_time("orders", 3, 25) == [(e.first, e.last_offset, e.size) for e in entries[3:]]
    keys = registry.keys("orders", 3)
    old = entries[4]  # its member as this morning's layout 2 wrote it: no min timestamp
    score = client.zscore(keys.times, time_member_of(old))
    client.zrem(keys.times, time_member_of(old))
    client.zadd(keys.times, {time_member(old.first, old.last_offset, old.max_timestamp, old.size): score})
    assert registry.ranges_after_time("orders", 3, 25) == [(entries[5].first, entries[5].last_offset, entries[5].size)]
    assert registry.ranges_before_time("orders", 3, 55) == [(e.first, e.last_offset, e.size) for e in entries[:5]]


def test_register_does_not_store_the_sparse_index_and_stays_small(client: redis.Redis, registry: Registry) -> None:
    e = entry(0, 9)
    registry.register(e)
    key = registry.keys("orders", 3).segment(0)
    assert client.hexists(key, "sparse_index") == 0
    assert client.object("encoding", key) in (b"listpack", "listpack", b"ziplist", "ziplist")
    found = registry.find("orders", 3, 5)
    assert found is not None and found.sparse_index is None and found.max_timestamp == e.max_timestamp


def test_summaries_and_pages_cost_the_page(registry: Registry) -> None:
    registry.register_many([entry(i * 10, i * 10 + 9, min_timestamp=100 + i) for i in range(50)])
    registry.register_many([entry(0, 4, topic=t, partition=p) for t in ("b-topic", "a.topic", "a") for p in (10, 2, 0)])
    registry.record_gap("orders", 3, 500, 509, "lost")
    summary = registry.summary("orders", 3)
    assert summary is not None and summary.indexed and summary.info.segment_count == 50
    assert summary.records == 500 and summary.oldest_timestamp == 100 and summary.newest_timestamp == 1000 + 499 and summary.gap_count == 1
    registry.delete_segment("orders", 3, 0)
    summary = registry.summary("orders", 3)
    assert summary is not None and summary.records == 490 and summary.oldest_timestamp == 101
    assert [e.first for e in registry.segments_page("orders", 3, 10, 3)] == [110, 120, 130]
    everything = registry.partitions_page(limit=100)
    assert everything == sorted(everything) and len(everything) == 10 and registry.partition_count() == 10
    pages, after = [], None
    while page := registry.partitions_page(after=after, limit=3):
        pages += page
        after = page[-1]
    assert pages == everything
    assert registry.partitions_page(topic="a", limit=10) == [("a", 0), ("a", 2), ("a", 10)] and registry.partition_count("a") == 3
    assert registry.partitions_page(start=9, limit=5) == everything[9:]


def test_register_many_reports_like_register(registry: Registry) -> None:
    entries = [entry(i * 10, i * 10 + 9) for i in range(25)]
    seen: list[int] = []
    assert registry.register_many(entries, batch=10, progress=seen.append) == [True] * 25
    assert seen == [10, 20, 25]
    assert registry.register_many(entries[:3]) == [False] * 3
    from tiered_kafka.registry import SegmentOverlapError

    with pytest.raises(SegmentOverlapError):
        registry.register_many([entry(1000, 1009), entry(5, 14)])
    assert registry.find("orders", 3, 1005) is not None  # the rest of the batch ran
    assert [e.first for e in registry.segments("orders", 3)][-1] == 1000


def write_old_layout(client: redis.Redis, registry: Registry, e: SegmentEntry) -> None:
    """What the layout before 2 wrote for a registration (its register script's effect, command by
    command): the member, the whole hash with its base64 ``sparse_index``, the info hash, the SET."""
    keys = registry.keys(e.topic, e.partition)
    client.zadd(keys.segments, {e.member: e.first})
    client.hset(keys.segment(e.first), mapping=e.to_fields())
    members = client.zrange(keys.segments, 0, -1)
    first, last = (m.decode() if isinstance(m, bytes) else m for m in (members[0], members[-1]))
    client.hset(keys.info, mapping={"earliest_offset": int(first[:20]), "latest_offset": int(last[21:]), "segment_count": len(members), "updated_ms": 1})
    client.hincrby(keys.info, "total_bytes", e.size)
    client.hset(keys.coverage, "next_offset", e.last_offset + 1)
    client.sadd(registry.partitions_key, f"{e.topic}-{e.partition}")


def test_a_registry_written_by_the_old_layout_is_read_then_migrated_in_place(client: redis.Redis, registry: Registry) -> None:
    old = [entry(i * 10, i * 10 + 9, max_ts=[50, 20, 80, 10][i % 4] + i, partition=p) for p in (0, 1) for i in range(12)]
    for e in old:
        write_old_layout(client, registry, e)
    seg_key = registry.keys("orders", 0).segment(0)
    assert client.object("encoding", seg_key) in (b"hashtable", "hashtable")
    # read before migrating: entries, their sparse index, time lookups (by a scan), listings
    assert registry.find("orders", 0, 15) == old[1]
    assert registry.find("orders", 0, 15).sparse_index == old[1].sparse_index  # type: ignore[union-attr]
    assert registry.segment_at_time("orders", 1, 60) is not None
    assert registry.partitions_page(limit=10) == [("orders", 0), ("orders", 1)]
    summary = registry.summary("orders", 0)
    assert summary is not None and not summary.indexed and summary.records is None
    # a registration on a partition not migrated yet works (no time index upkeep until migrated)
    registry.register(entry(120, 129, partition=0, max_ts=5))
    # an interrupted migration: one partition done, then the whole run again
    from tiered_kafka.registry._migrate import MigrationReport, _migrate_partition

    assert _migrate_partition(registry, "orders", 1, 5, MigrationReport())
    done: list[tuple[int, int]] = []
    report = registry.migrate(batch=5, progress=lambda n, total: done.append((n, total)))
    assert (report.migrated, report.already, report.rewritten) == (1, 1, 12) and done[-1] == (2, 2)
    assert registry.migrate().migrated == 0  # resumable: nothing left
    assert client.hexists(seg_key, "sparse_index") == 0
    assert client.object("encoding", seg_key) in (b"listpack", "listpack")
    live = old + [entry(120, 129, partition=0, max_ts=5)]
    for p in (0, 1):
        mine = [e for e in live if e.partition == p]
        summary = registry.summary("orders", p)
        assert summary is not None and summary.indexed and summary.records == sum(e.record_count for e in mine)
        assert [e.to_dict() for e in registry.segments("orders", p)] == [e.to_dict() for e in sorted(mine, key=lambda e: e.first)]
        for ts in range(0, 100, 3):
            found = registry.segment_at_time("orders", p, ts)
            assert (None if found is None else found.first) == brute_force(mine, ts)
    assert client.hget(registry.keys("orders", 0).info, "layout") in (LAYOUT_VERSION, LAYOUT_VERSION.encode())
    assert segment_member(0, 9) in [m.decode() if isinstance(m, bytes) else m for m in client.zrange(registry.keys("orders", 0).segments, 0, 0)]


class _RecordingStore:
    """Remote retention's store calls, recorded (the deletions' S3 side is tested with SeaweedFS in
    tests/integration/agent; here only what a pass reads is counted)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.keyspace = type("K", (), {"partition_prefix": staticmethod(lambda t, p: f"x/{t}-{p}/"), "parse": None})()

    def write_expired(self, topic: str, partition: int, until: int) -> None:
        self.calls.append(f"expired {topic}-{partition} {until}")

    def delete_segment_objects(self, topic: str, partition: int, base: int, kinds: Any) -> None:
        self.calls.append(f"delete {topic}-{partition} {base}")

    def list_keys(self, prefix: str) -> list[tuple[str, int]]:
        self.calls.append(f"list {prefix}")
        return []


def test_a_retention_pass_with_nothing_to_expire_reads_summaries_only(registry: Registry) -> None:
    from tiered_kafka.retry import RetryPolicy
    from tiered_kafka_agent.config import RemoteRetentionSettings
    from tiered_kafka_agent.retention import RemoteRetention

    registry.register_many([entry(i * 10, i * 10 + 9, partition=p, max_ts=1_000 + i) for p in range(4) for i in range(100)])
    store = _RecordingStore()
    led = [("orders", 0), ("orders", 1)]
    retention = RemoteRetention(registry, store, RemoteRetentionSettings(ms=10_000, bytes=10**9), RetryPolicy(attempts=1), partitions=lambda: led)  # type: ignore[arg-type]
    assert retention.run_once(now_ms=5_000) == []
    assert (retention.summaries_read, retention.segments_read, store.calls) == (2, 0, [])  # led partitions only; no segment, no S3
    # the oldest three of each led partition expire by time: only a page of the oldest is read
    assert [(e.partition, e.first) for e in retention.run_once(now_ms=1_002 + 10_001)] == [(p, f) for p in (0, 1) for f in (0, 10, 20)]
    assert retention.segments_read == 2 * 32  # one page (retention.PAGE) of each, not the partitions' 100
    assert store.calls[:2] == ["expired orders-0 30", "delete orders-0 0"]
    assert registry.find("orders", 2, 0) is not None  # not led here: untouched


def test_pages_of_a_long_partition_read_its_summary_and_one_page_of_segments(redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    """A partition of more than ``ui.data.SEGMENTS_DRAWN`` segments: its bar is drawn from the summary
    (the extent cut at its gap), its segment table reads the page asked, the time lookups answer from the
    time index, and the listing pages by cursor (gateway app over real Redis and SeaweedFS)."""
    from fastapi.testclient import TestClient

    from tests.support.local_url import LOCAL_URL
    from tiered_kafka.format.segment_names import FileKind
    from tiered_kafka.keyspace import Keyspace
    from tiered_kafka_gateway.app import create_app
    from tiered_kafka_gateway.config import load_settings
    from tiered_kafka_gateway.ui import data

    cluster = f"kc-{uuid.uuid4().hex[:10]}"
    registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
    keyspace = Keyspace("tiered", cluster, 0)
    count = data.SEGMENTS_DRAWN + 30
    segments = [entry(i * 10, i * 10 + 9, object_key=keyspace.segment_key("orders", 3, i * 10, FileKind.LOG)) for i in range(count) if i != 25]
    registry.register_many(segments)
    registry.record_gap("orders", 3, 250, 259, "lost before upload")
    registry.register_many([entry(0, 9, partition=p, object_key=keyspace.segment_key("orders", p, 0, FileKind.LOG)) for p in (0, 1)])
    s3 = {"bucket": s3_bucket, "prefix": "tiered", "endpoint_url": s3_server.endpoint_url, "access_key_id": s3_server.access_key,
          "secret_access_key": s3_server.secret_key, "region": s3_server.region}
    http = TestClient(create_app(load_settings(clusters={cluster: {"redis_url": redis_server.url, "s3": s3}})), base_url=LOCAL_URL)
    page = http.get(f"/ui/clusters/{cluster}/topics/orders").text
    bar = page[page.index('data-partition="3"') :]
    bar = bar[: bar.index("</g>")]
    assert bar.count('class="seg"') == 2 and 'data-start="0" data-end="249"' in bar and f'data-end="{count * 10 - 1}"' in bar, bar[:600]
    table = http.get(f"/ui/clusters/{cluster}/topics/orders/partitions/3?rows=10&page=3").text
    assert [int(c) for c in re.findall(r'<tr class="segment"><td>(\d+)</td>', table)] == [e.first for e in segments[30:40]]
    assert f"{count - 1}, " in table  # the segment count, from the summary
    overview = http.get(f"/ui/clusters/{cluster}").text
    assert f"{sum(e.record_count for e in segments) + 20:,}" in overview  # records, from the summaries
    body = http.get(f"/v1/clusters/{cluster}/topics/orders/partitions/3/time-ranges", params={"from_timestamp": 1_000 + 400, "to_timestamp": 1_000 + 419}).json()
    assert body["pruned"][:2] == [{"first_offset": 0, "last_offset": 249, "size": 2500}, {"first_offset": 260, "last_offset": 399, "size": 1400}]
    assert body["pruned_segments"] == 39 and body["earliest_offset"] == 0  # those before the window; the later ones are inexact (no exact min)
    assert [s["first_offset"] for s in body["inexact"]] == [e.first for e in segments[39:]]
    listing = http.get(f"/v1/clusters/{cluster}/topics", params={"limit": 2}).json()
    assert listing["topics"] == [{"name": "orders", "partitions": [0, 1]}] and listing["next_after"] == "orders/1" and listing["total_partitions"] == 3
    rest = http.get(f"/v1/clusters/{cluster}/topics", params={"limit": 2, "after": "orders/1"}).json()
    assert rest["topics"] == [{"name": "orders", "partitions": [3]}] and rest["next_after"] is None


def expected_time_ranges(entries: list[SegmentEntry], low: int, high: int) -> tuple[list[tuple[int, int]], int, list[int]]:
    """routes.time_ranges' rule segment by segment over every entry (what it answered before it read
    both ends from the time index): pruned runs, pruned segment count, inexact segments' first offsets."""
    runs: list[tuple[int, int]] = []
    count, inexact, reached = 0, [], False
    for e in sorted(entries, key=lambda e: e.first):
        reached = reached or e.max_timestamp >= low
        if reached and not (e.max_timestamp < low or (e.min_timestamp_exact and e.min_timestamp > high)):
            if not e.min_timestamp_exact:
                inexact.append(e.first)
            continue
        count += 1
        runs = runs[:-1] + [(runs[-1][0], e.last_offset)] if runs and runs[-1][1] + 1 == e.first else runs + [(e.first, e.last_offset)]
    return runs, count, inexact


def test_time_ranges_read_both_ends_from_the_index_and_answer_as_the_rule_segment_by_segment(redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    """/time-ranges over a real registry (the gateway app): the runs before F and after T come from the
    time index, the segments between are read; the answer is the rule applied to every segment."""
    from fastapi.testclient import TestClient

    from tests.support.local_url import LOCAL_URL
    from tiered_kafka.format.segment_names import FileKind
    from tiered_kafka.keyspace import Keyspace
    from tiered_kafka_gateway.app import create_app
    from tiered_kafka_gateway.config import load_settings

    rng = random.Random(43)
    cluster = f"kc-{uuid.uuid4().hex[:10]}"
    registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
    keyspace = Keyspace("tiered", cluster, 0)
    segments = []
    for i in range(120):
        if i in (40, 90):  # holes: runs do not merge across them
            continue
        low = max(i * 100 + rng.choice([0, 0, 0, 0, -2_500, 1_500]), -1)
        segments.append(entry(i * 10, i * 10 + 9, min_timestamp=low, max_ts=low + rng.randrange(0, 150), min_timestamp_exact=rng.random() > 0.08,
                              object_key=keyspace.segment_key("orders", 3, i * 10, FileKind.LOG)))
    registry.register_many(segments)
    s3 = {"bucket": s3_bucket, "prefix": "tiered", "endpoint_url": s3_server.endpoint_url, "access_key_id": s3_server.access_key,
          "secret_access_key": s3_server.secret_key, "region": s3_server.region}
    http = TestClient(create_app(load_settings(clusters={cluster: {"redis_url": redis_server.url, "s3": s3}})), base_url=LOCAL_URL)
    windows = [(0, 20_000), (-5_000, -4_000), (5_000, 5_050), (11_000, 11_500), (20_000, 30_000), *[(a, a + rng.randrange(0, 3_000)) for a in rng.sample(range(-3_000, 12_000), 12)]]
    for low, high in windows:
        body = http.get(f"/v1/clusters/{cluster}/topics/orders/partitions/3/time-ranges", params={"from_timestamp": low, "to_timestamp": high}).json()
        runs, count, inexact = expected_time_ranges(segments, low, high)
        assert [(r["first_offset"], r["last_offset"]) for r in body["pruned"]] == runs, (low, high)
        assert body["pruned_segments"] == count and [s["first_offset"] for s in body["inexact"]] == inexact, (low, high)


def test_layout_2_works_on_a_redis_cluster(redis_cluster: Any) -> None:
    """Pipelined registration, summaries, the time index, paged listings and the migration over a
    ``redis+cluster://`` client: every partition's keys in its own slot, pipelines split by node."""
    from tiered_kafka.registry import connect

    client = connect(redis_cluster.url)
    registry = Registry(client, f"kc-{uuid.uuid4().hex[:10]}")
    entries = [entry(i * 10, i * 10 + 9, partition=p, max_ts=100 * i) for p in range(6) for i in range(5)]
    assert registry.register_many(entries, batch=7) == [True] * 30
    assert registry.partitions_page(limit=100) == [("orders", p) for p in range(6)] and registry.partition_count() == 6
    summaries = registry.summaries([("orders", p) for p in range(6)])
    assert all(s is not None and s.indexed and s.records == 50 for s in summaries)
    found = registry.segment_at_time("orders", 4, 250)
    assert found is not None and found.first == 30 and registry.ranges_before_time("orders", 4, 250) == [(e.first, e.last_offset, e.size) for e in entries[20:23]]
    old = Registry(client, f"kc-{uuid.uuid4().hex[:10]}")
    for e in entries[:10]:
        write_old_layout(client, old, e)
    assert old.migrate().migrated == 2 and old.summary("orders", 1).records == 50  # type: ignore[union-attr]
    client.close()
