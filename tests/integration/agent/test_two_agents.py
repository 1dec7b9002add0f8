"""Two agent processes, one partition: a leadership move between replicas that rolled differently.

Two ZooKeeper-mode Kafka brokers (3.9), A's and B's, replicate the topic; Kafka's controller holds
and moves the leadership (a reassignment, then a preferred-leader election). Broker A's log.dir is
the one its agent uploads from. B's agent uploads from a replica built from broker A's batches with
segment boundaries we choose (replicas roll independently, but where a real follower rolls cannot
be chosen): B's agent reads that directory, with broker B's id and broker B's leadership. Agent A
uploads while A leads; then it dies in the middle of an upload (SIGKILL before registering),
leadership moves to broker B, and agent B uploads from its replica. Per partition, B's replica
differs from A's registered segments S0..Sk (Sk ends at E) in one way:

- p0: B rolled inside Sk: its segment [mid Sk .. end of Sk+1] straddles E and is registered from
  E + 1 (``first_offset``), named by its own base offset;
- p1: B rolled at Sk's base but later: its segment [Sk.base .. mid Sk+1] has Sk's object key,
  which holds A's bytes: nothing is overwritten, its tail from E + 1 is a segment of its own;
- p2: B rolled where A did: A had uploaded Sk+1's objects when it died, B uploads the same base
  offset with the same bytes (the conditional PUT is refused, the object is recognised).

Nothing is lost, nothing is overwritten with other bytes, no gap is recorded, every offset is
read once through the gateway, and the audit passes.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import crc32c
import pytest
import redis

from tests.support.agent_env import AgentProcess, agent_settings, checkpoint_high_watermarks, only_topics, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.kafka_clients import create_topic, produce, value_for
from tests.support.stack_env import gateway_server
from tiered_kafka.bulk import read_table
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import Registry
from tiered_kafka_agent.audit import audit_partition
from tiered_kafka_agent.rebuild import rebuild_registry
from tiered_kafka_agent.remote_store import RemoteStore, transfer_config
from tiered_kafka.retry import RetryPolicy

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PHASE = 120  # records per partition and phase: about 4 segments of 40000 bytes


def _value(partition: int, offset: int) -> bytes:
    return value_for(partition * 1_000_000 + offset)


def _produce(bootstrap: str, topic: str, partition: int, start: int, count: int) -> None:
    produce(bootstrap, topic, [(partition, None, _value(partition, o)) for o in range(start, start + count)], **{"linger.ms": 1, "batch.num.messages": 5})


def _batches(data: bytes) -> list[tuple[int, int, int]]:
    """(position, base offset, last offset) of each batch of a magic 2 .log (Kafka's RecordBatch header)."""
    out, position = [], 0
    while position < len(data):
        base, length = struct.unpack_from(">qi", data, position)
        (last_delta,) = struct.unpack_from(">i", data, position + 23)
        out.append((position, base, base + last_delta))
        position += 12 + length
    return out


def _log_end(directory: Path) -> int:
    """The log end offset of a partition directory's .log files, as far as whole batches show."""
    end = 0
    for log in sorted(directory.glob("*.log")):
        data = log.read_bytes()
        with contextlib.suppress(struct.error):
            for _position, _base, last in _batches(data):
                end = max(end, last + 1)
    return end


def _finished(output: str, topic: str, base: int) -> bool:
    """True when an agent's log shows it finished with its segment ``base`` (any outcome)."""
    name = f"{topic}-0: segment {base}"
    return any(f"{name}{outcome}" in output for outcome in ("..", " holds nothing new", ": another leader registered all", ": its key holds another leader's segment;"))


class Replica:
    """Broker B's copy of one partition: broker A's batches, cut into segments where we say."""

    def __init__(self, source: Path, staging: Path) -> None:
        self.source = source
        self.dir = staging / source.name
        self.dir.mkdir(parents=True)
        self.batches: list[tuple[int, int, int]] = []  # (base, last, bytes) over the whole log, in order
        self.data: dict[int, bytes] = {}
        for log in sorted(source.glob("*.log")):
            data = log.read_bytes()
            for position, base, last in _batches(data):
                end = position + 12 + struct.unpack_from(">i", data, position + 8)[0]
                self.data[base] = data[position:end]
                self.batches.append((base, last, end - position))

    def copy(self, base: int) -> None:
        """Broker A's segment ``base`` as it is (same bytes and indexes)."""
        for path in self.source.glob(f"{base:020d}.*"):
            if path.suffix in (".log", ".index", ".timeindex", ".txnindex"):
                shutil.copy(path, self.dir / path.name)

    def snapshots(self) -> None:
        """Producer snapshots at every segment base (the state at an offset is the same on every
        replica): the producers here are not idempotent, so every snapshot holds no producer and
        broker A's are all alike (whether it wrote them leading or following); the same bytes stand
        for the state where only broker B rolled."""
        found = {path.read_bytes() for path in self.source.glob("*.snapshot")}
        assert len(found) == 1, "broker A's producer snapshots differ: not a producer-free log"
        for log in self.dir.glob("*.log"):
            (self.dir / f"{log.name[:20]}.snapshot").write_bytes(next(iter(found)))

    def cut(self, first: int, end: int) -> None:
        """A segment of the batches from offset ``first`` up to (not including) ``end``; empty indexes."""
        body = b"".join(self.data[b] for b, last, _ in self.batches if first <= b and last < end)
        assert body, (first, end)
        (self.dir / f"{first:020d}.log").write_bytes(body)
        for kind in ("index", "timeindex"):
            (self.dir / f"{first:020d}.{kind}").write_bytes(b"")

    def middle_batch(self, start: int, end: int) -> int:
        """The base offset of a batch inside (start, end): where a replica could have rolled instead."""
        inside = [b for b, _, _ in self.batches if start < b < end]
        assert inside, (start, end)
        return inside[len(inside) // 2]


def test_a_leadership_move_between_differently_rolled_replicas(zookeeper_kafka, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    logs1, staging = tmp_path / "logs1", tmp_path / "staging"
    logs1.mkdir()
    a_id, b_id = 1, 2  # broker A's agent uploads from broker A's log.dir; B's from the replica built below
    logs0 = zookeeper_kafka.brokers[a_id].log_dir
    bootstrap = zookeeper_kafka.bootstrap_servers
    topic = unique_topic("handover")
    zookeeper_kafka.create_topic(topic, [[a_id, b_id]] * PARTITIONS, **{"segment.bytes": "40000"})
    cluster = f"two-{uuid.uuid4().hex[:8]}"
    leadership = {"mode": "zookeeper", "zookeeper_connect": zookeeper_kafka.zookeeper_connect}
    topics = only_topics(topic)
    a_settings = agent_settings(logs0, redis_server, s3_server, s3_bucket, cluster=cluster, broker_id=a_id, leadership=leadership, topics=topics)
    b_settings = agent_settings(logs1, redis_server, s3_server, s3_bucket, cluster=cluster, broker_id=b_id, leadership=leadership, topics=topics)
    registry = registry_for(a_settings)
    keyspace = Keyspace(a_settings.s3.prefix, cluster, a_settings.s3.entropy_bits)
    s3 = s3_server.client()
    dirs = [logs0 / f"{topic}-{p}" for p in range(PARTITIONS)]

    # phase 1: A leads and uploads S0..Sk of every partition
    agent_a = AgentProcess(a_settings, tmp_path / "a.properties")
    try:
        for p in range(PARTITIONS):
            _produce(bootstrap, topic, p, 0, PER_PHASE)
        for p in range(PARTITIONS):
            wait_for(lambda p=p: [s.base_offset for s in registry.segments(topic, p)] == rotated_bases(dirs[p]), timeout_s=120, what=f"A uploaded {topic}-{p}")
    finally:
        agent_a.stop()
    registered_by_a = {p: registry.segments(topic, p) for p in range(PARTITIONS)}
    a_objects = {p: {e.object_key: s3.get_object(Bucket=s3_bucket, Key=e.object_key)["Body"].read() for e in registered_by_a[p]} for p in range(PARTITIONS)}

    # A dies uploading p2's next segment: its objects are in S3, its registration never happens
    _produce(bootstrap, topic, 2, PER_PHASE, PER_PHASE)
    crashing = AgentProcess(a_settings, tmp_path / "a-crash.properties", crash_at="before_register")
    try:
        assert crashing.wait(120) == -signal.SIGKILL, crashing.output()[-3000:]
    finally:
        crashing.stop()
    orphan_base = registered_by_a[2][-1].next_offset
    orphan_key = keyspace.segment_key(topic, 2, orphan_base, FileKind.LOG)
    orphan = s3.get_object(Bucket=s3_bucket, Key=orphan_key)["Body"].read()
    assert orphan == (dirs[2] / f"{orphan_base:020d}.log").read_bytes()
    assert [e.base_offset for e in registry.segments(topic, 2)] == [e.base_offset for e in registered_by_a[2]]

    # leadership moves to broker B; more records arrive (broker A follows: its log.dir gets them too)
    for p in range(PARTITIONS):
        assert zookeeper_kafka.move(topic, p, [b_id, a_id])["leader"] == b_id
    for p in range(2):
        _produce(bootstrap, topic, p, PER_PHASE, PER_PHASE)
    for p in range(PARTITIONS):  # broker A, following, has every record: B's replica is built from its files
        wait_for(lambda p=p: _log_end(dirs[p]) == 2 * PER_PHASE, timeout_s=60, what=f"broker A replicated {topic}-{p}")

    # broker B's replica (module doc), moved into its log dir whole
    replicas = {p: Replica(dirs[p], staging) for p in range(PARTITIONS)}
    uploaded_ends = {}
    for p, replica in replicas.items():
        bases = sorted(int(path.name[:20]) for path in dirs[p].glob("*.log"))
        k = len(registered_by_a[p]) - 1
        sk, sk1, sk2 = bases[k], bases[k + 1], bases[k + 2]
        for base in bases[:k]:
            replica.copy(base)
        if p == 0:
            cut = replica.middle_batch(sk, sk1)
            replica.cut(sk, cut)  # rolled earlier inside Sk: holds nothing new
            replica.cut(cut, sk2)  # straddles E = sk1 - 1
        elif p == 1:
            cut = replica.middle_batch(sk1, sk2)
            replica.cut(sk, cut)  # Sk's base, a later end: Sk's key is A's
            replica.cut(cut, sk2)
        else:
            replica.copy(sk)
            replica.copy(sk1)  # the segment A uploaded before dying, the same bytes
            replica.copy(sk2)
        replica.cut(bases[k + 3] if p == 2 else sk2, replica.batches[-1][1] + 1)  # the active segment: the rest
        uploaded_ends[p] = (bases[k + 3] if p == 2 else sk2) - 1
        replica.snapshots()
        shutil.move(str(replica.dir), str(logs1 / replica.dir.name))
    checkpoint_high_watermarks(logs1)  # broker B's replicas, built by hand: all committed

    agent_b = AgentProcess(b_settings, tmp_path / "b.properties")
    agent_a = AgentProcess(a_settings, tmp_path / "a.properties")  # back, as a follower: it uploads nothing
    try:
        for p in range(PARTITIONS):
            wait_for(lambda p=p: registry.coverage(topic, p).next_offset > uploaded_ends[p], timeout_s=120, what=f"B uploaded {topic}-{p}")
        b_output = agent_b.output()
    finally:
        agent_b.stop()
        agent_a.stop()

    for p in range(PARTITIONS):
        entries = registry.segments(topic, p)
        assert registry.gaps(topic, p) == [], p
        # every offset once: the registered ranges follow each other from 0
        assert entries[0].first_offset == 0
        assert all(a.last_offset + 1 == b.first_offset for a, b in zip(entries, entries[1:])), [(e.first_offset, e.base_offset, e.last_offset) for e in entries]
        assert entries[-1].last_offset == uploaded_ends[p]
        assert entries[: len(registered_by_a[p])] == registered_by_a[p]  # A's entries untouched
        for entry in entries:  # each object holds exactly the bytes its entry names
            body = s3.get_object(Bucket=s3_bucket, Key=entry.object_key)["Body"].read()
            assert (len(body), f"crc32c:{crc32c.crc32c(body):08x}") == (entry.size, entry.checksum), entry.object_key
            assert entry.object_key == keyspace.segment_key(topic, p, entry.base_offset, FileKind.LOG)
        for key, body in a_objects[p].items():  # nothing of A's was overwritten
            assert s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == body
        audit = audit_partition(registry, topic, p, None)  # remote storage alone accounts for every offset
        assert audit.ok and audit.unaccounted == [], audit.to_text()

    e0 = registered_by_a[0][-1].last_offset
    straddling = registry.find(topic, 0, e0 + 1)
    assert straddling is not None and straddling.first_offset == e0 + 1 and straddling.base_offset < e0 + 1
    assert straddling.object_key.endswith(f"{straddling.base_offset:020d}.log")
    e1 = registered_by_a[1][-1].last_offset
    tail = registry.find(topic, 1, e1 + 1)
    assert tail is not None and tail.base_offset == tail.first_offset == e1 + 1  # the tail, a segment of its own
    twin = registry.find(topic, 2, orphan_base)
    assert twin is not None and twin.base_offset == orphan_base and twin.checksum == f"crc32c:{crc32c.crc32c(orphan):08x}"
    orphan_now = s3.get_object(Bucket=s3_bucket, Key=orphan_key)
    assert orphan_now["Body"].read() == orphan
    # B registered the object A wrote: its PUT was refused (the metadata is still A's, written earlier)
    assert int(orphan_now["Metadata"]["tk-upload-time-ms"]) < twin.upload_time_ms
    assert "its key holds another leader's segment" in b_output

    # every offset read once, through the gateway; a plan from first_offset starts at the batch holding it
    with gateway_server(b_settings, s3_server, bootstrap) as url:
        with GatewayClient(url, cluster) as client:
            plan = client.plan(topic, 0, e0 + 1, 1 << 20)
            assert (plan.object_key, plan.segment_base_offset) == (straddling.object_key, straddling.base_offset)
            assert plan.ranges[0].first_offset == e0 + 1 and plan.gap is None
            before = client.plan(topic, 0, e0, 1 << 20)  # the offset before it: the other leader's segment
            assert before.object_key == registered_by_a[0][-1].object_key
        for p in range(PARTITIONS):
            table = read_table(url, cluster, topic, p, start_offset=0, end_offset=uploaded_ends[p] + 1)
            offsets = table.column("offset").to_pylist()
            assert offsets == list(range(uploaded_ends[p] + 1)), p
            values = table.column("value").to_pylist()
            assert all(v == _value(p, o) for o, v in zip(offsets, values)), p

    # rebuilt from S3 alone (into another namespace): the same ranges, first offsets included
    store = RemoteStore(s3, s3_bucket, keyspace, transfer_config(64 << 20, 8 << 20, 2), RetryPolicy(attempts=3))
    rebuilt = Registry(redis.Redis.from_url(redis_server.url), cluster, namespace="rebuilt")
    rebuild_registry(store, rebuilt)

    def facts(reg: Registry, p: int) -> list[tuple[int | None, int, int, str, str]]:
        return [(e.first_offset, e.base_offset, e.last_offset, e.checksum, e.object_key) for e in reg.segments(topic, p)]

    for p in range(PARTITIONS):
        live, again = facts(registry, p), facts(rebuilt, p)
        assert again[: len(live)] == live, (p, again, live)
        # past them only what the dying agent A uploaded in parallel and never registered (complete: kept)
        assert all(first > uploaded_ends[p] for first, *_ in again[len(live) :]), (p, again)
        assert rebuilt.gaps(topic, p) == []

    # the audit command, against Kafka too
    audit = subprocess.run(
        [sys.executable, "-m", "tiered_kafka_agent", "audit", "--config", str(tmp_path / "b.properties"), "--bootstrap-servers", bootstrap, "--topic", topic],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_two_agents_uploading_one_partition_at_once(kafka_server, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    """The worst case of a leadership move, for a whole partition: both agents upload it at the same
    time (static leadership, both handed their replica at the same moment), from replicas that
    rolled alike in places (the same base offsets and bytes: racing conditional PUTs) and
    differently in others (straddling segments; the same base with other ends: tails). Whatever
    the order, every offset is registered once, from objects holding exactly the bytes registered,
    and no gap is recorded."""
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("handover")
    create_topic(bootstrap, topic, 1, **{"segment.bytes": "40000"})
    _produce(bootstrap, topic, 0, 0, 8 * PER_PHASE)
    source = kafka_server.log_dir / f"{topic}-0"  # the shared broker's partition: copied, never changed
    bases = sorted(int(path.name[:20]) for path in source.glob("*.log"))
    assert len(bases) >= 20, bases
    alike = tmp_path / "staging-a" / source.name
    shutil.copytree(source, alike)  # broker 0's replica, as it is
    replica = Replica(source, tmp_path / "staging-b")  # broker 1's: per group of 4 segments, alike twice, then rolled elsewhere
    for i in range(0, len(bases) - 5, 4):
        b = bases[i : i + 6]
        replica.copy(b[0])
        replica.copy(b[1])
        if (i // 4) % 2:
            inside = replica.middle_batch(b[2], b[3])
            replica.cut(b[2], inside)  # shorter at a shared base, then a segment straddling it
            replica.cut(inside, b[4])
        else:
            inside = replica.middle_batch(b[3], b[4])
            replica.cut(b[2], inside)  # longer at a shared base
            replica.cut(inside, b[4])
        last_group_end = b[4]
    replica.cut(last_group_end, replica.batches[-1][1] + 1)  # the rest: broker 1's active segment
    replica.snapshots()
    end = last_group_end - 1  # both agents upload at least up to here

    last_rotated = [sorted(int(path.name[:20]) for path in d.glob("*.log"))[-2] for d in (alike, replica.dir)]
    cluster = f"race-{uuid.uuid4().hex[:8]}"
    dirs = [tmp_path / "logs-a", tmp_path / "logs-b"]
    for d in dirs:
        d.mkdir()
    upload = {"rescan_interval_s": 0.05}
    settings = [agent_settings(d, redis_server, s3_server, s3_bucket, cluster=cluster, broker_id=i, upload=upload) for i, d in enumerate(dirs)]
    registry = registry_for(settings[0])
    agents = [AgentProcess(s, tmp_path / f"agent-{i}.properties") for i, s in enumerate(settings)]
    try:
        for agent in agents:
            wait_for(lambda agent=agent: "running for broker" in agent.output(), timeout_s=60, what="the agents started")
        for d, replica_dir in zip(dirs, (alike, replica.dir)):  # built by hand: all committed
            checkpoint_high_watermarks(d, [replica_dir])
        shutil.move(str(alike), str(dirs[0] / source.name))  # both replicas appear at once
        shutil.move(str(replica.dir), str(dirs[1] / source.name))
        wait_for(lambda: registry.coverage(topic, 0).next_offset > end, timeout_s=120, what="both agents uploaded")
        for agent, base in zip(agents, last_rotated):  # whichever agent is behind finishes its passes too
            wait_for(lambda agent=agent, base=base: _finished(agent.output(), topic, base), timeout_s=120, what=f"an agent finished segment {base}")
        outputs = [a.output() for a in agents]
    finally:
        for agent in agents:
            agent.stop()

    entries = registry.segments(topic, 0)
    assert registry.gaps(topic, 0) == [], outputs[1][-3000:]
    assert not any("GAP offsets" in out for out in outputs)
    # they did race: one met the other's registrations or objects (which agent registers what is the
    # race's to decide: one may win every segment, as a fresh clone's full run saw once)
    assert any("uploaded and registered" in out for out in outputs), [out[-2000:] for out in outputs]
    raced = ("its key holds another leader's", "adopting the unregistered object", " from offset ", "already registered", "registered all its offsets meanwhile")
    assert any(sign in out for out in outputs for sign in raced)
    assert entries[0].first_offset == 0 and entries[-1].last_offset >= end
    assert all(a.last_offset + 1 == b.first_offset for a, b in zip(entries, entries[1:])), [(e.first_offset, e.base_offset, e.last_offset) for e in entries]
    s3 = s3_server.client()
    for entry in entries:
        body = s3.get_object(Bucket=s3_bucket, Key=entry.object_key)["Body"].read()
        assert (len(body), f"crc32c:{crc32c.crc32c(body):08x}") == (entry.size, entry.checksum), entry.object_key
    audit = audit_partition(registry, topic, 0, None)
    assert audit.ok, audit.to_text()
    last = entries[-1].last_offset
    with gateway_server(settings[0], s3_server, bootstrap) as url:
        table = read_table(url, cluster, topic, 0, start_offset=0, end_offset=last + 1)
    offsets = table.column("offset").to_pylist()
    assert offsets == list(range(last + 1))
    assert all(v == _value(0, o) for o, v in zip(offsets, table.column("value").to_pylist()))
