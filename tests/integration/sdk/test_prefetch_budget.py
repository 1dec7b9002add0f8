"""The prefetch's memory bound with many partitions: 500 partitions read at once through the real
gateway and SeaweedFS stay within ``tiered.prefetch.max.bytes``'s data budget plus
``OVERDRAFT_BYTES`` (consumer/prefetch.py), where a reader holding nothing used to get one range
each whatever the budget.

What is asserted is the budget's own accounting (every byte reserved for a range in flight or for
decoded records not yet taken), which is deterministic: with the old rule its peak would be several
times the bound (checked below, so the test can fail). The process's RSS is printed beside it for
information only: on a shared machine it also holds the in-process gateway, the allocator's slack
and whatever other threads do, so a bound on it would test the machine, not the prefetch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, registry_for, wait_for
from tests.support.batches import Rec, build_v2
from tests.support.stack_env import gateway_server
from tiered_kafka.client.columnar_read import decode_planned
from tiered_kafka.consumer.prefetch import IN_FLIGHT_FACTOR, OVERDRAFT_BYTES, THREAD_OVERHEAD, ByteBudget, ChunkKind, RemoteReader
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration

TOPIC = "wide"
PARTITIONS = 500
BATCHES, PER_BATCH, VALUE_BYTES = 6, 5, 300  # per partition: one uploaded segment of ~10 KB
LIMIT = 1 * 2**20  # the data budget under test
RECORD_OVERHEAD = 240  # what a decoded record costs beyond its key and value (as the consumer counts)


def write_wide_topic(log_dir: Path) -> None:
    """PARTITIONS partitions, each one rotated segment of BATCHES batches plus an active one."""
    for p in range(PARTITIONS):
        plog = PartitionLog.create(log_dir / f"{TOPIC}-{p}", LogConfig(retention_ms=-1))
        for b in range(BATCHES):
            plog.append(build_v2([Rec(f"k{p}-{b}-{i}".encode(), bytes([65 + p % 26]) * VALUE_BYTES, 1_700_000_000_000 + b, []) for i in range(PER_BATCH)]))
        plog.roll()
        plog.append(build_v2([Rec(b"tail", b"t", 1_700_000_001_000, [])]))
        plog.close()


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def convert(_topic: str, _partition: int, data: bytes, planned: Any, object_key: str) -> tuple[list[int], int]:
    """A fetched range as its offsets, and what it would hold: its bytes, and its records."""
    records = decode_planned(data, planned, object_key=object_key).records
    return records.column("offset").to_pylist(), len(data) + records.column("key").nbytes + records.column("value").nbytes + RECORD_OVERHEAD * records.num_rows


class CountingPool(ThreadPoolExecutor):
    """The fetch pool, counting the ranges submitted and not yet fetched and decoded."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers, thread_name_prefix="prefetch-test")
        self._lock = threading.Lock()
        self.outstanding = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            self.outstanding += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future[Any]) -> None:
        with self._lock:
            self.outstanding -= 1


def test_500_partitions_stay_within_the_budget_plus_the_overdraft(tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    write_wide_topic(tmp_path / "logs")
    checkpoint_high_watermarks(tmp_path / "logs")  # no broker: everything written is committed
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: all(registry.segments(TOPIC, p) for p in range(PARTITIONS)), timeout_s=300, what="500 partitions uploaded")
    expected_last = BATCHES * PER_BATCH - 1
    segment_bytes = registry.segments(TOPIC, 0)[0].size
    # the old rule (one range per reader holding nothing) would reserve this much at once: the test can fail
    assert PARTITIONS * segment_bytes * IN_FLIGHT_FACTOR > 2 * (LIMIT + OVERDRAFT_BYTES)

    with gateway_server(settings, s3_server) as url, GatewayClient(url, settings.cluster, max_connections=8) as client:
        budget = ByteBudget(LIMIT)
        wake = threading.Event()
        pool = CountingPool(4)
        planned: set[int] = set()  # partitions whose first plan came back: their reader then reserves
        plan = client.plan

        def counted_plan(topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
            answer = plan(topic, partition, *args, **kwargs)
            planned.add(partition)
            return answer

        client.plan = counted_plan  # type: ignore[method-assign]
        rss_peak = [0]
        done = threading.Event()

        def sample_rss() -> None:
            while not done.is_set():
                rss_peak[0] = max(rss_peak[0], rss_bytes())
                time.sleep(0.05)

        baseline = rss_bytes()
        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        readers = [
            RemoteReader(client, TOPIC, p, 0, budget=budget, pool=pool, convert=convert, plan_max_bytes=2**20, tail=False, poll_interval_s=0.1, wake=wake)
            for p in range(PARTITIONS)
        ]
        # a slow application: nothing is taken until the readers stop reserving, that is until every
        # reader has its first plan (and so has reserved, or waits for the budget), no range is being
        # fetched or decoded, and the reservations did not move between two looks
        last = [-1]

        def settled() -> bool:
            quiet = len(planned) == PARTITIONS and pool.outstanding == 0
            still, last[0] = quiet and budget.used == last[0], budget.used if quiet else -1
            return still

        wait_for(settled, timeout_s=180, what="every reader's first plan and reservation, with no range in flight")
        assert budget.used > LIMIT // 2, f"the readers reserved only {budget.used} bytes: the budget was never under pressure"
        next_offset = {p: 0 for p in range(PARTITIONS)}
        ended: set[int] = set()
        deadline = time.monotonic() + 240
        try:
            while len(ended) < PARTITIONS:
                assert time.monotonic() < deadline, f"only {len(ended)} partitions read to their end"
                wake.clear()
                progressed = False
                for p, reader in enumerate(readers):  # the application takes every partition's records in turn
                    chunk = reader.head()
                    if p in ended or chunk is None:
                        continue
                    reader.pop()
                    progressed = True
                    if chunk.kind is ChunkKind.END:
                        ended.add(p)
                        continue
                    assert chunk.kind is ChunkKind.DATA and chunk.future is not None, (p, chunk.kind, chunk.error)
                    offsets = chunk.future.result()
                    assert offsets == list(range(next_offset[p], next_offset[p] + len(offsets))), p
                    next_offset[p] += len(offsets)
                    reader.release(chunk)
                if not progressed:
                    wake.wait(0.05)
        finally:
            done.set()
            for reader in readers:
                reader.stop()
            pool.shutdown(wait=True)
            for reader in readers:
                reader.join(5)
        sampler.join(1)

    assert next_offset == {p: expected_last + 1 for p in range(PARTITIONS)}  # nothing lost or repeated
    assert budget.used == 0
    assert budget.peak <= LIMIT + OVERDRAFT_BYTES, budget.peak
    # for information (see the module docstring): the RSS also pays the fetch threads (THREAD_OVERHEAD
    # each), one planner thread per partition, the in-process gateway and the allocator's slack
    growth = rss_peak[0] - baseline
    print(f"reserved peak {budget.peak} bytes (bound {LIMIT + OVERDRAFT_BYTES}); RSS growth {growth} bytes "
          f"(fetch threads' allowance {4 * THREAD_OVERHEAD})")  # fmt: skip
