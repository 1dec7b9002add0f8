"""A new leader waiting for the partition's previous uploader never delays other partitions.

The previous uploader is held in its segment in flight by taking every upload slot (the agent's
real semaphore), against the real Redis and S3; leadership is the static watcher, whose ``set``
runs the agent's leadership callback in the caller's thread, so a callback that waits shows up
as a ``set`` that does not return.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, registry_for, rotated_bases, wait_for
from tests.support.fixtures import FIXTURES
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.leadership import Leadership, StaticLeadership, TopicPartition

pytestmark = pytest.mark.integration

SLOW = TopicPartition("slow", 0)
OTHER = TopicPartition("other", 0)


def _copy_partition(fixture: str, log_dir: Path, name: str) -> Path:
    target = log_dir / name
    shutil.copytree(FIXTURES / fixture, target)
    checkpoint_high_watermarks(log_dir, [target])
    return target


def test_a_waiting_new_leader_does_not_delay_another_partition(redis_server, s3_server, s3_bucket, tmp_path) -> None:
    log_dir = tmp_path / "logs"
    slow_dir = _copy_partition("test_topic_a-0", log_dir, "slow-0")
    other_dir = _copy_partition("test_topic_a-1", log_dir, "other-0")
    settings = agent_settings(log_dir, redis_server, s3_server, s3_bucket, upload={"max_concurrent_segments": 1, "rescan_interval_s": 120})
    registry = registry_for(settings)
    # (a static watcher passed in: the agent's directory rescan, which would re-add slow-0, is off
    # for the test's two minutes of rescan interval)
    leadership = StaticLeadership({SLOW: Leadership(leader_epoch=1)})
    agent = Agent(settings, leadership=leadership)
    agent.upload_slots.acquire()  # the only slot: slow-0's first segment stays in flight
    released = False
    try:
        agent.start()
        first = agent._uploaders["slow-0"]
        wait_for(lambda: len(first._pool._threads) > 0, what="slow-0 has a segment in flight")  # a pool thread: submitted

        leadership.set({})  # slow-0 moves away: its uploader finishes the segment in flight (held)
        assert agent.led_partitions() == []
        assert first.thread.is_alive()

        # slow-0 comes back while its old uploader is still busy, and other-0 arrives at once
        done = threading.Event()
        changer = threading.Thread(target=lambda: (leadership.set({SLOW: Leadership(2), OTHER: Leadership(1)}), done.set()), daemon=True)
        changer.start()
        assert done.wait(5), "the leadership change waited for slow-0's previous uploader"
        assert agent.led_partitions() == ["other-0", "slow-0"]
        second = agent._uploaders["slow-0"]
        assert second is not first and second.waiting_for_predecessor, "two uploaders would run on slow-0 at once"
        assert first.thread.is_alive()

        agent.upload_slots.release()
        released = True
        wait_for(lambda: not first.thread.is_alive(), timeout_s=30, what="the previous uploader ends")
        for name, directory in (("slow", slow_dir), ("other", other_dir)):
            wait_for(lambda n=name, d=directory: [s.base_offset for s in registry.segments(n, 0)] == rotated_bases(d), timeout_s=30, what=f"{name}-0 uploaded")
        assert not second.waiting_for_predecessor
        assert registry.gaps("slow", 0) == [] and registry.gaps("other", 0) == []
    finally:
        if not released:
            agent.upload_slots.release()
        agent.stop()
