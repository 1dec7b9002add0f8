"""Plans from memory: the agent uploads a batch index per segment, the gateway plans a segment's
first read from it (one GET: the registry keeps no sparse index since layout 2, issue 34), then
with no .index, .timeindex or header GET; once the batch index is evicted, from its sparse digest
kept in the cache with no GET; a segment uploaded without one still plans (from headers), and
``tiered-kafka-agent backfill-batch-index`` gives it one (real Redis, SeaweedFS, broker, agent)."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest

from tests.support.agent_env import registry_for, settings_properties
from tests.support.gateway_env import gateway_settings, unique_topic, uploaded_partition
from tiered_kafka.format.batch_index import BatchIndex, build
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.read_plan import plan_ranges
from tiered_kafka_agent.__main__ import main as agent_main
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.backfill import backfill_batch_indexes
from tiered_kafka_gateway.remote import ClusterReader

pytestmark = pytest.mark.integration


@pytest.fixture
def uploaded(kafka_server, tmp_path, redis_server, s3_server, s3_bucket):
    """A topic of its own on the shared broker, uploaded; (topic, agent settings)."""
    topic = unique_topic("indexed")
    _, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic)
    return topic, settings


def _reader(settings, s3_server) -> ClusterReader:
    gateway = gateway_settings(settings, s3_server, cache={"segment_ttl_s": 0})
    return ClusterReader.connect(settings.cluster, gateway.clusters[settings.cluster], gateway)


def _object(s3_server, settings, key: str) -> bytes:
    return s3_server.client().get_object(Bucket=settings.s3.bucket, Key=key)["Body"].read()


def _plan_everything(reader: ClusterReader, topic: str, entries) -> None:
    """Plans at the start, middle and end of each segment, each range decoding to its offsets."""
    for entry in entries:
        for offset in (entry.base_offset, (entry.base_offset + entry.last_offset) // 2, entry.last_offset):
            plan = reader.plan(topic, 0, offset, 30_000)
            assert plan.segment.object_key == entry.object_key
            assert plan.ranges[0].first_offset <= offset <= plan.ranges[0].last_offset
            for r in plan.ranges:
                batches = list(iter_batches(reader.read_range(entry.object_key, r), position=r.start))
                assert (batches[0].base_offset, batches[-1].last_offset) == (r.first_offset, r.last_offset)


def test_agent_uploads_batch_indexes_and_the_gateway_plans_without_index_or_header_reads(uploaded, s3_server) -> None:
    topic, settings = uploaded
    entries = registry_for(settings).segments(topic, 0)
    assert len(entries) >= 3
    for entry in entries:
        assert FileKind.BATCHINDEX.value in entry.files
        stem = entry.object_key[: -len("log")]
        stored = BatchIndex.from_bytes(_object(s3_server, settings, stem + "batchindex"))
        assert stored.to_bytes() == build(_object(s3_server, settings, entry.object_key), entry.base_offset).to_bytes()
        assert entry.sparse_index is None  # layout 2: not in Redis (tiered_kafka.registry)
    reader = _reader(settings, s3_server)
    scheduled: list = []
    reader._loads = type("Recorder", (), {"submit": lambda self, key, load: scheduled.append(load)})()  # held, run below
    for entry in entries:  # cold: the first plan of each segment GETs its batch index, one request, exact
        plan = reader.plan(topic, 0, entry.base_offset + 1, max(1_000_000, entry.size))
        assert plan.ranges[0].first_offset <= entry.base_offset + 1 <= plan.ranges[0].last_offset
    assert Counter(reader.s3_gets_by_kind) == Counter({"batchindex": len(entries)}) and not scheduled
    for entry in entries:  # the batch indexes evicted: planned from their sparse digests, no S3 request
        reader.batch_indexes._drop(entry.object_key[: -len("log")] + "batchindex")
        assert reader.sparse_indexes.peek(entry.object_key) is not None
        plan = reader.plan(topic, 0, entry.base_offset + 1, max(1_000_000, entry.size))
        assert plan.ranges[0].first_offset <= entry.base_offset + 1 <= plan.ranges[0].last_offset
        assert (plan.ranges[0].start, plan.ranges[-1].end) == (0, entry.size)
    assert reader.s3_gets == len(entries) and len(scheduled) == len(entries)
    for load in scheduled:  # the batch indexes fetched again "in the background": one GET each
        load()
    before = Counter(reader.s3_gets_by_kind)
    assert before == Counter({"batchindex": 2 * len(entries)})
    for entry in entries:  # warm: from the batch index, no GET
        reader.plan(topic, 0, entry.base_offset + 1, 1_000_000)
        reader.plan(topic, 0, entry.last_offset, 1)
    assert reader.s3_gets_by_kind - before == Counter()
    before = Counter()
    # offsets-for-timestamp from the index: the first batch reaching the time, no .timeindex read
    target = entries[1]
    first = next(reader.batches_reaching(target, target.max_timestamp))
    log = _object(s3_server, settings, target.object_key)
    expected = next(b for b in iter_batches(log) if b.max_timestamp >= target.max_timestamp)
    assert (first.start, first.first_offset, first.last_offset) == (expected.position, expected.base_offset, expected.last_offset)
    assert reader.s3_gets_by_kind - before == Counter({"batchindex": 2 * len(entries)})
    _plan_everything(reader, topic, entries)
    assert {"index", "timeindex"}.isdisjoint(reader.s3_gets_by_kind)


def test_segments_without_one_plan_from_headers_until_backfilled(uploaded, s3_server, tmp_path: Path, capsys) -> None:
    topic, settings = uploaded
    registry = registry_for(settings)
    entries = registry.segments(topic, 0)
    old = entries[:2]
    client = s3_server.client()
    keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
    for entry in old:  # as uploaded before batch indexes: no object, not in files
        client.delete_object(Bucket=settings.s3.bucket, Key=keyspace.segment_key(topic, 0, entry.base_offset, FileKind.BATCHINDEX))
        registry.client.hset(registry.keys(topic, 0).segment(entry.base_offset), "files", "log,index,timeindex")
    old = registry.segments(topic, 0)[:2]
    assert all(FileKind.BATCHINDEX.value not in e.files and e.sparse_index is None for e in old)

    reader = _reader(settings, s3_server)
    for entry in old:
        plan = reader.plan(topic, 0, entry.base_offset + 3, 40_000)  # today's path: .index and header windows
        headers = reader.batch_headers(entry.object_key, entry.size)
        index = reader.offset_index(entry.object_key, entry.base_offset)
        assert plan.ranges == plan_ranges(index=index, headers=headers, segment_last_offset=entry.last_offset, offset=entry.base_offset + 3, max_bytes=40_000)
    assert reader.s3_gets_by_kind["index"] == len(old) and reader.s3_gets_by_kind["log"] >= len(old)
    assert "batchindex" not in reader.s3_gets_by_kind
    _plan_everything(reader, topic, old)

    config = tmp_path / "agent.properties"
    config.write_text(settings_properties(settings))
    assert agent_main(["backfill-batch-index", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"2 of {len(entries)} segments lack a batch index" in out
    assert f"batch indexes: 2 added, {len(entries) - 2} already present" in out
    for entry in registry.segments(topic, 0)[:2]:
        assert FileKind.BATCHINDEX.value in entry.files and entry.sparse_index is None
        stored = BatchIndex.from_bytes(_object(s3_server, settings, entry.object_key[: -len("log")] + "batchindex"))
        assert stored.to_bytes() == build(_object(s3_server, settings, entry.object_key), entry.base_offset).to_bytes()
    fresh = _reader(settings, s3_server)
    for entry in registry.segments(topic, 0)[:2]:
        fresh.plan(topic, 0, entry.base_offset + 3, max(1_000_000, entry.size))
    assert fresh.s3_gets_by_kind == Counter({"batchindex": 2})  # planned from the backfilled batch indexes, one GET each
