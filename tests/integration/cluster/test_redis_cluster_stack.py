"""The agent, the gateway and ``rebuild-registry`` as processes, and the backfill (in the test's process, on the
suite's shared Spark session), on a real Redis Cluster (three
masters with a replica each), configured only by a ``redis+cluster://`` URL; a master killed
mid-run fails over to its replica while the agent and the gateway keep running."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.cluster.conftest import ClusterStack, ReplyDroppingProxy, cluster_stack, s3_segment_bases, segment_entry
from tests.support.agent_env import rotated_bases, wait_for
from tests.support.kafka_clients import value_for
from tests.support.subprocesses import run_in_session
from tiered_kafka.spark.backfill import main as backfill_main
from tiered_kafka.bulk import read_table
from tiered_kafka.registry import Registry, SegmentEntry, connect
from tiered_kafka_dev.services import RedisClusterServer

pytestmark = pytest.mark.integration

TOPIC = "orders"  # the stem of the stacks' topics (cluster_stack adds a suffix), and the registry-only test's topic
PARTITIONS = 3


def check_sdk_reads_every_offset(stack: ClusterStack, at_least: int) -> None:
    """The SDK, through the gateway process, reads offsets 0..last registered of every partition,
    each holding the record produced there (record i went to partition i % 3 at offset i // 3)."""
    for p in range(PARTITIONS):
        last = stack.registry.segments(stack.topic, p)[-1].last_offset
        assert last >= at_least // PARTITIONS
        table = read_table(stack.gateway.url, stack.cluster, stack.topic, p)
        offsets, values = table.column("offset").to_pylist(), table.column("value").to_pylist()
        assert offsets == list(range(last + 1))
        assert values == [value_for(o * PARTITIONS + p) for o in offsets]


def check_registry_matches_s3(stack: ClusterStack, s3_server: Any, bucket: str) -> None:
    """Per partition: the registered segments are exactly the rotated segments on disk and the .log
    objects in S3 (none lost, none twice), contiguous from offset 0, with no gap recorded."""
    for p in range(PARTITIONS):
        segments = stack.registry.segments(stack.topic, p)
        bases = [s.base_offset for s in segments]
        assert bases == s3_segment_bases(s3_server, bucket, stack.topic, p) == rotated_bases(stack.log_dir / f"{stack.topic}-{p}")
        assert bases[0] == 0 and all(b.base_offset == a.last_offset + 1 for a, b in zip(segments, segments[1:], strict=False))
        assert stack.registry.gaps(stack.topic, p) == []
        info = stack.registry.partition_info(stack.topic, p)
        assert info is not None and info.segment_count == len(segments) and info.total_bytes == sum(s.size for s in segments)


def test_agent_gateway_backfill_and_rebuild_run_on_a_redis_cluster(
    kafka_server, redis_cluster, s3_server, s3_bucket, tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with cluster_stack(kafka_server, tmp_path, redis_cluster, s3_server, s3_bucket, TOPIC, PARTITIONS) as stack:
        client = stack.registry.client
        assert isinstance(client.cluster_client(), redis.RedisCluster)
        masters = {client.get_node_from_key(stack.registry.keys(stack.topic, p).segments).name for p in range(PARTITIONS)}
        assert len(masters) >= 2, "the partitions' keys should live on several masters"
        stack.produce(stack.topic, 0, 600, PARTITIONS)
        stack.wait_uploaded(stack.topic, PARTITIONS)
        check_registry_matches_s3(stack, s3_server, s3_bucket)
        check_sdk_reads_every_offset(stack, 500)

        capsys.readouterr()
        code = backfill_main(
            ["--gateway-url", stack.gateway.url, "--cluster", stack.cluster, "--topic", stack.topic, "--output", str(tmp_path / "parquet"),
             "--redis-url", stack.settings.redis.url, "--master", "local[2]"],
        )  # fmt: skip  # in this process, on the shared Spark session (a JVM start saved); as a process: spark_cluster/test_submit.py
        backfill = capsys.readouterr()
        assert code == 0, backfill.out[-3000:] + backfill.err[-3000:]
        assert "row counts match the registry" in backfill.out

        stack.agent.stop()  # rebuild-registry runs while no agent writes
        registered = stack.registry.dump()
        for topic, partition in stack.registry.partitions():
            stack.registry.clear_partition(topic, partition)
        assert stack.registry.dump()["partitions"] == {}
        rebuild = run_in_session([sys.executable, "-m", "tiered_kafka_agent", "rebuild-registry", "--config", str(tmp_path / "agent.properties")], timeout_s=300)
        assert rebuild.returncode == 0, rebuild.stdout + rebuild.stderr
        assert stack.registry.dump() == registered


class GatewayPoller:
    """Asks the gateway for a plan of partition 0 over and over, recording (monotonic time, HTTP status);
    a request that got no answer within 60 s (status 0: the machine is slow, or the gateway hangs)
    is kept apart in ``unanswered`` with what went wrong."""

    def __init__(self, stack: ClusterStack) -> None:
        self.stack = stack
        self.answers: list[tuple[float, int]] = []
        self.unanswered: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        path = f"/v1/clusters/{self.stack.cluster}/topics/{self.stack.topic}/partitions/0/plan?offset=0&max_bytes=4096"
        while not self._stop.is_set():
            status, body = self.stack.gateway.get(path, timeout_s=60)
            if status == 0:
                self.unanswered.append(str(body))
            else:
                self.answers.append((time.monotonic(), status))
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)


def wait_calls(node: Any, cluster: RedisClusterServer) -> int:
    """How many WAIT commands ``node`` (a redis-py ClusterNode) has run (INFO commandstats)."""
    stats = cluster.command(cluster.node_at(node.name), "INFO", "commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def test_a_master_killed_mid_run_fails_over_and_nothing_is_lost_or_duplicated(kafka_server, s3_server, s3_bucket, tmp_path: Path) -> None:
    with RedisClusterServer() as redis_cluster, cluster_stack(kafka_server, tmp_path, redis_cluster, s3_server, s3_bucket, TOPIC, PARTITIONS) as stack:
        agent_pid, gateway_pid = stack.agent.process.pid, stack.gateway.proc.pid
        stack.produce(stack.topic, 0, 600, PARTITIONS)
        stack.wait_uploaded(stack.topic, PARTITIONS)
        # the agent's registrations were acknowledged by replicas: the masters ran WAIT (``_replicated``)
        for p in range(PARTITIONS):
            master = stack.registry.client.get_node_from_key(stack.registry.keys(stack.topic, p).segments)
            assert wait_calls(master, redis_cluster) > 0, f"{master.name} (partition {p}) never ran WAIT"
        poller = GatewayPoller(stack)
        try:
            wait_for(lambda: any(status == 200 for _, status in poller.answers), what="the gateway's first plan")
            killed_ms = time.time_ns() // 1_000_000
            killed = redis_cluster.kill_master_of(stack.registry.keys(stack.topic, 0).segments)
            killed_at = time.monotonic()
            stack.produce(stack.topic, 600, 600, PARTITIONS)  # rolls segments the agent registers while the master is down
            promoted = redis_cluster.wait_for_failover(killed)
            stack.produce(stack.topic, 1200, 300, PARTITIONS)
            stack.wait_uploaded(stack.topic, PARTITIONS)
            wait_for(lambda: any(t > killed_at and s == 200 for t, s in poller.answers[-5:]), what="the gateway answering again")
        finally:
            poller.stop()

        assert promoted.address != killed.address and promoted.running and not killed.running
        assert stack.registry.client.get_node_from_key(stack.registry.keys(stack.topic, 0).segments).name == promoted.address
        # neither process was restarted: the same pids, still running
        assert stack.agent.process.pid == agent_pid and stack.agent.process.poll() is None
        assert stack.gateway.proc.pid == gateway_pid and stack.gateway.proc.poll() is None
        # the agent registered partition 0's segments on the promoted replica, after the kill
        after_kill: list[SegmentEntry] = [s for s in stack.registry.segments(stack.topic, 0) if s.upload_time_ms > killed_ms]
        assert after_kill, "no segment of partition 0 was registered after the kill"
        # the gateway answered plans or, while the slots had no master, 503 registry_unavailable: nothing else
        assert not poller.unanswered, f"requests without an answer: {poller.unanswered[:3]}\ngateway log:\n{stack.gateway.output()[-4000:]}"
        assert {s for _, s in poller.answers} <= {200, 503}, sorted({s for _, s in poller.answers})
        check_registry_matches_s3(stack, s3_server, s3_bucket)
        check_sdk_reads_every_offset(stack, 1200)


def test_a_registration_whose_reply_was_lost_is_retried_once_and_kept_once(redis_cluster) -> None:
    """The register script ran on the master, its reply never came back: the cluster client reconnects
    and sends it again, which finds the very same segment and changes nothing (the "noop" branch)."""
    cluster = f"lost-reply-{time.time_ns()}"
    probe = Registry(connect(redis_cluster.url), cluster)
    master = probe.client.get_node_from_key(probe.keys(TOPIC, 0).segments)
    proxy = ReplyDroppingProxy(master.host, master.port)
    remap = {(master.host, master.port): ("127.0.0.1", proxy.port)}
    registry = Registry(connect(redis_cluster.url, address_remap=lambda address: remap.get(address, address)), cluster)
    try:
        assert registry.register(segment_entry(TOPIC, 0, 9))  # loads the script and opens the pooled connection through the proxy
        proxy.armed.set()
        assert registry.register(segment_entry(TOPIC, 10, 19)) is False  # registered by the attempt whose reply was lost
        assert proxy.dropped == 1
        assert registry.segments(TOPIC, 0) == probe.segments(TOPIC, 0) == [segment_entry(TOPIC, 0, 9), segment_entry(TOPIC, 10, 19)]
        info = probe.partition_info(TOPIC, 0)
        assert info is not None and (info.segment_count, info.total_bytes, info.latest_offset) == (2, 2000, 19)
        assert probe.coverage(TOPIC, 0).next_offset == 20
        assert probe.partitions() == [(TOPIC, 0)]
    finally:
        probe.clear_partition(TOPIC, 0)
        registry.client.close()
        probe.client.close()
        proxy.close()
