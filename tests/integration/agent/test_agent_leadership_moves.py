"""The agent follows partition leadership through ZooKeeper: away stops uploads, back resumes them.

Real components: two ZooKeeper-mode Kafka brokers (3.9) whose controller moves the leadership (a
reassignment, then a preferred-leader election), Redis, SeaweedFS. The agent runs beside broker 1
(its log.dir, its broker id) and sees the leadership in the state znodes Kafka's controller writes.
"""

from __future__ import annotations

import time

import pytest

from tests.support.agent_env import agent_settings, only_topics, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.kafka_clients import produce, value_for
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration


def test_leadership_moves_away_and_back(zookeeper_kafka, redis_server, s3_server, s3_bucket) -> None:
    broker = zookeeper_kafka.brokers[1]
    topic = unique_topic("moving")
    zookeeper_kafka.create_topic(topic, [[1, 2], [1, 2]], **{"segment.bytes": "40000"})
    leadership = {"mode": "zookeeper", "zookeeper_connect": zookeeper_kafka.zookeeper_connect}
    settings = agent_settings(broker.log_dir, redis_server, s3_server, s3_bucket, broker_id=1, leadership=leadership, topics=only_topics(topic))
    registry = registry_for(settings)
    directory = [broker.log_dir / f"{topic}-{p}" for p in range(2)]

    def registered(p: int) -> list[int]:
        return [s.base_offset for s in registry.segments(topic, p)]

    def produce_some(start: int) -> None:
        produce(zookeeper_kafka.bootstrap_servers, topic, [(i % 2, None, value_for(i)) for i in range(start, start + 400)], **{"linger.ms": 1, "batch.num.messages": 5})

    with Agent(settings) as agent:
        wait_for(lambda: agent.led_partitions() == [f"{topic}-0", f"{topic}-1"], what="both partitions led")
        produce_some(0)
        for p in range(2):
            wait_for(lambda p=p: registered(p) == rotated_bases(directory[p]), what=f"{topic}-{p} registered")

        assert zookeeper_kafka.move(topic, 1, [2, 1])["leader"] == 2  # broker 2 leads partition 1 now; broker 1 follows
        wait_for(lambda: agent.led_partitions() == [f"{topic}-0"], what="partition 1 dropped")
        before = registered(1)
        produce_some(400)  # broker 1's replica of partition 1 grows (and rolls) as a follower
        wait_for(lambda: registered(0) == rotated_bases(directory[0]), what="partition 0 keeps uploading")
        wait_for(lambda: rotated_bases(directory[1]) != before, what="the follower rolled")
        time.sleep(1.0)  # long enough for several rescans: nothing may be uploaded for partition 1 meanwhile
        assert registered(1) == before

        assert zookeeper_kafka.move(topic, 1, [1, 2])["leader"] == 1  # and back
        wait_for(lambda: agent.led_partitions() == [f"{topic}-0", f"{topic}-1"], what="partition 1 led again")
        wait_for(lambda: registered(1) == rotated_bases(directory[1]), what="partition 1 caught up")
        entries = registry.segments(topic, 1)
        assert entries[0].base_offset == 0
        assert all(a.last_offset + 1 == b.base_offset for a, b in zip(entries, entries[1:]))
        assert registry.gaps(topic, 1) == []
