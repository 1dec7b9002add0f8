"""The agent uploads a rotated segment only once its end is at or below the high watermark Kafka
checkpointed in the log.dir (``replication-offset-checkpoint``), and the broker rewriting that
file wakes it: no rescan needed (the rescan interval here is a minute)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, registry_for, wait_for
from tests.support.transactions import write_transactional_log
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration


def test_segments_wait_for_the_checkpointed_high_watermark_and_its_rewrite_wakes_the_agent(redis_server, s3_server, s3_bucket, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    write_transactional_log(log_dir / "txn-0").close()  # rotated 0 (0..13) and 14 (14..21), active 22
    settings = agent_settings(log_dir, redis_server, s3_server, s3_bucket, upload={"rescan_interval_s": 60})
    registry = registry_for(settings)
    with Agent(settings) as agent:

        def waiting() -> float:
            return agent.metrics.value("tiered_kafka_agent_segments_awaiting_high_watermark", topic="txn", partition="0")

        wait_for(lambda: waiting() == 2, timeout_s=30, what="both rotated segments waiting: no checkpoint yet")
        checkpoint_high_watermarks(log_dir, [], offsets={("txn", 0): 10, ("other", 0): 99})
        checkpoint_high_watermarks(log_dir, [], offsets={("txn", 0): 13})  # inside segment 0: still nothing
        time.sleep(1.0)  # (a wrong upload would have had time: the wake is immediate)
        assert registry.coverage("txn", 0).next_offset == -1 and waiting() == 2

        checkpoint_high_watermarks(log_dir, [], offsets={("txn", 0): 14})  # segment 0's end (woken by the rewrite: not the minute's rescan)
        wait_for(lambda: registry.coverage("txn", 0).next_offset == 14, timeout_s=30, what="segment 0 registered")
        wait_for(lambda: waiting() == 1, timeout_s=10, what="segment 14 still waiting")

        checkpoint_high_watermarks(log_dir, [], offsets={("txn", 0): 23})
        wait_for(lambda: registry.coverage("txn", 0).next_offset == 22, timeout_s=30, what="segment 14 registered")
        wait_for(lambda: waiting() == 0, timeout_s=10, what="nothing waiting")
    assert [(e.base_offset, e.last_offset) for e in registry.segments("txn", 0)] == [(0, 13), (14, 21)]
    assert registry.gaps("txn", 0) == []
