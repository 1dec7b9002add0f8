"""Gateway replicas behind a real load balancer (HAProxy from Debian), issue 17.

Two ``tiered-kafka-gateway`` processes serve one cluster behind HAProxy (``HAProxyServer``:
health checks on ``/healthz``, ``retries`` + ``option redispatch``, ``retry-on`` a server dying
mid-request). The SDK (``TieredConsumer``, ``BulkReader``) and Spark read a topic of many small
segments (one plan request per segment at least) through the load balancer's URL, and one replica
is SIGKILLed once the read has made a third of those requests: the read still delivers every
offset exactly once, with the values produced, no error, and went on through the survivor.
(Spark asks the gateway on the driver, planning every range before its tasks fetch them from S3:
the kill lands in that planning.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway_env import gateway_settings
from tests.support.gateway_process import GatewayProcess, Replicas, replicas_behind_haproxy
from tests.support.kafka_clients import value_for
from tests.support.stack_env import TieredStack, create_tiered_topic, own_tiered_stack

pytestmark = pytest.mark.integration

TOPIC = "replicated"
PARTITIONS = 2
COUNT = 2400  # 1 KiB records, ~15 per 16 KB segment: ~75 segments per partition


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[TieredStack]:
    with own_tiered_stack(tmp_path_factory.mktemp("replicas"), redis_server, s3_server, "replicas") as tiered:
        create_tiered_topic(tiered, TOPIC, PARTITIONS, segment_bytes=16_000)
        tiered.produce(TOPIC, COUNT, PARTITIONS)
        tiered.wait_uploaded(TOPIC, PARTITIONS)
        yield tiered


@pytest.fixture
def replicas(stack: TieredStack, s3_server: Any) -> Iterator[Replicas]:
    with replicas_behind_haproxy(gateway_settings(stack.agent, s3_server, stack.bootstrap), 2) as running:
        yield running


def remote_ends(stack: TieredStack) -> dict[int, int]:
    """Partition -> one past its last remote offset (nothing is produced after the fixture)."""
    ends = {}
    for p in range(PARTITIONS):
        info = stack.registry.partition_info(TOPIC, p)
        assert info is not None and info.earliest_offset == 0
        ends[p] = info.latest_offset + 1
    return ends


def segment_count(stack: TieredStack) -> int:
    return sum(len(stack.registry.segments(TOPIC, p)) for p in range(PARTITIONS))


def check_exact(partition: int, offsets: list[int], values: list[bytes], end: int) -> None:
    """Offsets 0..end-1 once each, in order, with the values produced (record i went to i % 2)."""
    assert offsets == list(range(end)), f"partition {partition}: gap or duplicate"
    assert all(v == value_for(o * PARTITIONS + partition) for o, v in zip(offsets, values, strict=True)), f"partition {partition}: wrong value"


class KillMidRead(threading.Thread):
    """SIGKILLs ``victim`` once the load balancer has received ``after`` more requests."""

    def __init__(self, replicas: Replicas, victim: GatewayProcess, after: int) -> None:
        super().__init__(name="kill-mid-read", daemon=True)
        self.lb, self.victim, self.after = replicas.lb, victim, after
        self.start_count = self.lb.requests_total()
        self.killed_at: int | None = None
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.is_set():
            sent = self.lb.requests_total() - self.start_count
            if sent >= self.after:
                self.victim.kill()
                self.killed_at = sent
                return
            time.sleep(0.005)

    def finish(self) -> tuple[int, int]:
        """(requests when the replica was killed, requests of the whole read)."""
        self.done.set()
        self.join(10)
        assert self.killed_at is not None, f"the read made fewer than {self.after} gateway requests: the replica was never killed"
        return self.killed_at, self.lb.requests_total() - self.start_count


def assert_killed_mid_read(replicas: Replicas, killer: KillMidRead) -> None:
    killed_at, total = killer.finish()
    assert total > killed_at, f"no request after the kill ({killed_at} of {total}): not a kill mid-read"
    assert killer.victim.proc.poll() is not None
    states = replicas.lb.wait_servers(up=1, timeout_s=10)  # the health checks took the dead replica out
    assert states == {"gw0": "DOWN", "gw1": "UP"}, states


def test_haproxy_balances_over_both_replicas(replicas: Replicas, stack: TieredStack) -> None:
    """Round robin: both replicas answer (each one's own plan count grows), the LB counts every request."""
    from tiered_kafka.client.gateway import GatewayClient

    before = replicas.lb.requests_total()
    with GatewayClient(replicas.url, stack.cluster) as client:
        for offset in range(0, 40):
            assert client.plan(TOPIC, 0, offset, 4096).segment_base_offset <= offset
    assert replicas.lb.requests_total() - before == 40
    for gateway in replicas.gateways:  # each replica's own /metrics, not through the load balancer
        text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
        plans = [line for line in text.splitlines() if line.startswith("tiered_kafka_gateway_request_seconds_count{") and "/plan" in line]
        assert plans and float(plans[0].rsplit(" ", 1)[1]) == 20, (gateway.port, plans)


def test_tiered_consumer_reads_through_the_lb_while_a_replica_is_killed(replicas: Replicas, stack: TieredStack) -> None:
    from confluent_kafka import TopicPartition

    from tiered_kafka.consumer import TieredConsumer

    ends = remote_ends(stack)
    config = stack.consumer_config("REMOTE_ONLY", **{"tiered.gateway.url": replicas.url})  # a plan per (16 KB) segment at least
    consumer = TieredConsumer(config)
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: dict[int, tuple[list[int], list[bytes]]] = {p: ([], []) for p in range(PARTITIONS)}
    killer = KillMidRead(replicas, replicas.gateways[0], after=segment_count(stack) // 3)
    try:
        deadline = time.monotonic() + 180
        while any(len(got[p][0]) < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, {p: len(got[p][0]) for p in got}
            for message in consumer.consume(200, 0.5):
                assert message.error() is None, message.error()
                got[message.partition()][0].append(message.offset())
                got[message.partition()][1].append(message.value())
    finally:
        consumer.close()
    assert_killed_mid_read(replicas, killer)
    for p in range(PARTITIONS):
        check_exact(p, *got[p], ends[p])


def test_bulk_reader_reads_through_the_lb_while_a_replica_is_killed(replicas: Replicas, stack: TieredStack) -> None:
    from tiered_kafka.bulk import MIN_PLAN_BYTES, BulkReader

    ends = remote_ends(stack)
    killer = KillMidRead(replicas, replicas.gateways[0], after=segment_count(stack) // 3)
    with BulkReader(replicas.url, stack.cluster, memory_budget=2 * MIN_PLAN_BYTES, parallelism=2) as reader:
        table = reader.read_table(TOPIC)
        assert reader.gaps == [] and reader.empty_partitions == []
    assert_killed_mid_read(replicas, killer)
    for p in range(PARTITIONS):
        rows = table.filter(table["partition"].to_numpy() == p)
        check_exact(p, rows["offset"].to_pylist(), rows["value"].to_pylist(), ends[p])


def test_spark_reads_through_the_lb_while_a_replica_is_killed(replicas: Replicas, stack: TieredStack, spark: Any) -> None:
    ends = remote_ends(stack)
    options = {"tiered.gateway.url": replicas.url, "tiered.cluster": stack.cluster, "subscribe": TOPIC}
    killer = KillMidRead(replicas, replicas.gateways[0], after=segment_count(stack) // 3)
    rows = spark.read.format("tiered-kafka").options(**options).load().select("partition", "offset", "value").collect()
    assert_killed_mid_read(replicas, killer)
    for p in range(PARTITIONS):
        mine = sorted((r["offset"], bytes(r["value"])) for r in rows if r["partition"] == p)
        check_exact(p, [o for o, _ in mine], [v for _, v in mine], ends[p])
