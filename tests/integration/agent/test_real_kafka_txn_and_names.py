"""The agent on what Apache Kafka really writes, continued (``test_real_kafka_log``): transactions from a
real transactional producer, the other names a log.dir holds, and a compacted topic.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.integration.agent.test_real_kafka_log import (
    SEGMENT_BYTES,
    assert_uploaded_as_written,
    bounds,
    live_bases,
    local_bounds,
    partition_keys,
    s3_body,
    segment_files,
)
from tests.support.agent_env import agent_settings, only_topics, registry_for, unique_topic, wait_for
from tests.support.kafka_clients import create_topic, produce_numbered, value_for
from tiered_kafka.format import producer_snapshot, txn_index
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.registry import NO_OPEN_TXN
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration


# -- transactions -------------------------------------------------------------------------------


class _Transactions:
    """A real transactional producer (confluent-kafka) and a plain one on one partition; every
    delivered offset recorded, per transaction and for the plain records."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        common = {"bootstrap.servers": bootstrap, "linger.ms": 2, "batch.num.messages": 7, "batch.size": 15_000}
        self.txn = Producer({**common, "transactional.id": unique_topic("tid")})
        self.plain = Producer(common)
        self.txn.init_transactions(60)
        self.offsets: dict[str, list[int]] = {}
        self.errors: list[Any] = []

    def _send(self, producer: Producer, name: str, count: int) -> None:
        found = self.offsets.setdefault(name, [])

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                found.append(msg.offset())

        for i in range(count):
            producer.produce(self.topic, key=f"{name}-{i}".encode(), value=value_for(i), partition=0, on_delivery=delivered)
        assert producer.flush(60) == 0 and not self.errors, self.errors[:3]

    def begin(self, name: str, count: int) -> None:
        self.txn.begin_transaction()
        self._send(self.txn, name, count)

    def plain_records(self, name: str, count: int) -> None:
        self._send(self.plain, name, count)

    def plain_until_rolled_past(self, name: str, directory: Path, offset: int, timeout_s: float = 60) -> None:
        """Plain records, a few at a time, until the partition's active segment starts above ``offset``
        (seen on disk): Kafka rolls by segment.bytes at an append, and how many records fill a segment
        depends on batching, so the test drives the roll instead of counting records."""
        deadline = time.monotonic() + timeout_s
        while max(live_bases(directory)) <= offset:
            assert time.monotonic() < deadline, f"no roll past offset {offset} in {directory} within {timeout_s} s"
            self._send(self.plain, name, 10)

    def close(self) -> None:
        del self.txn, self.plain


def _control_offsets(directory: Path) -> list[int]:
    """Offsets of the control batches (transaction markers) in the partition's segments on disk now
    (the active one may end inside a batch being appended)."""
    return [
        b.base_offset for path in segment_files(directory).values()
        for b in iter_batches(path.read_bytes(), allow_truncated_tail=True) if b.is_control
    ]  # fmt: skip


