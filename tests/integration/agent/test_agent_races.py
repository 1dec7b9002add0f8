"""Retention racing the agent (.deleted renames, deletions), rebuild from S3, remote retention.

Real components: Apache Kafka (the session's shared KRaft broker: each test its own topic, and an
agent limited to it), Redis, SeaweedFS. Kafka itself renames and deletes segments (DeleteRecords,
then its retention task); a test that damages or removes a segment by hand does so in a copy of
the partition directory Kafka wrote (``copy_partition``), never under the running broker.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from aiokafka import AIOKafkaProducer

from tests.support.agent_env import agent_settings, broker_agent_settings, copy_partition, delete_records, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.kafka_clients import create_topic, produce, value_for
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.rebuild import rebuild_registry
from tiered_kafka_dev.services import KafkaServer

pytestmark = pytest.mark.integration


def _fill(broker: KafkaServer, stem: str, count: int = 600, partitions: int = 1, start: int = 0, topic: str | None = None, **configs: str) -> str:
    """A new topic (``stem`` + a suffix) of 40000-byte segments on ``broker`` holding ``count``
    records (or more records appended to ``topic``); returns the topic's name."""
    if topic is None:
        topic = unique_topic(stem)
        create_topic(broker.bootstrap_servers, topic, partitions, **{"segment.bytes": "40000", **configs})
    produce(broker.bootstrap_servers, topic, [(i % partitions, None, value_for(i)) for i in range(start, start + count)], **{"linger.ms": 1, "batch.num.messages": 5})
    return topic


def test_segments_renamed_deleted_are_uploaded_under_their_kafka_names(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """Kafka's retention renames a segment's files ``.deleted`` (``LogSegment.changeFileSuffixes``,
    the producer snapshot named by its base too) and deletes them ``file.delete.delay.ms`` later: an
    agent that arrives in between uploads them under those names."""
    topic = _fill(kafka_server, "renamed", **{"file.delete.delay.ms": "600000"})
    directory = kafka_server.log_dir / f"{topic}-0"
    rotated = rotated_bases(directory)
    delete_records(kafka_server.bootstrap_servers, topic, rotated[3])  # retention got there first
    wait_for(lambda: all((directory / f"{base:020d}.log.deleted").exists() for base in rotated[:3]), what="Kafka renamed the first segments .deleted")
    assert rotated_bases(directory) == rotated[3:] and all(not (directory / f"{base:020d}.log").exists() for base in rotated[:3])
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings) as agent:
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated, what="all registered")
        for base in rotated[:3]:
            for kind in (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX):
                key = agent.keyspace.segment_key(topic, 0, base, kind)
                body = s3_server.client().get_object(Bucket=s3_bucket, Key=key)["Body"].read()
                assert body == (directory / f"{base:020d}.{kind.value}.deleted").read_bytes()
    assert registry.gaps(topic, 0) == []


def test_a_segment_deleted_before_upload_is_a_reported_gap(kafka_server, redis_server, s3_server, s3_bucket, caplog) -> None:
    """The agent is down while Kafka's retention (DeleteRecords) deletes segments it had not
    uploaded yet: on restart their offsets are one recorded gap, and uploading goes on after it."""
    topic = _fill(kafka_server, "lossy", count=200, **{"file.delete.delay.ms": "0"})
    directory = kafka_server.log_dir / f"{topic}-0"
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    first_round = rotated_bases(directory)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == first_round, what="the first segments registered")
    lost = registry.segments(topic, 0)[-1].next_offset  # the first offset no agent uploaded
    _fill(kafka_server, "lossy", count=400, start=200, topic=topic)
    rotated = rotated_bases(directory)
    survivor = [b for b in rotated if b > lost][1]  # two segments past the last registered one
    delete_records(kafka_server.bootstrap_servers, topic, survivor)
    wait_for(lambda: min(int(p.name[:20]) for p in directory.glob("*.log")) == survivor, what=f"segments below {survivor} deleted")
    caplog.set_level(logging.ERROR, logger="tiered_kafka_agent")
    with Agent(settings) as agent:
        expected = first_round + [b for b in rotated if b >= survivor]
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == expected, what="the others registered")
        gaps = registry.gaps(topic, 0)
        assert [(g.start_offset, g.end_offset) for g in gaps] == [(lost, survivor - 1)]
        assert agent.metrics.value("tiered_kafka_agent_gaps_total", topic=topic) == 1
    assert any("GAP offsets" in r.getMessage() and str(lost) in r.getMessage() for r in caplog.records)
    # the gap is in S3 too, so a rebuilt registry keeps it
    marker = agent.keyspace.gap_key(topic, 0, lost, survivor - 1)
    assert s3_server.client().head_object(Bucket=s3_bucket, Key=marker)["ContentLength"] > 0


