"""One partition uploader (in this process) against another leader's leftovers, on Redis and SeaweedFS.

The other leader's uploads are made with the same ``RemoteStore`` from its own replica; both
replicas are written with the project's log writer from the same batches, rolled at different
offsets (``test_two_agents_store``), so their bytes agree where their batches do.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.agent_env import checkpoint_high_watermarks
from tests.integration.agent.test_two_agents_store import _batch, _replica, _upload
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import Registry
from tiered_kafka_agent import two_leaders
from tiered_kafka_agent.metrics import AgentMetrics
from tiered_kafka_agent.partition_uploader import PartitionUploader
from tiered_kafka_agent.remote_store import RemoteStore, transfer_config
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.two_leaders import ReplicaDivergedError

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


class Side:
    """A store and registry of one cluster, and S3 requests counted per (operation, key)."""

    def __init__(self, s3_server: Any, bucket: str, redis_server: Any) -> None:
        cluster = f"up-{uuid.uuid4().hex[:8]}"
        client = s3_server.client()
        self.requests: Counter[tuple[str, str]] = Counter()
        client.meta.events.register("before-parameter-build.s3", self._count)
        self.store = RemoteStore(client, bucket, Keyspace("tk", cluster, 0), transfer_config(64 * MIB, 8 * MIB, 2), RetryPolicy(attempts=3, base_s=0.01))
        self.registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
        self.s3 = client
        self.bucket = bucket

    def _count(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.requests[(model.name, str(params.get("Key", "")))] += 1

    def key(self, base: int, kind: FileKind = FileKind.LOG) -> str:
        return self.store.keyspace.segment_key("t", 0, base, kind)

    def uploader(self, log_dir: Path) -> PartitionUploader:
        checkpoint_high_watermarks(log_dir)  # the replicas, written by hand: all committed
        return PartitionUploader(
            "t", 0, [log_dir], self.store, self.registry, AgentMetrics(), threading.BoundedSemaphore(4), RetryPolicy(attempts=3, base_s=0.01), 0.05, upload_window=4
        )

    def ranges(self) -> list[tuple[int, int, int]]:
        return [(e.first, e.base_offset, e.last_offset) for e in self.registry.segments("t", 0)]

    def register_theirs(self, replica: Path, base: int) -> None:
        """The other leader uploads and registers its segment ``base``."""
        entry, _ = _upload(self.store, replica, base)
        assert self.registry.register(entry)


def _drive(uploader: PartitionUploader, done: Any, timeout_s: float = 30.0) -> None:
    """Run upload passes (as the uploader's thread would) until ``done()``."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the uploader did not finish"
        delay = uploader.sync()
        time.sleep(min(delay, 0.05))


@pytest.fixture
def side(s3_server, s3_bucket, redis_server) -> Side:
    return Side(s3_server, s3_bucket, redis_server)


def test_finished_uploads_are_not_redone_while_a_snapshot_is_late(side: Side, tmp_path: Path) -> None:
    """Segment 0's producer snapshot is late: no segment after it is uploaded (or even looked up)
    again on every pass while it waits; each .log goes up once."""
    batches = [_batch(i, 1024) for i in range(12)]
    replica = _replica(tmp_path / "b", batches, [1, 3, 5, 7, 9])  # 0..7, 8..15, ..., 32..39, active 40
    snapshot = replica / f"{8:020d}.snapshot"
    held = snapshot.read_bytes()
    snapshot.unlink()
    uploader = side.uploader(tmp_path / "b")
    began = time.monotonic()
    while time.monotonic() - began < 0.8:  # many passes while segment 0 waits (SNAPSHOT_GRACE_S is 2 s)
        uploader.sync()
        time.sleep(0.02)
    assert side.ranges() == []
    snapshot.write_bytes(held)
    _drive(uploader, lambda: side.registry.coverage("t", 0).next_offset == 40)
    assert [r[1] for r in side.ranges()] == [0, 8, 16, 24, 32]
    for base in (8, 16, 24, 32):
        key = side.key(base)
        assert side.requests[("PutObject", key)] == 1, base
        assert side.requests[("HeadObject", key)] <= 1, base  # HEAD before the PUT, once


def test_an_idle_pass_asks_redis_and_s3_nothing(side: Side, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rotated segment uploaded: later passes (every ``rescan_interval_s``, per partition)
    find nothing pending from the uploader's own mark, without a registry read or an S3 request.
    A broker with 500 partitions rescanned every second used to spend its CPU on their HGETALLs."""
    replica = _replica(tmp_path / "b", [_batch(i, 1024) for i in range(6)], [1, 3])  # 0..7, 8..15, active 16
    uploader = side.uploader(replica.parent)
    _drive(uploader, lambda: side.registry.coverage("t", 0).next_offset == 16)
    reads: list[str] = []
    for name in ("coverage", "segments", "find"):
        method = getattr(side.registry, name)
        monkeypatch.setattr(side.registry, name, lambda *a, _n=name, _m=method, **k: (reads.append(_n), _m(*a, **k))[1])
    requests = sum(side.requests.values())
    for _ in range(3):
        uploader.sync()
    assert reads == [] and sum(side.requests.values()) == requests
    assert [r[1] for r in side.ranges()] == [0, 8]  # and nothing was lost from the registry


def test_remote_retentions_sweep_keeps_a_straddling_upload_not_registered_yet(side: Side, tmp_path: Path) -> None:
    """The other leader registered 8..15; our segment 0..23 (based below it) is uploaded to be
    registered from 16. Until it is, its objects lie below every registered base: the sweep for
    crash leftovers must not take them for orphans (its .log reaches the live offsets)."""
    from tiered_kafka_agent.config import RemoteRetentionSettings
    from tiered_kafka_agent.retention import RemoteRetention

    batches = [_batch(i, 1024) for i in range(6)]
    side.register_theirs(_replica(tmp_path / "a", batches, [1, 3]), 8)  # theirs: 0..7, 8..15, active 16
    _upload(side.store, _replica(tmp_path / "b", batches, [5]), 0, first_offset=16)  # ours: 0..23, active 24
    ours = {k for k, _ in side.store.list_keys(side.store.keyspace.partition_prefix("t", 0)) if f"{0:020d}." in k}
    assert side.key(0) in ours
    RemoteRetention(side.registry, side.store, RemoteRetentionSettings(bytes=10**12), RetryPolicy(attempts=3, base_s=0.01)).run_once()
    assert {k for k, _ in side.store.list_keys(side.store.keyspace.partition_prefix("t", 0)) if f"{0:020d}." in k} == ours
    assert [r[1] for r in side.ranges()] == [8]


def test_an_unregistered_prefix_left_by_a_dead_leader_is_adopted(side: Side, tmp_path: Path) -> None:
    """The old leader uploaded [0..19] and died before registering; our replica rolled later
    ([0..27]). No wait, no gap: its object is registered, our offsets past it as a tail."""
    batches = [_batch(i, 1024) for i in range(12)]
    old = _replica(tmp_path / "a", batches, [4, 9])  # 0..19, 20..39, 40..
    new = _replica(tmp_path / "b", batches, [6])  # 0..27, 28..
    theirs, _ = _upload(side.store, old, 0)  # uploaded, never registered
    uploader = side.uploader(tmp_path / "b")
    began = time.monotonic()
    _drive(uploader, lambda: side.registry.coverage("t", 0).next_offset == 28)
    assert time.monotonic() - began < two_leaders.ABANDONED_AFTER_S / 4
    assert side.ranges() == [(0, 0, 19), (20, 20, 27)]
    assert side.registry.gaps("t", 0) == []
    adopted = side.registry.segments("t", 0)[0]
    assert (adopted.object_key, adopted.checksum) == (theirs.object_key, theirs.checksum)
    tail = side.s3.get_object(Bucket=side.bucket, Key=side.key(20))["Body"].read()
    assert tail == (new / f"{0:020d}.log").read_bytes()[theirs.size :]


def test_a_tail_whose_key_holds_an_abandoned_upload_goes_up_after_the_wait(side: Side, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old leader registered [0..19] and left an unregistered [20..39]; our replica has
    [0..27]: our tail [20..27] finds key 20 taken by an object that is no prefix of it. Once it is
    abandoned it is deleted (If-Match: its ETag) and our tail takes the key: never stalled."""
    monkeypatch.setattr(two_leaders, "ABANDONED_AFTER_S", 1.0)
    batches = [_batch(i, 1024) for i in range(12)]
    old = _replica(tmp_path / "a", batches, [4, 9])
    new = _replica(tmp_path / "b", batches, [6])
    side.register_theirs(old, 0)
    _upload(side.store, old, 20)  # uploaded, never registered
    uploader = side.uploader(tmp_path / "b")
    _drive(uploader, lambda: side.registry.coverage("t", 0).next_offset == 28)
    assert side.ranges() == [(0, 0, 19), (20, 20, 27)]
    assert side.registry.gaps("t", 0) == []
    body = side.s3.get_object(Bucket=side.bucket, Key=side.key(20))["Body"].read()
    assert body == (new / f"{0:020d}.log").read_bytes()[-len(body) :] and side.registry.segments("t", 0)[1].size == len(body)


@pytest.mark.parametrize("roll_after", [[6], [2, 6]], ids=["tail", "straddling"])
def test_a_diverged_replica_is_not_registered_past_the_other_leaders_batches(side: Side, tmp_path: Path, roll_after: list[int]) -> None:
    """Our batch 16..19 holds other records than the registered segment's last batch (acks=1, an
    unclean election): registering our offsets from 20 would splice two histories. Refused, loudly."""
    batches = [_batch(i, 1024) for i in range(12)]
    ours = list(batches)
    ours[4] = _batch(4, 1024)  # other values, the same offsets
    old = _replica(tmp_path / "a", batches, [4, 9])
    _replica(tmp_path / "b", ours, roll_after)  # tail: 0..27 (key 0 taken); straddling: 0..11, 12..27 (straddles 20)
    side.register_theirs(old, 0)
    uploader = side.uploader(tmp_path / "b")
    with pytest.raises(ReplicaDivergedError, match="diverged") as diverged:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(min(uploader.sync(), 0.05))
    assert "CRC" in str(diverged.value)
    assert side.ranges() == [(0, 0, 19)]


def test_offset_wm_never_moves_back_to_a_straddling_segments_base(side: Side, tmp_path: Path) -> None:
    """offset.wm says 20 (the other leader's last segment, [20..39]); our segment [12..47]
    straddles 40 and is registered from there; offset.wm stays at 20, not 12."""
    batches = [_batch(i, 1024) for i in range(14)]
    old = _replica(tmp_path / "a", batches, [4, 9])
    _replica(tmp_path / "b", batches, [2, 11])  # 0..11, 12..47, active 48
    side.register_theirs(old, 0)
    side.register_theirs(old, 20)
    side.store.write_watermark("t", 0, 20)
    uploader = side.uploader(tmp_path / "b")
    _drive(uploader, lambda: side.registry.coverage("t", 0).next_offset == 48)
    assert side.ranges() == [(0, 0, 19), (20, 20, 39), (40, 12, 47)]
    straddling = side.registry.segments("t", 0)[-1]
    assert (straddling.range_records, straddling.records_in_range) == (8, 8)  # batches 40..43, 44..47
    assert side.store.read_watermark("t", 0) == 20
