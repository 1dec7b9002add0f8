"""GETs per plan (#15): TieredConsumer sizes its plans by the prefetch budget and reads each plan's
bytes with one GET, counted on the real SeaweedFS through the gateway.

The gateway's own preferred range size is its smallest here (``range_bytes`` 4 KiB): a plan cut
that way would take a GET per batch (the test can fail). The SDK asks its plans in as few ranges
as the batches allow (``GatewayClient.plan``'s ``range_bytes``) and merges what still touches
(``coalesce_ranges``). The GETs are counted by an event hook on the consumer's S3 connection pool
(every request sent to SeaweedFS), the plans by wrapping the gateway client's ``plan``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, registry_for, wait_for
from tests.support.batches import Rec, build_v2
from tests.support.stack_env import gateway_server
from tiered_kafka.consumer import TieredConsumer
from tiered_kafka.consumer.prefetch import THREAD_OVERHEAD, default_plan_bytes
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration

TOPIC = "gets"
BATCHES, PER_BATCH, VALUE_BYTES = 400, 5, 1000  # one uploaded segment of ~2 MB
RANGE_BYTES = 4096


def write_topic(log_dir: Path) -> None:
    plog = PartitionLog.create(log_dir / f"{TOPIC}-0", LogConfig(retention_ms=-1))
    for b in range(BATCHES):
        plog.append(build_v2([Rec(f"k{b}-{i}".encode(), bytes([65 + b % 26]) * VALUE_BYTES, 1_700_000_000_000 + b, []) for i in range(PER_BATCH)]))
    plog.roll()
    plog.append(build_v2([Rec(b"tail", b"t", 1_700_000_001_000, [])]))
    plog.close()


def test_a_plan_of_the_budgets_size_is_fetched_with_one_get(tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    write_topic(tmp_path / "logs")
    checkpoint_high_watermarks(tmp_path / "logs")  # no broker: everything written is committed
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: bool(registry.segments(TOPIC, 0)), timeout_s=120, what="the segment uploaded")
    segment_bytes = registry.segments(TOPIC, 0)[0].size
    last = BATCHES * PER_BATCH - 1
    with gateway_server(settings, s3_server, range_bytes=RANGE_BYTES) as url:
        # one fetch thread and 3 MiB of data: plans of 3 MiB / (2 * IN_FLIGHT_FACTOR) = 512 KiB
        config = {"tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": url, "tiered.cluster": settings.cluster,
                  "tiered.prefetch.parallelism": 1, "tiered.prefetch.max.bytes": THREAD_OVERHEAD + 3 * 2**20,
                  "isolation.level": "read_uncommitted"}  # fmt: skip
        plan_size = default_plan_bytes(config)
        assert plan_size == 512 * 1024
        consumer = TieredConsumer(config)
        gateway = consumer._gateway  # noqa: SLF001 (the test counts what goes over the consumer's own connections)
        assert gateway is not None
        gets: list[str] = []
        # presigned GETs go through the client's direct transport (http.client into pooled memory) and,
        # where it does not answer (https, the pure-Python reference), through httpx: count both
        gateway._s3.event_hooks["request"].append(lambda request: gets.append(request.headers["range"]))  # noqa: SLF001
        direct = gateway._direct  # noqa: SLF001
        if direct is not None:
            send = direct.get

            def counted_get(url: str, headers: dict[str, str], timeout_s: float | None) -> Any:
                answered = send(url, headers, timeout_s)
                if answered is not None:
                    gets.append(headers["Range"])
                return answered

            direct.get = counted_get  # type: ignore[method-assign]
        plans: list[tuple[int, int]] = []  # (max_bytes asked, ranges planned)
        plan = gateway.plan

        def counted_plan(topic: str, partition: int, offset: int, max_bytes: int, **kwargs: Any) -> Any:
            answer = plan(topic, partition, offset, max_bytes, **kwargs)
            plans.append((max_bytes, len(answer.ranges)))
            return answer

        gateway.plan = counted_plan  # type: ignore[method-assign]
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            offsets: list[int] = []
            wait_for(lambda: offsets.extend(m.offset() for m in consumer.consume(500, 0.2)) or len(offsets) > last, timeout_s=60, what="every record")
        finally:
            consumer.close()
    assert offsets[: last + 1] == list(range(last + 1))
    assert plans and all(max_bytes == plan_size for max_bytes, _ in plans), plans  # sized by the budget, every one
    # the segment in plans of the budget's size (the last one shorter), each in one GET
    assert len(plans) == -(-segment_bytes // plan_size), (segment_bytes, plans)
    assert len(gets) == len(plans), f"{len(gets)} GETs for {len(plans)} plans: {gets}"
