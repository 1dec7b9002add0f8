"""Retention racing the agent (.deleted renames, deletions), rebuild from S3, remote retention."""

from __future__ import annotations

import logging
import time

import pytest

from tests.support.agent_env import agent_settings, registry_for, rotated_bases, wait_for
from tests.support.kafka_clients import create_topic, produce, value_for
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.rebuild import rebuild_registry

pytestmark = pytest.mark.integration


def _fill(start_dev_broker, tmp_path, topic: str, count: int = 600, partitions: int = 1):
    broker = start_dev_broker(tmp_path / "logs")
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, topic, partitions, **{"segment.bytes": "40000"})
    produce(bootstrap, topic, [(i % partitions, None, value_for(i)) for i in range(count)], **{"linger.ms": 1, "batch.num.messages": 5})
    return broker


def test_segments_renamed_deleted_are_uploaded_under_their_kafka_names(start_dev_broker, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    _fill(start_dev_broker, tmp_path, "renamed")
    directory = tmp_path / "logs" / "renamed-0"
    rotated = rotated_bases(directory)
    for base in rotated[:3]:  # retention got there first: the files carry the .deleted suffix
        for path in directory.glob(f"{base:020d}.*"):
            path.rename(path.with_name(path.name + ".deleted"))
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings) as agent:
        wait_for(lambda: [s.base_offset for s in registry.segments("renamed", 0)] == rotated, what="all registered")
        for base in rotated[:3]:
            key = agent.keyspace.segment_key("renamed", 0, base, FileKind.LOG)
            body = s3_server.client().get_object(Bucket=s3_bucket, Key=key)["Body"].read()
            assert body == (directory / f"{base:020d}.log.deleted").read_bytes()
    assert registry.gaps("renamed", 0) == []


def test_a_segment_deleted_before_upload_is_a_reported_gap(start_dev_broker, redis_server, s3_server, s3_bucket, tmp_path, caplog) -> None:
    _fill(start_dev_broker, tmp_path, "lossy")
    directory = tmp_path / "logs" / "lossy-0"
    rotated = rotated_bases(directory)
    lost = rotated[2]
    for path in directory.glob(f"{lost:020d}.*"):
        path.unlink()
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    caplog.set_level(logging.ERROR, logger="tiered_kafka_agent")
    with Agent(settings) as agent:
        expected = [b for b in rotated if b != lost]
        wait_for(lambda: [s.base_offset for s in registry.segments("lossy", 0)] == expected, what="the others registered")
        gaps = registry.gaps("lossy", 0)
        assert [(g.start_offset, g.end_offset) for g in gaps] == [(lost, rotated[3] - 1)]
        assert agent.metrics.value("tiered_kafka_agent_gaps_total", topic="lossy") == 1
    assert any("GAP offsets" in r.getMessage() and str(lost) in r.getMessage() for r in caplog.records)
    # the gap is in S3 too, so a rebuilt registry keeps it
    marker = agent.keyspace.gap_key("lossy", 0, lost, rotated[3] - 1)
    assert s3_server.client().head_object(Bucket=s3_bucket, Key=marker)["ContentLength"] > 0


def test_the_rebuilt_registry_equals_the_registered_one(start_dev_broker, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    _fill(start_dev_broker, tmp_path, "rebuilt", count=900, partitions=3)
    directory = tmp_path / "logs" / "rebuilt-1"
    lost = rotated_bases(directory)[1]
    for path in directory.glob(f"{lost:020d}.*"):
        path.unlink()  # a gap, which the rebuild must reproduce too
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings) as agent:
        for p in range(3):
            wait_for(lambda p=p: len(registry.segments("rebuilt", p)) == len([b for b in rotated_bases(tmp_path / "logs" / f"rebuilt-{p}") if b != lost or p != 1]), what=f"rebuilt-{p}")
        registered = registry.dump()
        store = agent.store
    for topic, partition in registry.partitions():
        registry.clear_partition(topic, partition)
    assert registry.dump() != registered
    report = rebuild_registry(store, registry)
    assert report.segments == sum(len(registry.segments("rebuilt", p)) for p in range(3)) and report.gaps == 1
    assert registry.dump() == registered


def test_remote_retention_deletes_registry_entries_then_objects_oldest_first(start_dev_broker, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    _fill(start_dev_broker, tmp_path, "aging", count=600)
    directory = tmp_path / "logs" / "aging-0"
    rotated = rotated_bases(directory)
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket, remote_retention={"interval_s": 3600})
    registry = registry_for(settings)
    with Agent(settings) as agent:
        wait_for(lambda: len(registry.segments("aging", 0)) == len(rotated), what="all registered")
        entries = registry.segments("aging", 0)
        keep_bytes = sum(e.size for e in entries[-2:])
        agent.retention.settings = agent.retention.settings.model_copy(update={"bytes": keep_bytes})
        deleted = agent.retention.run_once()
        assert [d.base_offset for d in deleted] == [e.base_offset for e in entries[:-2]]
        remaining = registry.segments("aging", 0)
        assert [e.base_offset for e in remaining] == [e.base_offset for e in entries[-2:]]
        assert registry.partition_info("aging", 0).earliest_offset == remaining[0].base_offset
        keys = {k for k, _ in agent.store.list_keys(agent.keyspace.partition_prefix("aging", 0))}
        for entry in deleted:
            assert not any(f"{entry.base_offset:020d}." in k for k in keys), "an object of a deleted segment was left dangling"
        for entry in remaining:
            for kind in entry.files:
                assert agent.keyspace.segment_key("aging", 0, entry.base_offset, FileKind(kind)) in keys
        # by time: everything older than now - 1 ms goes
        agent.retention.settings = agent.retention.settings.model_copy(update={"bytes": -1, "ms": 1})
        assert len(agent.retention.run_once(now_ms=int(time.time() * 1000) + 10_000)) == 2
        assert registry.segments("aging", 0) == []


