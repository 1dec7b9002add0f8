"""The agent end to end: segments rolled by Apache Kafka (the session's shared KRaft broker) reach S3 and the registry."""

from __future__ import annotations

import pytest

from tests.support.agent_env import broker_agent_settings, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.kafka_clients import create_topic, produce, value_for
from tiered_kafka.format.checkpoints import parse_offset_wm
from tiered_kafka.format.batch_index import build as build_batch_index
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration


def test_rolled_segments_are_uploaded_and_registered(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("orders")
    create_topic(bootstrap, topic, 2, **{"segment.bytes": "50000"})
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings) as agent:
        produce(bootstrap, topic, [(i % 2, str(i).encode(), value_for(i)) for i in range(1000)], **{"linger.ms": 1, "batch.num.messages": 5})
        for p in range(2):
            directory = kafka_server.log_dir / f"{topic}-{p}"
            rotated = rotated_bases(directory)
            assert len(rotated) >= 5
            wait_for(lambda: [s.base_offset for s in registry.segments(topic, p)] == rotated, what=f"{topic}-{p} registered")
            entries = registry.segments(topic, p)
            # contiguous: every rotated offset is registered exactly once
            assert entries[0].base_offset == 0
            assert all(a.last_offset + 1 == b.base_offset for a, b in zip(entries, entries[1:]))
            for entry in entries:
                local = (directory / f"{entry.base_offset:020d}.log").read_bytes()
                remote = s3_server.client().get_object(Bucket=s3_bucket, Key=entry.object_key)["Body"].read()
                assert remote == local
                # the broker's snapshot at roll is named by the next segment's base offset (Kafka's
                # UnifiedLog.roll); it ships with this segment, under this segment's stem
                snapshot = directory / f"{entry.next_offset:020d}.snapshot"
                assert snapshot.exists()
                assert entry.files == ("log", "index", "timeindex", "snapshot", "batchindex")
                key = agent.keyspace.segment_key(topic, p, entry.base_offset, FileKind.BATCHINDEX)  # format.batch_index, from the CRC scan
                assert s3_server.client().get_object(Bucket=s3_bucket, Key=key)["Body"].read() == build_batch_index(local, entry.base_offset).to_bytes()
                # the registry keeps no sparse plan index (layout 2, issue 34): the gateway derives it from this file
                assert entry.sparse_index is None
                key = agent.keyspace.segment_key(topic, p, entry.base_offset, FileKind.SNAPSHOT)
                assert s3_server.client().get_object(Bucket=s3_bucket, Key=key)["Body"].read() == snapshot.read_bytes()
                assert (entry.aborted_txns, entry.control_records) == (0, 0)
                assert entry.size == len(local)
                batches = list(iter_batches(local))
                assert (entry.last_offset, entry.record_count) == (batches[-1].last_offset, sum(b.record_count for b in batches))
                for kind in (FileKind.INDEX, FileKind.TIMEINDEX):
                    key = agent.keyspace.segment_key(topic, p, entry.base_offset, kind)
                    body = s3_server.client().get_object(Bucket=s3_bucket, Key=key)["Body"].read()
                    assert body == (directory / f"{entry.base_offset:020d}.{kind.value}").read_bytes()
            wm = s3_server.client().get_object(Bucket=s3_bucket, Key=agent.keyspace.offset_wm_key(topic, p))["Body"].read()
            assert parse_offset_wm(wm) == rotated[-1]
            info = registry.partition_info(topic, p)
            assert (info.earliest_offset, info.latest_offset) == (0, entries[-1].last_offset)
            assert registry.coverage_start(topic, p).offset == 0
            coverage_key = agent.keyspace.coverage_start_key(topic, p)
            assert s3_server.client().get_object(Bucket=s3_bucket, Key=coverage_key)["Body"].read() == (
                f'{{"observed_ms": {registry.coverage_start(topic, p).observed_ms}, "offset": 0}}'.encode()
            )
        assert agent.metrics.value("tiered_kafka_agent_segments_uploaded_total", topic=topic) == sum(
            len(rotated_bases(kafka_server.log_dir / f"{topic}-{p}")) for p in range(2)
        )
        assert agent.metrics.value("tiered_kafka_agent_gaps_total", topic=topic) == 0



def test_segments_passed_without_registration_are_forgotten(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """offset.wm lost: a new agent passes the registered segments again ("nothing new"). Every branch
    that finishes with a segment forgets when it was first seen, so a long-running agent keeps
    nothing of them (only registrations did before)."""
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("orders")
    create_topic(bootstrap, topic, 1, **{"segment.bytes": "50000"})
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    produce(bootstrap, topic, [(0, str(i).encode(), value_for(i)) for i in range(500)], **{"linger.ms": 1, "batch.num.messages": 5})
    rotated = rotated_bases(kafka_server.log_dir / f"{topic}-0")
    assert len(rotated) >= 3
    with Agent(settings) as agent:
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated, what=f"{topic}-0 registered")
        wm_key = agent.keyspace.offset_wm_key(topic, 0)
        wait_for(lambda: agent._uploaders[f"{topic}-0"].offsets.watermark == rotated[-1], what="offset.wm written")
    s3_server.client().delete_object(Bucket=s3_bucket, Key=wm_key)
    with Agent(settings) as again:
        wait_for(lambda: f"{topic}-0" in again._uploaders and again._uploaders[f"{topic}-0"].offsets.watermark == rotated[-1], what=f"{topic}-0 passed again")
        uploader = again._uploaders[f"{topic}-0"]
        assert parse_offset_wm(s3_server.client().get_object(Bucket=s3_bucket, Key=wm_key)["Body"].read()) == rotated[-1]
        assert [b for b in uploader._first_seen if b <= rotated[-1]] == []
        assert again.metrics.value("tiered_kafka_agent_segments_uploaded_total", topic=topic) == 0  # nothing registered twice

