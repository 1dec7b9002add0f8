"""Every registry write script waits for a replica's acknowledgement on a Redis Cluster (``_replicated``),
and a replica that does not acknowledge (stopped with SIGSTOP) costs a warning, not the write."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.cluster.conftest import segment_entry
from tiered_kafka.registry import Registry, connect
from tiered_kafka.registry._replicated import REPLICA_WAIT_MS

pytestmark = pytest.mark.integration

TOPIC = "acks"


def wait_calls(redis_cluster: Any, address: str) -> int:
    stats = redis_cluster.command(redis_cluster.node_at(address), "INFO", "commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


WRITES: dict[str, Callable[[Registry], Any]] = {
    "register": lambda r: r.register(segment_entry(TOPIC, 0, 9)),
    "register_many": lambda r: r.register_many([segment_entry(TOPIC, 0, 9)]),  # bulk: one WAIT per master's batch
    "record_gap": lambda r: r.record_gap(TOPIC, 0, 10, 19, "deleted before upload"),
    "set_coverage_start": lambda r: r.set_coverage_start(TOPIC, 0, 0),
    "record_expired": lambda r: r.record_expired(TOPIC, 0, 0),
    "add_files": lambda r: r.add_files(segment_entry(TOPIC, 0, 9), ["batchindex"]),
    "delete_segment": lambda r: r.delete_segment(TOPIC, 0, 0),
    "clear_partitions": lambda r: r.clear_partitions([(TOPIC, 0)]),
    "clear_partition": lambda r: r.clear_partition(TOPIC, 0),
}


def test_every_write_script_waits_for_a_replica(redis_cluster) -> None:
    """Each write, in order, makes the master of the partition's slot run one more WAIT."""
    with connect(redis_cluster.url) as client:
        registry = Registry(client, f"acks-{time.time_ns()}")
        master = client.get_node_from_key(registry.keys(TOPIC, 0).segments).name
        assert client.get_node_from_key(registry.keys(TOPIC, 0).segments, replica=True) is not None
        for name, write in WRITES.items():
            before = wait_calls(redis_cluster, master)
            write(registry)
            assert wait_calls(redis_cluster, master) > before, f"{name} did not WAIT for a replica"
        assert registry.partition_info(TOPIC, 0) is None and registry.gaps(TOPIC, 0) == []


def test_a_stalled_replica_costs_a_warning_not_the_write(redis_cluster, caplog) -> None:
    """The replica of the partition's master is stopped (SIGSTOP, by its pid): WAIT answers 0 after
    ``REPLICA_WAIT_MS``, a warning says the write is on the master only, and the write stands."""
    with connect(redis_cluster.url) as client:
        registry = Registry(client, f"stalled-{time.time_ns()}")
        key = registry.keys(TOPIC, 0).segments
        registry.register(segment_entry(TOPIC, 0, 9))  # script loaded, connections open: what follows times only the WAIT
        replica = redis_cluster.node_at(client.get_node_from_key(key, replica=True).name)
        assert replica.pid is not None
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            with caplog.at_level(logging.WARNING, logger="tiered_kafka.registry._replicated"):
                started = time.monotonic()
                assert registry.record_gap(TOPIC, 0, 10, 19, "deleted before upload")
                waited = time.monotonic() - started
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        try:
            assert waited >= REPLICA_WAIT_MS / 1000 * 0.9
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert any("acknowledged a registry write" in m and "on the master only" in m for m in warnings), warnings
            assert [(g.start_offset, g.end_offset) for g in registry.gaps(TOPIC, 0)] == [(10, 19)]  # read from the master
        finally:
            redis_cluster.wait_ready(60)  # the replica back in sync, for the tests after this one
            registry.clear_partition(TOPIC, 0)
