"""The agent follows partition leadership through ZooKeeper: away stops uploads, back resumes them."""

from __future__ import annotations

import time

import pytest

from tests.support.agent_env import agent_settings, registry_for, rotated_bases, wait_for
from tests.support.kafka_clients import create_topic, produce, value_for
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration


def test_leadership_moves_away_and_back(start_dev_broker, zk_chroot, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    broker = start_dev_broker(tmp_path / "logs", zookeeper_connect=zk_chroot, node_id=0)
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, "moving", 2, **{"segment.bytes": "40000"})
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket, leadership={"mode": "zookeeper", "zookeeper_connect": zk_chroot})
    registry = registry_for(settings)

    def registered(p: int) -> list[int]:
        return [s.base_offset for s in registry.segments("moving", p)]

    def produce_some(start: int) -> None:
        produce(bootstrap, "moving", [(i % 2, None, value_for(i)) for i in range(start, start + 400)], **{"linger.ms": 1, "batch.num.messages": 5})

    with Agent(settings) as agent:
        wait_for(lambda: agent.led_partitions() == ["moving-0", "moving-1"], what="both partitions led")
        produce_some(0)
        for p in range(2):
            wait_for(lambda p=p: registered(p) == rotated_bases(tmp_path / "logs" / f"moving-{p}"), what=f"moving-{p} registered")

        broker.broker.zookeeper.set_partition_leader("moving", 1, 5)  # another broker leads partition 1 now
        wait_for(lambda: agent.led_partitions() == ["moving-0"], what="partition 1 dropped")
        before = registered(1)
        produce_some(400)
        wait_for(lambda: registered(0) == rotated_bases(tmp_path / "logs" / "moving-0"), what="partition 0 keeps uploading")
        time.sleep(1.0)  # long enough for several rescans: nothing may be uploaded for partition 1 meanwhile
        assert registered(1) == before
        assert rotated_bases(tmp_path / "logs" / "moving-1") != before

        broker.broker.zookeeper.set_partition_leader("moving", 1, 0)  # and back
        wait_for(lambda: agent.led_partitions() == ["moving-0", "moving-1"], what="partition 1 led again")
        wait_for(lambda: registered(1) == rotated_bases(tmp_path / "logs" / "moving-1"), what="partition 1 caught up")
        entries = registry.segments("moving", 1)
        assert entries[0].base_offset == 0
        assert all(a.last_offset + 1 == b.base_offset for a, b in zip(entries, entries[1:]))
        assert registry.gaps("moving", 1) == []
