"""Injected S3 failures: a proxy that resets or delays connections, or S3 down for a while."""

from __future__ import annotations

import time

import pytest

from tests.support.agent_env import broker_agent_settings, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.flaky_proxy import FlakyProxy
from tests.support.kafka_clients import create_topic, produce, value_for
from tiered_kafka.format.batch_index import build as build_batch_index
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration


@pytest.fixture
def flaky_s3(s3_server):
    host, port = s3_server.endpoint_url.removeprefix("http://").split(":")
    proxy = FlakyProxy(host, int(port))
    yield proxy
    proxy.close()


def _assert_complete(registry, agent, s3_server, bucket, directory, topic, partition) -> None:
    entries = registry.segments(topic, partition)
    assert entries[0].base_offset == 0
    assert all(a.last_offset + 1 == b.base_offset for a, b in zip(entries, entries[1:]))
    for entry in entries:
        for kind in entry.files:
            key = agent.keyspace.segment_key(topic, partition, entry.base_offset, FileKind(kind))
            body = s3_server.client().get_object(Bucket=bucket, Key=key)["Body"].read()
            if kind == FileKind.BATCHINDEX.value:  # built by the agent from the .log (format.batch_index)
                assert body == build_batch_index((directory / f"{entry.base_offset:020d}.log").read_bytes(), entry.base_offset).to_bytes()
                continue
            stem = entry.next_offset if kind == FileKind.SNAPSHOT.value else entry.base_offset  # the broker's {next base}.snapshot
            assert body == (directory / f"{stem:020d}.{kind}").read_bytes()


def test_a_fraction_of_failing_and_slow_s3_connections_loses_nothing(kafka_server, redis_server, s3_server, s3_bucket, flaky_s3) -> None:
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("flaky")
    create_topic(bootstrap, topic, 2, **{"segment.bytes": "40000"})
    flaky_s3.fail_ratio = 0.3
    flaky_s3.delay_s = 0.05
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket, s3={"endpoint_url": flaky_s3.endpoint_url}, upload={"max_attempts": 30})
    registry = registry_for(settings)
    with Agent(settings) as agent:
        produce(bootstrap, topic, [(i % 2, None, value_for(i)) for i in range(1200)], **{"linger.ms": 1, "batch.num.messages": 5})
        for p in range(2):
            directory = kafka_server.log_dir / f"{topic}-{p}"
            rotated = rotated_bases(directory)
            wait_for(lambda: [s.base_offset for s in registry.segments(topic, p)] == rotated, timeout_s=120, what=f"{topic}-{p}")
            _assert_complete(registry, agent, s3_server, s3_bucket, directory, topic, p)
        assert flaky_s3.failed > 0
        assert agent.metrics.value("tiered_kafka_agent_s3_request_errors_total") > 0


def test_s3_down_for_a_while_then_everything_catches_up(kafka_server, redis_server, s3_server, s3_bucket, flaky_s3) -> None:
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("outage")
    create_topic(bootstrap, topic, 1, **{"segment.bytes": "40000"})
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket, s3={"endpoint_url": flaky_s3.endpoint_url}, upload={"max_attempts": 3})
    registry = registry_for(settings)
    with Agent(settings) as agent:
        flaky_s3.down = True
        produce(bootstrap, topic, [(0, None, value_for(i)) for i in range(600)], **{"linger.ms": 1, "batch.num.messages": 5})
        directory = kafka_server.log_dir / f"{topic}-0"
        wait_for(lambda: agent.metrics.value("tiered_kafka_agent_upload_failures_total", topic=topic) >= 1, what="failures while S3 is down")
        assert registry.segments(topic, 0) == []
        time.sleep(1.0)
        flaky_s3.down = False
        rotated = rotated_bases(directory)
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated, timeout_s=120, what="catch-up after the outage")
        _assert_complete(registry, agent, s3_server, s3_bucket, directory, topic, 0)
        assert registry.gaps(topic, 0) == []
