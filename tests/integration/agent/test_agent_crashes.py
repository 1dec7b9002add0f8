"""SIGKILL the agent at each step of an upload, restart it, and prove nothing is missing."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.agent_env import AgentProcess, broker_agent_settings, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.kafka_clients import create_topic, produce
from tiered_kafka.format.checkpoints import parse_offset_wm
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.format.batch_index import build as build_batch_index
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka_agent.faults import STEPS

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_loses_nothing(step: str, kafka_server, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("events")
    create_topic(bootstrap, topic, 1, **{"segment.bytes": str(6 * MIB)})
    produce(bootstrap, topic, [(0, None, os.urandom(1024)) for _ in range(15_000)])  # ~15 MiB: two rotated 6 MiB segments
    directory = kafka_server.log_dir / f"{topic}-0"
    rotated = rotated_bases(directory)
    assert len(rotated) == 2

    settings = broker_agent_settings(
        kafka_server, [topic], redis_server, s3_server, s3_bucket, s3={"multipart_threshold_bytes": 5 * MIB, "multipart_chunk_bytes": 5 * MIB}
    )
    registry = registry_for(settings)
    crashed = AgentProcess(settings, tmp_path / "agent.properties", crash_at=step)
    try:
        assert crashed.wait(120) == -signal.SIGKILL, crashed.output()[-3000:]
    finally:
        crashed.stop()

    restarted = AgentProcess(settings, tmp_path / "agent.properties")
    try:
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated, timeout_s=120, what="every rotated segment registered")
    finally:
        restarted.stop()

    keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
    client = s3_server.client()
    entries = registry.segments(topic, 0)
    assert entries[0].base_offset == 0
    assert all(a.last_offset + 1 == b.base_offset for a, b in zip(entries, entries[1:])), "an offset is missing from the registry"
    for entry in entries:
        for kind in entry.files:
            key = keyspace.segment_key(topic, 0, entry.base_offset, FileKind(kind))
            remote = client.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
            # the producer snapshot of a segment is the one the broker named by the next base offset
            if kind == FileKind.BATCHINDEX.value:  # built by the agent from the .log (format.batch_index)
                assert remote == build_batch_index((directory / f"{entry.base_offset:020d}.log").read_bytes(), entry.base_offset).to_bytes()
                continue
            stem = entry.next_offset if kind == FileKind.SNAPSHOT.value else entry.base_offset
            assert remote == (directory / f"{stem:020d}.{kind}").read_bytes(), key
    wm = client.get_object(Bucket=s3_bucket, Key=keyspace.offset_wm_key(topic, 0))["Body"].read()
    assert parse_offset_wm(wm) == rotated[-1]
    assert registry.gaps(topic, 0) == []
    assert registry.coverage_start(topic, 0).offset == 0