def test_a_corrupt_segment_is_never_registered_and_blocks_nothing_silently(start_dev_broker, redis_server, s3_server, s3_bucket, tmp_path, caplog) -> None:
    _fill(start_dev_broker, tmp_path, "damaged")
    directory = tmp_path / "logs" / "damaged-0"
    rotated = rotated_bases(directory)
    bad = directory / f"{rotated[2]:020d}.log"
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    caplog.set_level(logging.ERROR, logger="tiered_kafka_agent")
    with Agent(settings) as agent:
        wait_for(lambda: agent.metrics.value("tiered_kafka_agent_upload_failures_total", topic="damaged") >= 2, what="repeated failures")
        # everything before the damaged segment is registered; nothing from it on: no offset is skipped
        assert [s.base_offset for s in registry.segments("damaged", 0)] == rotated[:2]
        assert registry.gaps("damaged", 0) == []
    assert any("CRC mismatch" in r.getMessage() for r in caplog.records)


def test_metrics_are_served_over_http(start_dev_broker, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _fill(start_dev_broker, tmp_path, "observed")
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket, metrics={"port": port})
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: len(registry.segments("observed", 0)) == len(rotated_bases(tmp_path / "logs" / "observed-0")), what="registered")
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
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
    assert 'tiered_kafka_agent_upload_lag_offsets{partition="0",topic="observed"} 0.0' in body


def test_a_segment_registered_by_another_leader_is_never_overwritten(start_dev_broker, redis_server, s3_server, s3_bucket, tmp_path, caplog) -> None:
    """Another leader rolled earlier and registered 0..(a batch boundary before b1); our first segment straddles it."""
    from tiered_kafka.format import batch_index
    from tiered_kafka.keyspace import Keyspace
    from tiered_kafka.registry import SegmentEntry

    _fill(start_dev_broker, tmp_path, "handover")
    directory = tmp_path / "logs" / "handover-0"
    rotated = rotated_bases(directory)
    cut = batch_index.build((directory / f"{0:020d}.log").read_bytes(), 0).holding(rotated[1] - 2).base_offset  # replicas share batches
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
    theirs = keyspace.segment_key("handover", 0, 0, FileKind.LOG)
    s3_server.client().put_object(Bucket=s3_bucket, Key=theirs, Body=b"the other leader's segment")
    registry.register(
        SegmentEntry(
            topic="handover", partition=0, base_offset=0, last_offset=cut - 1, object_key=theirs, size=26, record_count=cut,
            min_timestamp=0, max_timestamp=0, checksum="crc32c:00000000", leader_epoch=0, upload_time_ms=1, files=("log",),
        )
    )
    caplog.set_level(logging.ERROR, logger="tiered_kafka_agent")
    with Agent(settings):
        # our segment 0 has their key: its offsets past theirs go up as a tail segment of their own (two_leaders)
        wait_for(lambda: [s.first_offset for s in registry.segments("handover", 0)] == [0, cut, *rotated[1:]], what="the rest registered")
    assert s3_server.client().get_object(Bucket=s3_bucket, Key=theirs)["Body"].read() == b"the other leader's segment"
    assert registry.gaps("handover", 0) == []
    tail = registry.find("handover", 0, cut)
    assert tail is not None and 0 < tail.base_offset == tail.first_offset == cut and tail.last_offset == rotated[1] - 1
    body = s3_server.client().get_object(Bucket=s3_bucket, Key=tail.object_key)["Body"].read()
    assert body == (directory / f"{0:020d}.log").read_bytes()[-tail.size :]  # the batches from cut


def test_a_time_index_ending_in_a_zero_entry_does_not_stall(redis_server, s3_server, s3_bucket, tmp_path) -> None:
    """Records with CreateTime 0 make the roll's final time-index entry all zeros, legitimately."""
    from tests.support.batches import Rec, build_v2
    from tiered_kafka.format.log_config import LogConfig
    from tiered_kafka.format.log_writer import PartitionLog

    plog = PartitionLog.create(tmp_path / "logs" / "epoch-0", LogConfig(retention_ms=-1))
    for _ in range(3):
        plog.append(build_v2([Rec(b"k", b"v", 0)]))
        plog.roll()
    assert (tmp_path / "logs" / "epoch-0" / "00000000000000000000.timeindex").read_bytes() == b"\x00" * 12
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments("epoch", 0)] == [0, 1, 2], what="zero-timestamp segments registered")
    plog.close()