def test_transactions_as_kafka_writes_them_are_uploaded_and_counted(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """A real transactional producer: Kafka's coordinator writes one-record control batches (COMMIT,
    ABORT), appends a ``.txnindex`` entry (producer, first offset, marker offset, LSO) to the segment
    holding each ABORT marker, and at every roll writes ``{next base}.snapshot`` holding each
    producer's ``currentTxnFirstOffset``. The registry counts the segment's markers and ``.txnindex``
    entries and records the first offset of the earliest transaction open after it; the
    ``.txnindex`` and the snapshot go up beside the ``.log`` byte for byte."""
    bootstrap = kafka_server.bootstrap_servers
    topic = unique_topic("txn")
    create_topic(bootstrap, topic, 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    directory = kafka_server.log_dir / f"{topic}-0"
    settings = agent_settings(kafka_server.log_dir, redis_server, s3_server, s3_bucket, topics=only_topics(topic))
    registry = registry_for(settings)
    writer = _Transactions(bootstrap, topic)
    try:
        writer.begin("committed", 10)
        writer.txn.commit_transaction(60)
        writer.begin("aborted", 10)
        writer.txn.abort_transaction(60)
        writer.begin("aborted-later", 10)
        writer.plain_until_rolled_past("plain-1", directory, max(writer.offsets["aborted-later"]))  # rolls while the transaction is open
        writer.txn.abort_transaction(60)  # its marker and .txnindex entry land in a later segment than its records
        writer.begin("committed-later", 5)
        writer.plain_records("plain-2", 120)
        writer.txn.commit_transaction(60)
        # the coordinator writes the markers after EndTxn returns: wait for the fourth on disk, then roll past it
        last_marker = wait_for(lambda: len(found := _control_offsets(directory)) == 4 and max(found), what="the last COMMIT marker on disk")
        writer.plain_until_rolled_past("plain-3", directory, last_marker)
    finally:
        writer.close()
    txns = {name: writer.offsets[name] for name in ("committed", "aborted", "aborted-later", "committed-later")}

    files = segment_files(directory)
    active = max(live_bases(directory))
    markers: list[tuple[int, int]] = []  # (offset, producer id) of every control batch
    for base, path in files.items():
        markers += [(b.base_offset, b.producer_id) for b in iter_batches(path.read_bytes()) if b.is_control]
    marker_offsets = [offset for offset, _pid in markers]
    assert len(markers) == 4 and all(b.record_count == 1 for p in files.values() for b in iter_batches(p.read_bytes()) if b.is_control)
    ends = {name: next(m for m in marker_offsets if m > max(offsets)) for name, offsets in txns.items()}  # each transaction's marker
    assert ends["committed"] == max(txns["committed"]) + 1  # nothing else was written meanwhile

    with Agent(settings) as agent:
        rotated = local_bounds(directory)
        assert rotated[-1][1] == active - 1 and active > ends["committed-later"]
        wait_for(lambda: bounds(registry.segments(topic, 0)) == rotated, what="the transactional log registered")
        entries = registry.segments(topic, 0)
        assert_uploaded_as_written(s3_server, s3_bucket, agent, entries, directory)
        seen_aborts: list[txn_index.AbortedTxn] = []
        for entry in entries:
            in_segment = [o for o in marker_offsets if entry.base_offset <= o <= entry.last_offset]
            assert entry.control_records == len(in_segment)
            local_txnindex = directory / f"{entry.base_offset:020d}.txnindex"
            aborted = txn_index.parse(local_txnindex.read_bytes()) if local_txnindex.exists() else []
            assert entry.aborted_txns == len(aborted)
            if local_txnindex.exists():
                assert "txnindex" in entry.files
                remote = s3_body(s3_server, s3_bucket, agent.keyspace.segment_key(topic, 0, entry.base_offset, FileKind.TXNINDEX))
                assert remote == local_txnindex.read_bytes()
            seen_aborts += aborted
            snapshot = directory / f"{entry.next_offset:020d}.snapshot"
            assert "snapshot" in entry.files
            assert s3_body(s3_server, s3_bucket, agent.keyspace.segment_key(topic, 0, entry.base_offset, FileKind.SNAPSHOT)) == snapshot.read_bytes()
            open_after = [min(offsets) for name, offsets in txns.items() if min(offsets) <= entry.last_offset < ends[name]]
            assert entry.open_txn_first_offset == (min(open_after) if open_after else NO_OPEN_TXN), entry
            state = {e.producer_id: e.current_txn_first_offset for e in producer_snapshot.parse(snapshot.read_bytes())}
            assert sorted(o for o in state.values() if o >= 0) == sorted(open_after)
        pid = markers[0][1]
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in seen_aborts] == [
            (pid, min(txns["aborted"]), ends["aborted"]),
            (pid, min(txns["aborted-later"]), ends["aborted-later"]),
        ]
        later = next(e for e in entries if e.contains(ends["aborted-later"]))
        assert later.base_offset > min(txns["aborted-later"])  # the entry sits with the marker, not the records
        assert any(e.open_txn_first_offset == min(txns["aborted-later"]) for e in entries)


# -- the other names in a log.dir ---------------------------------------------------------------


def test_other_names_in_the_log_dir_are_never_uploaded_nor_an_error(start_kafka, redis_server, s3_server, s3_bucket, tmp_path, caplog) -> None:
    """Kafka's log.dir holds more than ``{topic}-{partition}`` directories of segments:
    ``partition.metadata`` and ``leader-epoch-checkpoint`` in each; ``{tp}.{id}-delete`` for a deleted
    topic until file.delete.delay.ms passes; ``{tp}.{id}-stray`` for a partition directory the
    metadata does not assign to this broker (KRaft, found at startup); ``{tp}.{id}-future`` while
    AlterReplicaLogDirs moves a replica (made by hand here: confluent-kafka has no
    AlterReplicaLogDirs). None is uploaded, none is an error, and the partitions beside them go on."""
    caplog.set_level(logging.INFO, logger="tiered_kafka_agent")
    logs = tmp_path / "logs"
    broker = start_kafka(logs)
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "keep", 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    create_topic(bootstrap, "gone", 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    settings = agent_settings(logs, redis_server, s3_server, s3_bucket, topics=only_topics("keep", "gone"))
    registry = registry_for(settings)
    keep = logs / "keep-0"

    def keep_registered() -> bool:
        return bounds(registry.segments("keep", 0)) == local_bounds(keep)

    with Agent(settings) as agent:
        produce_numbered(bootstrap, "keep", 0, 150)
        produce_numbered(bootstrap, "gone", 0, 150)
        gone_bounds = local_bounds(logs / "gone-0")
        wait_for(lambda: bounds(registry.segments("gone", 0)) == gone_bounds and keep_registered(), what="both topics registered")
        gone_keys = partition_keys(s3_server, s3_bucket, agent, "gone", 0)
        assert (keep / "partition.metadata").is_file() and (keep / "leader-epoch-checkpoint").is_file()

        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            for future in admin.delete_topics(["gone"]).values():
                future.result(timeout=30)
        finally:
            del admin
        deleting = wait_for(lambda: list(logs.glob("gone-0.*-delete")), what="Kafka renaming gone-0 to gone-0.{id}-delete")
        assert not (logs / "gone-0").exists() and list(deleting[0].glob("*.log"))
        future = logs / f"keep-0.{uuid.uuid4().hex}-future"
        shutil.copytree(keep, future)
        produce_numbered(bootstrap, "keep", 150, 150)
        wait_for(keep_registered, what="keep goes on beside them")
        assert deleting[0].is_dir()  # still there: Kafka's file.delete.delay.ms (60 s) has not passed
    # an abandoned -future directory is made the current log at Kafka's next start
    # (LogManager.recoverAbandonedFutureLogs): a real one lives in another log.dir, so ours goes first
    shutil.rmtree(future)

    broker.stop()  # a directory the metadata does not assign to this broker: Kafka marks it stray at startup
    shutil.copytree(keep, logs / "keep-7")
    broker.start()
    stray = wait_for(lambda: list(logs.glob("keep-7.*-stray")), timeout_s=60, what="Kafka renaming keep-7 to keep-7.{id}-stray")
    with Agent(settings) as agent:
        produce_numbered(bootstrap, "keep", 300, 150)
        wait_for(keep_registered, what="keep goes on after the restart")
        assert stray[0].is_dir() and deleting[0].is_dir()
        assert partition_keys(s3_server, s3_bucket, agent, "gone", 0) == gone_keys  # nothing more for the deleted topic
        prefixes = s3_server.client().list_objects_v2(Bucket=s3_bucket)["Contents"]
        dirs = {key["Key"].split("/")[-2] for key in prefixes if "/" in key["Key"]} - {"gaps"}
        assert dirs <= {"keep-0", "gone-0", agent.settings.cluster}, dirs
        assert registry.topics() == {"keep": [0], "gone": [0]}
        for topic in ("keep", "gone"):
            assert registry.gaps(topic, 0) == []
            assert agent.metrics.value("tiered_kafka_agent_upload_failures_total", topic=topic) == 0
    problems = [r.getMessage() for r in caplog.records if r.name.startswith("tiered_kafka_agent") and r.levelno >= logging.WARNING]
    assert problems == []


# -- a compacted topic --------------------------------------------------------------------------


def test_compacted_topic_is_skipped_with_one_warning_in_kraft_mode(kafka_server, redis_server, s3_server, s3_bucket, caplog) -> None:
    """What happens today: with leadership from the cluster (``kraft`` here; ``zookeeper`` alike) a
    topic whose cleanup.policy contains ``compact`` is not uploaded; one WARNING names it, and a plain
    topic beside it is uploaded as usual. With ``static`` leadership the agent has no broker to read
    topic configs from, so it uploads a compacted topic's segments as first written (the cleaner's
    later rewrites under the same base offsets are not uploaded again)."""
    caplog.set_level(logging.INFO, logger="tiered_kafka_agent")
    bootstrap = kafka_server.bootstrap_servers
    compacted, plain = unique_topic("compacted"), unique_topic("plain")
    create_topic(bootstrap, compacted, 1, **{"segment.bytes": str(SEGMENT_BYTES), "cleanup.policy": "compact"})
    create_topic(bootstrap, plain, 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    include = only_topics(compacted, plain)
    kraft = agent_settings(
        kafka_server.log_dir, redis_server, s3_server, s3_bucket, broker_id=kafka_server.node_id, topics=include,
        leadership={"mode": "kraft", "bootstrap_servers": bootstrap, "poll_interval_s": 0.5},
    )  # fmt: skip
    registry = registry_for(kraft)
    with Agent(kraft) as agent:
        produce_numbered(bootstrap, compacted, 0, 200)
        produce_numbered(bootstrap, plain, 0, 200)
        plain_bounds = local_bounds(kafka_server.log_dir / f"{plain}-0")
        wait_for(lambda: bounds(registry.segments(plain, 0)) == plain_bounds, what="the plain topic registered")
        assert len(local_bounds(kafka_server.log_dir / f"{compacted}-0")) >= 3
        time.sleep(2.0)  # four more leadership polls: the compacted topic must still be left alone
        assert agent.led_partitions() == [f"{plain}-0"]
        assert registry.segments(compacted, 0) == [] and registry.coverage_start(compacted, 0) is None
        assert partition_keys(s3_server, s3_bucket, agent, compacted, 0) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and compacted in r.getMessage()]
    assert warnings == [f"topic {compacted} has cleanup.policy=compact: compacted topics are not uploaded, skipping its partitions"]

    static = agent_settings(kafka_server.log_dir, redis_server, s3_server, s3_bucket, topics=only_topics(compacted))
    static_registry = registry_for(static)
    with Agent(static):
        rotated = local_bounds(kafka_server.log_dir / f"{compacted}-0")
        wait_for(lambda: bounds(static_registry.segments(compacted, 0))[: len(rotated)] == rotated, what="static leadership uploading the compacted topic")
