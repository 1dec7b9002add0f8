"""Leadership for real: an agent beside each broker of a three-broker Apache Kafka cluster, while a
partition's leader moves (a reassignment that changes the replica order, then a preferred leader
election through the Admin API) and while a leader is SIGKILLed. Every offset ends up in remote
storage exactly once, or in a recorded gap with its reason, and the audit passes.

KRaft (Kafka 4.x, ``kafka_cluster``; the agents poll leadership through the Admin API) and
ZooKeeper mode (Kafka 3.9.x, three brokers on one ZooKeeper chroot; the agents watch the
controller's znodes). The agent of the broker that is killed runs as a child process and is
SIGKILLed with it (its host died), so the new leaders' agents upload what it had not.

What real Kafka showed: replicas roll at the same offsets (a follower's fetch never spans the
leader's segment boundary, so it rolls where the leader did, even catching up from offset 0), so a
new leader's segments do not straddle what the old leader registered: they start at its next
offset. And a leader's rotated segment can hold offsets above the high watermark, which a clean
election drops: the agent uploads only segments ending at or below the high watermark Kafka
checkpoints (the last test).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.agent_env import AgentProcess, agent_settings, only_topics, registry_for, wait_for
from tests.support.kafka_clients import consume_all, produce, value_for
from tiered_kafka.format.checkpoints import REPLICATION_OFFSET_CHECKPOINT, read_offset_checkpoint
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.registry import Registry
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.audit import KafkaOffsets, merge_ranges, run_audit
from tiered_kafka_dev.services import KAFKA_VERSION, KAFKA_ZK_VERSION, KafkaServer, topic_configs
from tiered_kafka_dev.services._kafka import kafka_classpath

pytestmark = pytest.mark.integration

TOPIC = "moving"
ASSIGNMENT = [[1, 2, 3], [2, 3, 1]]  # partition → replicas, the first preferred
SEGMENT_BYTES = 50_000
PER_ROUND = 150  # records per partition and round: three or four segments


# -- the cluster, through Kafka's own clients -----------------------------------------------------


def create_assigned_topic(bootstrap: str, version: str) -> None:
    """The topic with an explicit replica assignment (CreateTopics), every partition led by its first replica."""
    configs = topic_configs({"segment.bytes": str(SEGMENT_BYTES), "min.insync.replicas": "1"}, version)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for future in admin.create_topics([NewTopic(TOPIC, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT, config=configs)]).values():
            future.result(timeout=60)
    finally:
        del admin
    for partition, replicas in enumerate(ASSIGNMENT):
        wait_for(lambda p=partition, r=replicas: leader_of(bootstrap, p) == r[0], what=f"{TOPIC}-{partition} led by broker {replicas[0]}")


def describe(bootstrap: str, partition: int) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
        return topic.partitions.get(partition) if topic.error is None else None
    finally:
        del admin


def leader_of(bootstrap: str, partition: int) -> int:
    found = describe(bootstrap, partition)
    return -1 if found is None else found.leader


def reassign(bootstrap: str, version: str, partition: int, replicas: list[int], workdir: Path) -> None:
    """kafka-reassign-partitions (Kafka's ``ReassignPartitionsCommand``, from the same jars): a new
    replica order for one partition (confluent-kafka has no AlterPartitionReassignments). Returns once
    Metadata lists the replicas in that order."""
    plan = workdir / f"reassign-{uuid.uuid4().hex[:6]}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": partition, "replicas": replicas}]}))
    java = shutil.which("java")
    assert java is not None
    command = [java, "-Xmx256m", "-cp", kafka_classpath(version), "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
               "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), "--execute"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    wait_for(lambda: list(getattr(describe(bootstrap, partition), "replicas", [])) == replicas, what=f"replicas {replicas}")


def elect_preferred(bootstrap: str, partition: int) -> None:
    """ElectLeaders (PREFERRED) through the Admin API: the first replica becomes the leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        result = admin.elect_leaders(ElectionType.PREFERRED, [KafkaTopicPartition(TOPIC, partition)]).result(timeout=60)
    finally:
        del admin
    assert [error for error in result.values() if error is not None] == []


# -- the agents and what they uploaded -------------------------------------------------------------


@contextmanager
def agents_beside(
    brokers: list[KafkaServer], leadership: dict[str, Any], redis_server: Any, s3_server: Any, bucket: str, workdir: Path, process_for: int
) -> Iterator[tuple[dict[int, Agent | AgentProcess], Registry]]:
    """One agent per broker (broker_id = node id, log_dirs = its log.dir), one cluster name, Redis and
    bucket; the agent of broker ``process_for`` is a child process, to die with its broker (SIGKILL)."""
    cluster = f"cluster-{uuid.uuid4().hex[:8]}"
    settings = {
        b.node_id: agent_settings(b.log_dir, redis_server, s3_server, bucket, cluster=cluster, broker_id=b.node_id, leadership=leadership, topics=only_topics(TOPIC))
        for b in brokers
    }  # fmt: skip
    with ExitStack() as stack:
        agents: dict[int, Agent | AgentProcess] = {}
        for node, node_settings in settings.items():
            if node == process_for:
                agents[node] = process = AgentProcess(node_settings, workdir / f"agent-{node}.properties")
                stack.callback(process.stop)
            else:
                agents[node] = stack.enter_context(Agent(node_settings))
        yield agents, registry_for(next(iter(settings.values())))


def uploads_by(agent: Agent | AgentProcess) -> int:
    """Segments the agent registered (its metric, or its log lines for a child process)."""
    if isinstance(agent, AgentProcess):
        return agent.output().count(" uploaded and registered")
    return int(agent.metrics.value("tiered_kafka_agent_segments_uploaded_total", topic=TOPIC))


class Rounds:
    """Records to both partitions: key ``p{partition}-{n}``, the n-th record of its partition (an
    idempotent producer: exactly once and in order, through leader changes)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.sent = [0] * len(ASSIGNMENT)

    def produce(self, count: int = PER_ROUND) -> None:
        for p in range(len(ASSIGNMENT)):
            messages = [(p, f"p{p}-{n}".encode(), value_for(n)) for n in range(self.sent[p], self.sent[p] + count)]
            produce(self.bootstrap, TOPIC, messages, **{"linger.ms": 2, "batch.num.messages": 7, "enable.idempotence": True, "acks": "all"})
            self.sent[p] += count


def active_base(broker: KafkaServer, partition: int) -> int:
    return max(int(p.name[:20]) for p in (broker.log_dir / f"{TOPIC}-{partition}").glob("*.log"))


def caught_up(registry: Registry, brokers: dict[int, KafkaServer], bootstrap: str) -> bool:
    """Every partition accounted for up to its current leader's active segment."""
    for partition in range(len(ASSIGNMENT)):
        leader = leader_of(bootstrap, partition)
        if leader not in brokers or registry.coverage(TOPIC, partition).next_offset != active_base(brokers[leader], partition):
            return False
    return True


def remote_records(s3_server: Any, bucket: str, registry: Registry, partition: int, topic: str = TOPIC) -> list[tuple[int, bytes | None]]:
    """(offset, key) of every record the registry serves, entry by entry from its first offset, read from S3."""
    client = s3_server.client()
    found: list[tuple[int, bytes | None]] = []
    for entry in registry.segments(topic, partition):
        body = client.get_object(Bucket=bucket, Key=entry.object_key)["Body"].read()
        for batch in iter_batches(body):
            if not batch.is_control:
                found += [(r.offset, r.key) for r in batch if entry.first <= r.offset <= entry.last_offset]
    return found


def assert_every_offset_once(s3_server: Any, bucket: str, registry: Registry, bootstrap: str, sent: list[int]) -> list[str]:
    """Remote exactly once, or in a gap with a reason; the audit passes. Returns the gaps, described."""
    described: list[str] = []
    for partition in range(len(ASSIGNMENT)):
        entries = registry.segments(TOPIC, partition)
        gaps = registry.gaps(TOPIC, partition)
        assert all(a.last_offset < b.first for a, b in zip(entries, entries[1:])), "overlapping entries"
        assert all(g.reason for g in gaps)
        end = registry.coverage(TOPIC, partition).next_offset
        ranges = [(e.first, e.last_offset) for e in entries] + [(g.start_offset, g.end_offset) for g in gaps]
        assert merge_ranges(ranges) == [(0, end - 1)]
        in_gaps = {o for g in gaps for o in range(g.start_offset, g.end_offset + 1)}
        expected = [(o, f"p{partition}-{o}".encode()) for o in range(end) if o not in in_gaps]
        assert remote_records(s3_server, bucket, registry, partition) == expected
        described += [f"{TOPIC}-{partition} {g.start_offset}..{g.end_offset}: {g.reason}" for g in gaps]
    kafka = KafkaOffsets(bootstrap)
    try:
        assert [(log_range, error) for log_range, error in (kafka.log_range(TOPIC, p) for p in range(len(ASSIGNMENT)))] == [((0, n), None) for n in sent]
        results = run_audit(registry, kafka, [TOPIC])
    finally:
        kafka.close()
    assert [(r.partition, r.ok) for r in results] == [(p, True) for p in range(len(ASSIGNMENT))], [r.to_text() for r in results]
    return described


def move_and_kill(brokers: list[KafkaServer], bootstrap: str, version: str, leadership: dict[str, Any], redis_server: Any, s3_server: Any, bucket: str, workdir: Path) -> None:
    """The scenario, on any three brokers 1, 2, 3: upload; move partition 0's leader from 1 to 2 (a
    reassignment to [2, 1, 3], then a preferred election); SIGKILL broker 2 (leading both
    partitions); each time produce more and wait until the registry reaches the new leader's
    active segment."""
    by_id = {b.node_id: b for b in brokers}
    create_assigned_topic(bootstrap, version)
    rounds = Rounds(bootstrap)
    with agents_beside(brokers, leadership, redis_server, s3_server, bucket, workdir, process_for=2) as (agents, registry):
        rounds.produce()
        wait_for(lambda: caught_up(registry, by_id, bootstrap), timeout_s=120, what="uploads from the first leaders")

        reassign(bootstrap, version, 0, [2, 1, 3], workdir)
        assert leader_of(bootstrap, 0) == 1  # a new replica order alone moves nothing
        elect_preferred(bootstrap, 0)
        wait_for(lambda: leader_of(bootstrap, 0) == 2, what="partition 0 led by broker 2")
        rounds.produce()
        wait_for(lambda: caught_up(registry, by_id, bootstrap), timeout_s=120, what="uploads after the move")
        assert uploads_by(agents[2]) > 0

        rounds.produce()  # broker 2 leads both partitions; its host dies before its agent uploads these
        by_id[2].kill()
        agent_2 = agents[2]
        assert isinstance(agent_2, AgentProcess)
        agent_2.process.kill()
        agent_2.wait(30)
        wait_for(lambda: leader_of(bootstrap, 0) in (1, 3) and leader_of(bootstrap, 1) in (1, 3), timeout_s=120, what="new leaders after the SIGKILL")
        rounds.produce()
        survivors = {n: b for n, b in by_id.items() if n != 2}
        wait_for(lambda: caught_up(registry, survivors, bootstrap), timeout_s=120, what="uploads after the SIGKILL")
        assert uploads_by(agents[1]) > 0 and uploads_by(agents[3]) > 0
        gaps = assert_every_offset_once(s3_server, bucket, registry, bootstrap, rounds.sent)
        print("gaps recorded:", gaps or "none")


def test_kraft_leader_moved_by_election_and_killed(kafka_cluster, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    leadership = {"mode": "kraft", "bootstrap_servers": kafka_cluster.bootstrap_servers, "poll_interval_s": 0.5}
    move_and_kill(kafka_cluster.brokers, kafka_cluster.bootstrap_servers, KAFKA_VERSION, leadership, redis_server, s3_server, s3_bucket, tmp_path)


def test_zookeeper_mode_leader_moved_by_election_and_killed(start_kafka, zk_chroot, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    brokers = [start_kafka(tmp_path / f"zk-logs-{n}", zookeeper_connect=zk_chroot, node_id=n) for n in (1, 2, 3)]
    bootstrap = ",".join(b.bootstrap_servers for b in brokers)
    leadership = {"mode": "zookeeper", "zookeeper_connect": zk_chroot}
    move_and_kill(brokers, bootstrap, KAFKA_ZK_VERSION, leadership, redis_server, s3_server, s3_bucket, tmp_path)


def test_a_dying_leader_s_agent_uploads_nothing_above_the_high_watermark(kafka_cluster, redis_server, s3_server, s3_bucket, tmp_path, caplog) -> None:
    """Kafka's contract: only offsets below the high watermark are committed; a clean election (from
    the ISR) may drop the rest. Here the follower is paused (SIGSTOP, shorter than the broker session
    timeout, so it stays in the ISR), the leader takes records with acks=1 and rolls segments above
    the high watermark. Its agent uploads only what ends at or below the high watermark the leader
    checkpoints (``replication-offset-checkpoint``; Kafka's RemoteLogManager rule): the rolled
    segments above it wait. The leader dies; the follower is elected with the log ending at the old
    high watermark, and new records take the same offsets. The new leader's agent goes on from what
    was registered: the registry serves exactly Kafka's records, no gap, no divergence.

    (Before the rule, the dying leader's agent registered the offsets above the high watermark, and
    the registry served records Kafka had dropped.)"""
    caplog.set_level(logging.INFO, logger="tiered_kafka_agent")
    bootstrap = kafka_cluster.bootstrap_servers
    topic = "above-hw"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        configs = topic_configs({"segment.bytes": str(SEGMENT_BYTES)})
        for future in admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]], config=configs)]).values():
            future.result(timeout=60)
    finally:
        del admin
    leader, follower = kafka_cluster.broker(1), kafka_cluster.broker(2)

    def led_by() -> int:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            found = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
            return -1 if found is None else found.leader
        finally:
            del admin

    def checkpointed(broker: KafkaServer) -> int | None:
        """The partition's high watermark in the broker's replication-offset-checkpoint."""
        return (read_offset_checkpoint(broker.log_dir / REPLICATION_OFFSET_CHECKPOINT) or {}).get((topic, 0))

    wait_for(lambda: led_by() == 1, what="led by broker 1")
    cluster = f"cluster-{uuid.uuid4().hex[:8]}"
    leadership = {"mode": "kraft", "bootstrap_servers": bootstrap, "poll_interval_s": 0.5}
    settings = {b.node_id: agent_settings(b.log_dir, redis_server, s3_server, s3_bucket, cluster=cluster, broker_id=b.node_id, leadership=leadership, topics=only_topics(topic)) for b in (leader, follower)}
    registry = registry_for(settings[1])
    directory = leader.log_dir / f"{topic}-0"
    with Agent(settings[2]) as new_leaders_agent:
        first_agent = Agent(settings[1])
        first_agent.start()
        try:
            produce(bootstrap, topic, [(0, f"committed-{i}".encode(), value_for(i)) for i in range(100)], **{"acks": "all", "linger.ms": 2, "batch.num.messages": 7})
            wait_for(lambda: checkpointed(leader) == 100, timeout_s=30, what="the leader checkpointing the high watermark 100")
            os.kill(follower.pid, signal.SIGSTOP)
            try:
                produce(bootstrap, topic, [(0, f"uncommitted-{i}".encode(), value_for(i)) for i in range(100, 250)], **{"acks": "1", "linger.ms": 2, "batch.num.messages": 7})
                active = max(int(p.name[:20]) for p in directory.glob("*.log"))
                hw = checkpointed(leader)
                assert hw is not None and hw < active  # rotated segments above the high watermark
                rotated_above = [b for b in sorted(int(p.name[:20]) for p in directory.glob("*.log")) if hw < b < active]
                assert rotated_above, "the leader rolled no segment above the high watermark"

                def waiting() -> bool:
                    return first_agent.metrics.value("tiered_kafka_agent_segments_awaiting_high_watermark", topic=topic, partition="0") > 0

                wait_for(waiting, timeout_s=30, what="the leader's agent holding the segments above the high watermark")
                rewrites = leader.log_dir / REPLICATION_OFFSET_CHECKPOINT
                seen = {rewrites.stat().st_ino}
                wait_for(lambda: seen.add(rewrites.stat().st_ino) or len(seen) >= 3, timeout_s=30, what="two more checkpoints of the leader")
                assert checkpointed(leader) == hw  # the follower is paused: the high watermark stays
                assert registry.coverage(topic, 0).next_offset <= hw  # nothing above it registered
                leader.kill()
            finally:
                os.kill(follower.pid, signal.SIGCONT)
        finally:
            first_agent.stop()  # its host died with the broker
        registered = registry.coverage(topic, 0).next_offset
        assert registered <= hw
        wait_for(lambda: led_by() == 2, timeout_s=90, what="broker 2 elected")
        kafka = KafkaOffsets(bootstrap)
        try:
            (log_start, kept), error = kafka.log_range(topic, 0)
            assert (log_start, error) == (0, None) and hw <= kept < active  # Kafka dropped what the follower had not fetched
            produce(bootstrap, topic, [(0, f"after-{i}".encode(), value_for(i)) for i in range(200)], **{"acks": "all", "linger.ms": 2, "batch.num.messages": 7})
            assert kafka.log_range(topic, 0) == ((0, kept + 200), None)  # the same offsets, other records
        finally:
            kafka.close()
        new_active = lambda: max(int(p.name[:20]) for p in (follower.log_dir / f"{topic}-0").glob("*.log"))  # noqa: E731
        wait_for(lambda: registry.coverage(topic, 0).next_offset == new_active(), timeout_s=120, what="the new leader's agent reaching its active segment")
        assert new_leaders_agent.metrics.value("tiered_kafka_agent_segments_uploaded_total", topic=topic) > 0
    end = registry.coverage(topic, 0).next_offset
    assert end > kept  # the new records are remote too
    entries = registry.segments(topic, 0)
    assert entries[0].first == 0 and all(a.last_offset + 1 == b.first for a, b in zip(entries, entries[1:]))
    assert registry.gaps(topic, 0) == []
    assert not any("ReplicaDivergedError" in (r.exc_text or "") or "diverged from the registered one" in r.getMessage() for r in caplog.records if r.name.startswith("tiered_kafka_agent"))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        in_kafka = [(m.offset(), m.key()) for m in consume_all(consumer, end)][:end]
    finally:
        consumer.close()
    assert remote_records(s3_server, s3_bucket, registry, 0, topic) == in_kafka  # Kafka's records after the failover
    assert [key for _, key in in_kafka[kept:]] == [f"after-{i}".encode() for i in range(end - kept)]