def test_the_rebuilt_registry_equals_the_registered_one(kafka_server, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    topic = _fill(kafka_server, "rebuilt", count=900, partitions=3)
    log_dir = tmp_path / "logs"  # copies of Kafka's partitions: one loses a segment by hand
    for p in range(3):
        copy_partition(kafka_server.log_dir / f"{topic}-{p}", log_dir)
    directory = log_dir / f"{topic}-1"
    lost = rotated_bases(directory)[1]
    for path in directory.glob(f"{lost:020d}.*"):
        path.unlink()  # a gap, which the rebuild must reproduce too
    settings = agent_settings(log_dir, redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings) as agent:
        for p in range(3):
            wait_for(lambda p=p: len(registry.segments(topic, p)) == len([b for b in rotated_bases(log_dir / f"{topic}-{p}") if b != lost or p != 1]), what=f"{topic}-{p}")
        registered = registry.dump()
        store = agent.store
    for topic_, partition in registry.partitions():
        registry.clear_partition(topic_, partition)
    assert registry.dump() != registered
    report = rebuild_registry(store, registry)
    assert report.segments == sum(len(registry.segments(topic, p)) for p in range(3)) and report.gaps == 1
    assert registry.dump() == registered


def test_remote_retention_deletes_registry_entries_then_objects_oldest_first(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    topic = _fill(kafka_server, "aging", count=600)
    directory = kafka_server.log_dir / f"{topic}-0"
    rotated = rotated_bases(directory)
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket, remote_retention={"interval_s": 3600})
    registry = registry_for(settings)
    with Agent(settings) as agent:
        wait_for(lambda: len(registry.segments(topic, 0)) == len(rotated), what="all registered")
        entries = registry.segments(topic, 0)
        keep_bytes = sum(e.size for e in entries[-2:])
        agent.retention.settings = agent.retention.settings.model_copy(update={"bytes": keep_bytes})
        deleted = agent.retention.run_once()
        assert [d.base_offset for d in deleted] == [e.base_offset for e in entries[:-2]]
        remaining = registry.segments(topic, 0)
        assert [e.base_offset for e in remaining] == [e.base_offset for e in entries[-2:]]
        assert registry.partition_info(topic, 0).earliest_offset == remaining[0].base_offset
        keys = {k for k, _ in agent.store.list_keys(agent.keyspace.partition_prefix(topic, 0))}
        for entry in deleted:
            assert not any(f"{entry.base_offset:020d}." in k for k in keys), "an object of a deleted segment was left dangling"
        for entry in remaining:
            for kind in entry.files:
                assert agent.keyspace.segment_key(topic, 0, entry.base_offset, FileKind(kind)) in keys
        # by time: everything older than now - 1 ms goes
        agent.retention.settings = agent.retention.settings.model_copy(update={"bytes": -1, "ms": 1})
        assert len(agent.retention.run_once(now_ms=int(time.time() * 1000) + 10_000)) == 2
        assert registry.segments(topic, 0) == []


def test_a_corrupt_segment_is_never_registered_and_blocks_nothing_silently(kafka_server, redis_server, s3_server, s3_bucket, tmp_path, caplog) -> None:
    topic = _fill(kafka_server, "damaged")
    directory = copy_partition(kafka_server.log_dir / f"{topic}-0", tmp_path / "logs")  # damaged in a copy, not under the broker
    rotated = rotated_bases(directory)
    bad = directory / f"{rotated[2]:020d}.log"
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    caplog.set_level(logging.ERROR, logger="tiered_kafka_agent")
    with Agent(settings) as agent:
        wait_for(lambda: agent.metrics.value("tiered_kafka_agent_upload_failures_total", topic=topic) >= 2, what="repeated failures")
        # everything before the damaged segment is registered; nothing from it on: no offset is skipped
        assert [s.base_offset for s in registry.segments(topic, 0)] == rotated[:2]
        assert registry.gaps(topic, 0) == []
    assert any("CRC mismatch" in r.getMessage() for r in caplog.records)


def test_metrics_are_served_over_http(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    topic = _fill(kafka_server, "observed")
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket, metrics={"port": port})
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: len(registry.segments(topic, 0)) == len(rotated_bases(kafka_server.log_dir / f"{topic}-0")), what="registered")
        caught_up = f'tiered_kafka_agent_upload_lag_offsets{{partition="0",topic="{topic}"}} 0.0'

        def scrape() -> str | None:
            """The agent sets the lag gauge after its pass registered the segments: scraped until it reads 0."""
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            return text if caught_up in text else None

        body = wait_for(scrape, what="the upload lag gauge at 0")
    for name in (
        "tiered_kafka_agent_upload_lag_offsets",
        "tiered_kafka_agent_upload_lag_seconds",
        "tiered_kafka_agent_watermark_age_seconds",
        "tiered_kafka_agent_uploaded_bytes_total",
        "tiered_kafka_agent_upload_failures_total",
        "tiered_kafka_agent_upload_retries_total",
        "tiered_kafka_agent_gaps_total",
    ):
        assert name in body, name


def test_a_segment_registered_by_another_leader_is_never_overwritten(kafka_server, redis_server, s3_server, s3_bucket, caplog) -> None:
    """Another leader rolled earlier and registered 0..(a batch boundary before b1); our first segment straddles it."""
    from tiered_kafka.format import batch_index
    from tiered_kafka.keyspace import Keyspace
    from tiered_kafka.registry import SegmentEntry

    topic = _fill(kafka_server, "handover")
    directory = kafka_server.log_dir / f"{topic}-0"
    rotated = rotated_bases(directory)
    cut = batch_index.build((directory / f"{0:020d}.log").read_bytes(), 0).holding(rotated[1] - 2).base_offset  # replicas share batches
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
    theirs = keyspace.segment_key(topic, 0, 0, FileKind.LOG)
    s3_server.client().put_object(Bucket=s3_bucket, Key=theirs, Body=b"the other leader's segment")
    registry.register(
        SegmentEntry(
            topic=topic, partition=0, base_offset=0, last_offset=cut - 1, object_key=theirs, size=26, record_count=cut,
            min_timestamp=0, max_timestamp=0, checksum="crc32c:00000000", leader_epoch=0, upload_time_ms=1, files=("log",),
        )
    )
    caplog.set_level(logging.ERROR, logger="tiered_kafka_agent")
    with Agent(settings):
        # our segment 0 has their key: its offsets past theirs go up as a tail segment of their own (two_leaders)
        wait_for(lambda: [s.first_offset for s in registry.segments(topic, 0)] == [0, cut, *rotated[1:]], what="the rest registered")
    assert s3_server.client().get_object(Bucket=s3_bucket, Key=theirs)["Body"].read() == b"the other leader's segment"
    assert registry.gaps(topic, 0) == []
    tail = registry.find(topic, 0, cut)
    assert tail is not None and 0 < tail.base_offset == tail.first_offset == cut and tail.last_offset == rotated[1] - 1
    body = s3_server.client().get_object(Bucket=s3_bucket, Key=tail.object_key)["Body"].read()
    assert body == (directory / f"{0:020d}.log").read_bytes()[-tail.size :]  # the batches from cut


def test_a_time_index_ending_in_a_zero_entry_does_not_stall(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """Records with CreateTime 0 make the roll's final time-index entry all zeros, legitimately:
    Kafka's ``LogSegment.onBecomeInactiveSegment`` appends (maxTimestampSoFar, its offset) when it is
    above the last entry's timestamp, and an empty time index's last entry is -1 (NO_TIMESTAMP)."""
    topic = unique_topic("epoch")
    # every batch rolls the next; no time-based retention: Kafka deletes segments whose newest record
    # is older than retention.ms (7 days by default), and records of 1970 are
    create_topic(kafka_server.bootstrap_servers, topic, 1, **{"segment.bytes": "100", "retention.ms": "-1"})

    async def produce_at_time_zero() -> None:  # aiokafka: librdkafka reads a timestamp of 0 as "now"
        producer = AIOKafkaProducer(bootstrap_servers=kafka_server.bootstrap_servers, linger_ms=0)
        await producer.start()
        try:
            for _ in range(4):
                await producer.send_and_wait(topic, b"v", key=b"k", partition=0, timestamp_ms=0)
        finally:
            await producer.stop()

    asyncio.run(produce_at_time_zero())
    directory = kafka_server.log_dir / f"{topic}-0"
    assert rotated_bases(directory) == [0, 1, 2]
    assert (directory / "00000000000000000000.timeindex").read_bytes() == b"\x00" * 12
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == [0, 1, 2], what="zero-timestamp segments registered")
