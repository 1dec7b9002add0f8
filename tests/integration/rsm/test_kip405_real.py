"""Issue 24, KIP-405 from Kafka itself: a real broker tiers its segments, and our gateway's ``kip405`` cluster
serves them equal to what the broker serves of the same offsets through its RemoteStorageManager.

One KRaft broker per Kafka line for the module (``tiered_kafka_dev.services._kip405``: Aiven's RSM is not
served by the Maven registry here; 3.9.2 runs Kafka's own ``LocalTieredStorage``, 4.4.0 our directory
RemoteStorageManager, both keeping the files Kafka hands them as they are) with
``remote.log.storage.system.enable``, Kafka's TopicBasedRemoteLogMetadataManager (``__remote_log_metadata``,
3 partitions), ``local.retention.ms`` 1 s and retention checked every second. Its ``RemoteLogManager`` copies
every rolled segment, publishes the copy in ``__remote_log_metadata``, and local retention then deletes the
segments from the broker's disk: a plain confluent-kafka consumer reading those offsets is served by the
broker through the RemoteStorageManager.

Before its records' second half the broker restarts (the leader epoch moves). A test of its own runs Kafka's
remote expiry on a fourth topic: retention by size, DeleteRecords, the topic's deletion.

The files the broker handed the RemoteStorageManager (``LogSegmentData``: segment, indexes, producer
snapshot, leader-epoch checkpoint), which LocalTieredStorage keeps as they came, are laid out in SeaweedFS
the way Aiven's RSM writes them (``tests/support/rsm_writer.py``) three times, as three broker-wide RSM
configurations would: ``plain/``, ``zstd/`` (compression per chunk) and ``encrypted/`` (AES-GCM chunks, data
key wrapped with an RSA key pair written here in PEM). The gateway serves each prefix as a ``kip405``
cluster whose live segments come from the broker's real ``__remote_log_metadata``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.support.kafka_clients import create_topic, produce
from tests.support.rsm_writer import RsmSegmentObjects, layout_rsm_segment, make_rsa_key_pair, upload_rsm_segment
from tiered_kafka.bulk import BulkReader
from tiered_kafka.consumer import TieredConsumer
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.rsm.remote_log_metadata import (
    TOPIC as METADATA_TOPIC,
    LiveSegments,
    RemoteLogMetadataRecord,
    RemoteLogSegmentMetadataRecord,
    RemoteLogSegmentMetadataSnapshotRecord,
    RemoteLogSegmentMetadataUpdateRecord,
    RemoteLogSegmentState,
    decode_record,
    metadata_partition,
)
from tiered_kafka_dev.services import KafkaServer
from tiered_kafka_dev.services._kip405 import KIP405_LINES, TIERED_TOPIC_DEFAULTS, RemoteFileset, kip405_broker_config, remote_filesets, rsm_classpath
from tiered_kafka_dev.services._process import free_ports
from tiered_kafka_dev.stack import GatewayServer
from tiered_kafka_gateway.config import load_settings

pytestmark = pytest.mark.integration

METADATA_PARTITIONS = 3
RECORDS_TOPIC = "kip405-records"  # 2 partitions, keys/values/headers of all kinds, lz4 and uncompressed batches
TXN_TOPIC = "kip405-txn"  # committed and aborted transactions between plain records
RECORDS_PER_PARTITION = 1500
SEGMENT_BYTES = 32_768
CHUNK_SIZE = 8192
KEY_ID = "kip405-key"
VARIANTS: dict[str, dict[str, bool]] = {
    "plain": {"compression": False, "encryption": False},
    "zstd": {"compression": True, "encryption": False},
    "encrypted": {"compression": False, "encryption": True},
}
URL_SECRET = "k" * 40
TPS = [(RECORDS_TOPIC, 0), (RECORDS_TOPIC, 1), (TXN_TOPIC, 0)]

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]], int]  # offset, key, value, headers, timestamp


@dataclass
class Kip405Stack:
    version: str
    broker: KafkaServer
    storage_dir: Path
    gateway_url: str
    metadata: list[tuple[int, RemoteLogMetadataRecord]]  # (partition of __remote_log_metadata, record), in order
    live: dict[tuple[str, int], list[RemoteLogSegmentMetadataRecord]]
    filesets: dict[str, RemoteFileset]  # by segment id
    s3_server: Any
    bucket: str
    key_pair: tuple[bytes, bytes]  # (private, public) PEM
    layouts: dict[str, RsmSegmentObjects] = field(default_factory=dict)  # the plain layout, by segment id
    _broker_reads: dict[tuple[str, int, str], list[Record]] = field(default_factory=dict)

    def remote_end(self, topic: str, partition: int) -> int:
        """The last offset of the partition's remote segments (the broker's disk holds none of 0..this)."""
        return self.live[(topic, partition)][-1].end_offset

    def broker_read(self, topic: str, partition: int, isolation: str = "read_uncommitted") -> list[Record]:
        """The broker's answer for offsets 0..remote_end (read once per module)."""
        key = (topic, partition, isolation)
        if key not in self._broker_reads:
            self._broker_reads[key] = _broker_read(self.broker.bootstrap_servers, topic, partition, self.remote_end(topic, partition), isolation)
        return self._broker_reads[key]


def _record_value(partition: int, i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]:
    key = None if i % 7 == 0 else f"p{partition}-k{i}".encode()
    value = None if i % 11 == 0 else (f"v{i}:" + "x" * (i % 97) + "é").encode()
    headers = [("h", f"{i}".encode()), ("n", b"")] if i % 5 == 0 else None
    return key, value, headers


def _produce_records(bootstrap: str, compression: str, lo: int, hi: int) -> None:
    """Records lo..hi-1 of each partition in ``compression`` batches, every tenth with an old timestamp of its own
    (so timestamps are not monotonic)."""
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5, "batch.size": 15_000, "acks": "all"})
    errors: list[Any] = []
    try:
        for partition in (0, 1):
            for i in range(lo, hi):
                key, value, headers = _record_value(partition, i)
                extra = {"timestamp": 1_700_000_000_000 + i} if i % 10 == 0 else {}
                producer.produce(RECORDS_TOPIC, value=value, key=key, partition=partition, headers=headers,
                                 on_delivery=lambda err, _m: err and errors.append(err), **extra)
                producer.poll(0)
        assert producer.flush(60) == 0 and not errors, errors[:3]
    finally:
        del producer


def _produce_transactions(bootstrap: str) -> None:
    """Rounds of: a committed transaction, plain records, an aborted transaction (each ~ a few KiB)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "kip405-txn", "linger.ms": 5, "batch.size": 15_000})
    try:
        producer.init_transactions(30)
        for round_ in range(12):
            for commit in (True, False):
                producer.begin_transaction()
                for i in range(40):
                    producer.produce(TXN_TOPIC, key=f"r{round_}-{commit}-{i}".encode(), value=(f"txn {round_} {commit} {i} " * 8).encode())
                producer.flush(30)  # abort_transaction purges what is still queued: these records reach the log
                if commit:
                    producer.commit_transaction(30)
                else:
                    producer.abort_transaction(30)
        producer.flush(30)
    finally:
        del producer
    produce(bootstrap, TXN_TOPIC, [(0, f"plain-{i}".encode(), (f"plain {i} " * 10).encode()) for i in range(200)])


def _read_metadata(bootstrap: str) -> list[tuple[int, RemoteLogMetadataRecord]]:
    """Every record of ``__remote_log_metadata`` (all partitions, up to their high watermarks), decoded."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip405-metadata-reader", "enable.auto.commit": False})
    try:
        highs = {}
        for p in range(METADATA_PARTITIONS):
            highs[p] = consumer.get_watermark_offsets(TopicPartition(METADATA_TOPIC, p), timeout=30)[1]
        consumer.assign([TopicPartition(METADATA_TOPIC, p, 0) for p, high in highs.items() if high > 0])
        out: list[tuple[int, RemoteLogMetadataRecord]] = []
        seen = dict.fromkeys(highs, 0)
        deadline = time.monotonic() + 60
        while any(seen[p] < high for p, high in highs.items()):
            assert time.monotonic() < deadline, (seen, highs)
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                assert message.key() is None  # ProducerManager publishes with a null key
                out.append((message.partition(), decode_record(message.value())))
                seen[message.partition()] = message.offset() + 1
        return out
    finally:
        consumer.close()


def _live_segments(records: list[tuple[int, RemoteLogMetadataRecord]]) -> dict[tuple[str, int], list[RemoteLogSegmentMetadataRecord]]:
    live = LiveSegments()
    for _, record in records:
        live.apply(record)
    assert live.problem_count == 0, list(live.problems)
    return {(t.topic, t.partition): live.segments(t.topic_id, t.partition) for t in live.partitions()}


def _local_bases(log_dir: Path, topic: str, partition: int) -> list[int]:
    """Base offsets of the segments still on the broker's disk (``.log``, not ``.log.deleted``)."""
    return sorted(int(p.stem) for p in (log_dir / f"{topic}-{partition}").glob("*.log"))


def _wait_tiered(broker: KafkaServer, timeout_s: float = 240) -> tuple[list[tuple[int, RemoteLogMetadataRecord]], dict[tuple[str, int], list[RemoteLogSegmentMetadataRecord]]]:
    """Until every partition keeps only its active segment on disk and the finished copies cover every
    offset below it, from 0, without a hole."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = _read_metadata(broker.bootstrap_servers)
        live = _live_segments(records)
        done = True
        for tp in TPS:
            bases = _local_bases(broker.log_dir, *tp)
            segments = live.get(tp, [])
            covered = bool(segments) and segments[0].start_offset == 0 and all(a.end_offset + 1 == b.start_offset for a, b in zip(segments, segments[1:]))
            done &= len(bases) == 1 and covered and segments[-1].end_offset + 1 == bases[0]
        if done:
            return records, live
        if time.monotonic() > deadline:
            raise AssertionError(f"segments not tiered within {timeout_s} s: " + str({tp: (_local_bases(broker.log_dir, *tp), [(s.start_offset, s.end_offset) for s in live.get(tp, [])]) for tp in TPS}))
        time.sleep(1)


def _stage(fileset: RemoteFileset, directory: Path) -> Path:
    """The fileset under Kafka's log.dir names, as ``layout_rsm_segment`` reads a segment: ``{base}.log``,
    ``.index``, ``.timeindex``, ``.txnindex``, ``{next}.snapshot`` and ``leader-epoch-checkpoint``."""
    directory.mkdir(parents=True)
    log = directory / f"{fileset.start_offset:020d}.log"
    shutil.copyfile(fileset.files["log"], log)
    last = max(b.last_offset for b in iter_batches(log.read_bytes()))
    names = {"index": f"{fileset.start_offset:020d}.index", "timeindex": f"{fileset.start_offset:020d}.timeindex",
             "txnindex": f"{fileset.start_offset:020d}.txnindex", "snapshot": f"{last + 1:020d}.snapshot",
             "leader_epoch_checkpoint": "leader-epoch-checkpoint"}
    for suffix, name in names.items():
        if suffix in fileset.files:
            shutil.copyfile(fileset.files[suffix], directory / name)
    return log


def _gateway(s3_server: Any, bucket: str, bootstrap: str, private_pem: bytes, **cache: float) -> GatewayServer:
    """The gateway on uvicorn with one ``kip405`` cluster per variant (prefix ``{variant}/``), each reading its
    live segments from the broker's ``__remote_log_metadata`` (re-read after ``cache.listing_ttl_s``)."""
    port = free_ports(1)[0]
    s3 = {"bucket": bucket, "endpoint_url": s3_server.endpoint_url, "region": s3_server.region,
          "access_key_id": s3_server.access_key, "secret_access_key": s3_server.secret_key}
    clusters = {
        variant: {"kind": "kip405", "bootstrap_servers": bootstrap,
                  "rsm": {**s3, "key_prefix": f"{variant}/", "key_ring": {KEY_ID: private_pem.decode()}}}
        for variant in VARIANTS
    }
    settings = load_settings(clusters=clusters, rsm_url_secret=URL_SECRET, public_url=f"http://127.0.0.1:{port}", cache=cache)
    return GatewayServer(settings, port)


def _upload(client: Any, bucket: str, variant: str, fileset: RemoteFileset, public_pem: bytes, staging: Path) -> RsmSegmentObjects:
    """One copied segment laid out as Aiven's RSM configured as ``variant`` writes it, under ``{variant}/``."""
    how = VARIANTS[variant]
    log = _stage(fileset, staging / variant / fileset.segment_id)
    objects = layout_rsm_segment(
        prefix=f"{variant}/", topic=fileset.topic, topic_id=fileset.topic_id, partition=fileset.partition, segment_log=log,
        segment_id=fileset.segment_id, chunk_size=CHUNK_SIZE, compression=how["compression"],
        encryption_key=(KEY_ID, public_pem) if how["encryption"] else None, broker_id=1,
    )
    upload_rsm_segment(client, bucket, objects)
    return objects


@pytest.fixture(scope="module", params=sorted(KIP405_LINES))
def stack(request: pytest.FixtureRequest, s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kip405Stack]:
    """One broker per Kafka line (``KIP405_LINES``: 3.9.2 with Kafka's LocalTieredStorage, 4.4.0 with ours)."""
    version: str = request.param
    root = tmp_path_factory.mktemp(f"kip405-{version}")
    storage_dir = root / "remote"
    broker = KafkaServer(log_dir=root / "logs", version=version, config=kip405_broker_config(version, storage_dir, metadata_partitions=METADATA_PARTITIONS),
                         extra_classpath=rsm_classpath(version))
    broker.start()
    gateway: GatewayServer | None = None
    try:
        bootstrap = broker.bootstrap_servers
        topic_configs = {**TIERED_TOPIC_DEFAULTS, "segment.bytes": str(SEGMENT_BYTES)}
        create_topic(bootstrap, RECORDS_TOPIC, 2, version=version, **topic_configs)
        create_topic(bootstrap, TXN_TOPIC, 1, version=version, **topic_configs)
        _produce_records(bootstrap, "lz4", 0, RECORDS_PER_PARTITION // 2)
        # a restart: leadership goes away and comes back, so the partitions' segments carry two leader epochs
        broker.restart()
        _produce_records(bootstrap, "none", RECORDS_PER_PARTITION // 2, RECORDS_PER_PARTITION)
        _produce_transactions(bootstrap)
        records, live = _wait_tiered(broker)
        filesets = {f.segment_id: f for f in remote_filesets(storage_dir)}

        private_pem, public_pem = make_rsa_key_pair()
        bucket = s3_server.create_bucket(f"kip405-real-{time.time_ns() % 10**9}")
        client = s3_server.client()
        layouts: dict[str, RsmSegmentObjects] = {}
        for variant in VARIANTS:
            for segments in live.values():
                for segment in segments:
                    objects = _upload(client, bucket, variant, filesets[segment.segment_id], public_pem, root / "staged")
                    if variant == "plain":
                        layouts[segment.segment_id] = objects

        gateway = _gateway(s3_server, bucket, bootstrap, private_pem)
        yield Kip405Stack(version, broker, storage_dir, gateway.url, records, live, filesets, s3_server, bucket, (private_pem, public_pem), layouts)
    finally:
        if gateway is not None:
            gateway.stop()
        broker.stop()


def _as_record(message: Any) -> Record:
    return (message.offset(), message.key(), message.value(), list(message.headers() or []), message.timestamp()[1])


def _broker_read(bootstrap: str, topic: str, partition: int, last: int, isolation: str = "read_uncommitted", start: int = 0) -> list[Record]:
    """A plain confluent-kafka consumer's read of offsets start..last through the broker (which fetches them
    through its RemoteStorageManager: they are no longer on its disk)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kip405-plain-{topic}-{partition}", "enable.auto.commit": False,
                         "isolation.level": isolation, "auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        out: list[Record] = []
        deadline = time.monotonic() + 120
        while not out or out[-1][0] < last:
            assert time.monotonic() < deadline, f"the broker served {len(out)} records up to {out[-1][0] if out else None}, not to {last}"
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                out.append(_as_record(message))
        return [r for r in out if r[0] <= last]
    finally:
        consumer.close()


def _gateway_read(stack: Kip405Stack, variant: str, topic: str, partition: int, last: int, start: int = 0, url: str | None = None) -> list[Record]:
    """TieredConsumer in REMOTE_ONLY through the gateway's (``url``, default the module's) ``variant`` cluster, offsets start..last."""
    consumer = TieredConsumer({
        "bootstrap.servers": stack.broker.bootstrap_servers, "group.id": f"kip405-tiered-{variant}", "enable.auto.commit": False,
        "tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": url or stack.gateway_url, "tiered.cluster": variant,
        "isolation.level": "read_uncommitted", "auto.offset.reset": "error",
    })
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        out: list[Record] = []
        deadline = time.monotonic() + 120
        while not out or out[-1][0] < last:
            assert time.monotonic() < deadline, f"the gateway served {len(out)} records up to {out[-1][0] if out else None}, not to {last}"
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                out.append(_as_record(message))
        return out
    finally:
        consumer.close()


def test_remote_log_metadata_is_decoded_as_kafka_wrote_it(stack: Kip405Stack) -> None:
    """Every record Kafka's TopicBasedRemoteLogMetadataManager wrote decodes; each sits in the metadata partition
    ``metadata_partition`` computes; every copy went STARTED -> FINISHED; and the finished segments are exactly
    the files the broker handed the RemoteStorageManager, with their offsets, sizes, timestamps and epochs."""
    started = {r.segment_id: r for _, r in stack.metadata if isinstance(r, RemoteLogSegmentMetadataRecord)}
    updates = [r for _, r in stack.metadata if isinstance(r, RemoteLogSegmentMetadataUpdateRecord)]
    assert started and {type(r) for _, r in stack.metadata} == {RemoteLogSegmentMetadataRecord, RemoteLogSegmentMetadataUpdateRecord}
    for partition, record in stack.metadata:
        tip = record.topic_id_partition  # type: ignore[union-attr]
        assert partition == metadata_partition(tip.topic_id, tip.partition, METADATA_PARTITIONS), (partition, tip)
    assert {r.segment_id for r in updates if r.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED} == set(started)
    assert all(r.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED for r in started.values())

    # the restart moved the leader epoch (inside a segment, or at a roll: Kafka decides)
    for partition in (0, 1):
        epochs = [dict(s.segment_leader_epochs) for s in stack.live[(RECORDS_TOPIC, partition)]]
        assert len({epoch for e in epochs for epoch in e}) > 1, epochs
    live_ids = {s.segment_id for segments in stack.live.values() for s in segments}
    assert live_ids == set(stack.filesets) == set(started)
    for (topic, partition), segments in stack.live.items():
        for segment in segments:
            fileset = stack.filesets[segment.segment_id]
            assert (fileset.topic, fileset.partition, fileset.topic_id, fileset.start_offset) == (topic, partition, segment.topic_id_partition.topic_id, segment.start_offset)
            log = fileset.files["log"].read_bytes()
            batches = list(iter_batches(log))
            assert segment.end_offset == batches[-1].last_offset
            assert segment.segment_size_in_bytes == len(log)
            assert segment.max_timestamp_ms == max(b.max_timestamp for b in batches)
            assert segment.broker_id == stack.broker.node_id and segment.custom_metadata is None
            # what the test writer derives from the segment alone is what Kafka published
            written = stack.layouts[segment.segment_id].metadata
            assert (written.start_offset, written.end_offset, written.max_timestamp_ms, written.segment_leader_epochs, written.segment_size_in_bytes) == (
                segment.start_offset, segment.end_offset, segment.max_timestamp_ms, segment.segment_leader_epochs, segment.segment_size_in_bytes)
        # the broker's disk no longer holds any of these offsets
        assert _local_bases(stack.broker.log_dir, topic, partition)[0] == segments[-1].end_offset + 1


def test_the_writers_indexes_are_the_files_kafka_handed_the_rsm(stack: Kip405Stack) -> None:
    """The leader-epoch checkpoint Kafka cut for each segment (``LogSegmentData.leaderEpochIndex``) is the one
    the writer derives from the partition's checkpoint; a transaction index comes exactly with the segments
    that hold an aborted transaction."""
    from tiered_kafka.rsm.indexes import read_indexes
    from tiered_kafka.rsm.manifest import parse_manifest

    for segment_id, objects in stack.layouts.items():
        fileset = stack.filesets[segment_id]
        manifest = parse_manifest(objects.manifest, None)
        indexes = read_indexes(objects.indexes, manifest)
        assert indexes.leader_epoch == fileset.files["leader_epoch_checkpoint"].read_bytes(), segment_id
        assert indexes.producer_snapshot == fileset.files["snapshot"].read_bytes()
        assert indexes.offset == fileset.files["index"].read_bytes()
        assert indexes.timestamp == fileset.files["timeindex"].read_bytes()
        txn = fileset.files.get("txnindex")
        assert indexes.transaction == (txn.read_bytes() if txn is not None else None), segment_id
    with_txn = {s.topic for s in stack.filesets.values() if "txnindex" in s.files}
    assert with_txn == {TXN_TOPIC}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_gateway_serves_what_the_broker_serves(stack: Kip405Stack, variant: str) -> None:
    for topic, partition in TPS:
        last = stack.remote_end(topic, partition)
        detail = httpx.get(f"{stack.gateway_url}/v1/clusters/{variant}/topics/{topic}/partitions/{partition}", timeout=60)
        assert detail.status_code == 200, detail.text
        remote = detail.json()["remote"]
        assert (remote["earliest_offset"], remote["latest_offset"], remote["segment_count"]) == (0, last, len(stack.live[(topic, partition)])), remote
        expected = stack.broker_read(topic, partition)
        assert len(expected) > 100 and expected[-1][0] == last
        assert _gateway_read(stack, variant, topic, partition, last) == expected, (variant, topic, partition)
        middle = expected[len(expected) // 2 + 3][0]
        assert _gateway_read(stack, variant, topic, partition, last, start=middle) == [r for r in expected if r[0] >= middle]


def test_offsets_for_times_equal_kafkas(stack: Kip405Stack) -> None:
    """The gateway's first remote offset with a timestamp >= T is Kafka's ListOffsets(T) answer, which the broker
    finds through the remote time indexes (timestamps here are not monotonic: every tenth record is older)."""
    topic, partition = RECORDS_TOPIC, 0
    records = stack.broker_read(topic, partition)
    targets = sorted({r[4] for r in records[::37]} | {1_700_000_000_000 + 5, 1_700_000_000_000 + RECORDS_PER_PARTITION - 1, 0})
    consumer = Consumer({"bootstrap.servers": stack.broker.bootstrap_servers, "group.id": "kip405-times", "enable.auto.commit": False})
    try:
        kafka = {t: consumer.offsets_for_times([TopicPartition(topic, partition, t)], timeout=30)[0].offset for t in targets}
    finally:
        consumer.close()
    remote = {t: o for t, o in kafka.items() if 0 <= o <= stack.remote_end(topic, partition)}
    assert len(remote) > 10
    with GatewayClient(stack.gateway_url, "plain") as client:
        assert {t: client.offset_for_timestamp(topic, partition, t) for t in remote} == remote


@pytest.mark.parametrize("variant", ["zstd", "encrypted"])
def test_read_committed_equals_the_brokers(stack: Kip405Stack, variant: str) -> None:
    """Aborted transactions are dropped by the remote ``.txnindex`` Kafka wrote, as the broker drops them."""
    last = stack.remote_end(TXN_TOPIC, 0)
    expected = stack.broker_read(TXN_TOPIC, 0, "read_committed")
    uncommitted = stack.broker_read(TXN_TOPIC, 0)
    assert 0 < len(expected) < len(uncommitted)
    # Kafka copies only segments below its last stable offset: the producer snapshot of the last one (Kafka's own
    # file) holds no open transaction, so the remote last stable offset is the remote end + 1
    with GatewayClient(stack.gateway_url, variant) as client:
        remote = client.partition(TXN_TOPIC, 0).remote
        assert remote is not None and (remote.latest_offset, remote.last_stable_offset) == (last, last + 1)
    with BulkReader(stack.gateway_url, variant, isolation_level="read_committed") as reader:
        table = reader.read_table(TXN_TOPIC, 0)
    assert table.column("offset").to_pylist() == [r[0] for r in expected]
    assert table.column("key").to_pylist() == [r[1] for r in expected]
    assert table.column("value").to_pylist() == [r[2] for r in expected]
    assert max(table.column("offset").to_pylist()) <= last


def _kafka_earliest(bootstrap: str, topic: str) -> int:
    """ListOffsets EARLIEST: with tiered storage, the log start offset of the whole log, remote included."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return int(next(iter(admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()}).values())).result(30).offset)
    finally:
        del admin


def _settled(stack: Kip405Stack, topic: str, what: str, ready: Any, timeout_s: float = 120) -> list[RemoteLogSegmentMetadataRecord]:
    """The topic's live segments (partition 0) once ``ready(live, kafka_earliest)`` holds on two reads a
    second apart with the same live segments (Kafka's copy and expiry tasks run every 500 ms)."""
    deadline = time.monotonic() + timeout_s
    previous: list[str] | None = None
    while True:
        live = _live_segments(_read_metadata(stack.broker.bootstrap_servers)).get((topic, 0), [])
        ids = [s.segment_id for s in live]
        if ready(live, _kafka_earliest(stack.broker.bootstrap_servers, topic)) and ids == previous:
            return live
        previous = ids
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: {what} not reached within {timeout_s} s: {[(s.start_offset, s.end_offset) for s in live]}")
        time.sleep(1)


def _remote_extent(url: str, topic: str) -> dict[str, Any]:
    detail = httpx.get(f"{url}/v1/clusters/plain/topics/{topic}/partitions/0", timeout=60)
    assert detail.status_code == 200, detail.text
    return detail.json()["remote"]  # type: ignore[no-any-return]


def test_remote_retention_delete_records_and_topic_deletion(stack: Kip405Stack, tmp_path: Path) -> None:
    """Kafka's own remote expiry: ``retention.bytes`` deletes the oldest remote segments (DELETE_SEGMENT_STARTED,
    then FINISHED in ``__remote_log_metadata``), DeleteRecords moves the log start inside a remote segment and
    deletes the segments below it, deleting the topic deletes every segment. The gateway serves exactly what Kafka
    still serves at each step, and nothing once the topic is gone."""
    topic, bootstrap = "kip405-expiry", stack.broker.bootstrap_servers
    create_topic(bootstrap, topic, 1, version=stack.version, **{**TIERED_TOPIC_DEFAULTS, "segment.bytes": str(SEGMENT_BYTES), "retention.bytes": "100000"})
    produce(bootstrap, topic, [(0, f"k{i}".encode(), (f"v{i} " * 30).encode()) for i in range(3000)])

    def expired(live: list[RemoteLogSegmentMetadataRecord], earliest: int) -> bool:
        local = _local_bases(stack.broker.log_dir, topic, 0)
        return bool(live) and len(local) == 1 and live[-1].end_offset + 1 == local[0] and 0 < live[0].start_offset == earliest

    live = _settled(stack, topic, "remote retention by size", expired)
    filesets = {f.segment_id: f for f in remote_filesets(stack.storage_dir)}
    for segment in live:
        _upload(stack.s3_server.client(), stack.bucket, "plain", filesets[segment.segment_id], stack.key_pair[1], tmp_path)
    gateway = _gateway(stack.s3_server, stack.bucket, bootstrap, stack.key_pair[0], listing_ttl_s=0)  # sees each deletion at once
    try:
        _expiry_steps(stack, gateway.url, topic, live)
    finally:
        gateway.stop()


def _expiry_steps(stack: Kip405Stack, url: str, topic: str, live: list[RemoteLogSegmentMetadataRecord]) -> None:
    """After remote retention, after DeleteRecords, after the topic's deletion: the gateway at ``url`` (live
    segments re-read on every request) against the broker."""
    bootstrap = stack.broker.bootstrap_servers
    remote = _remote_extent(url, topic)
    assert (remote["earliest_offset"], remote["latest_offset"], remote["segment_count"]) == (live[0].start_offset, live[-1].end_offset, len(live))
    below = httpx.get(f"{url}/v1/clusters/plain/topics/{topic}/partitions/0/plan", params={"offset": live[0].start_offset - 1}, timeout=30)
    assert (below.status_code, below.json()["error"]["code"]) == (416, "offset_out_of_range"), below.text
    first, last = live[0].start_offset, live[-1].end_offset
    assert _gateway_read(stack, "plain", topic, 0, last, start=first, url=url) == _broker_read(bootstrap, topic, 0, last, start=first)

    # DeleteRecords inside the second live segment: Kafka deletes the first and serves from the new log start
    target = live[1].start_offset + 5
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        assert next(iter(admin.delete_records([TopicPartition(topic, 0, target)]).values())).result(30).low_watermark == target
    finally:
        del admin
    live = _settled(stack, topic, "DeleteRecords", lambda live, earliest: earliest == target and bool(live) and live[0].start_offset == target - 5)
    remote = _remote_extent(url, topic)
    assert (remote["earliest_offset"], remote["latest_offset"]) == (target, last), remote
    below = httpx.get(f"{url}/v1/clusters/plain/topics/{topic}/partitions/0/plan", params={"offset": target - 1}, timeout=30)
    assert (below.status_code, below.json()["error"]["code"]) == (416, "offset_out_of_range"), below.text
    assert _gateway_read(stack, "plain", topic, 0, last, start=target, url=url) == _broker_read(bootstrap, topic, 0, last, start=target)

    # the topic deleted: Kafka marks every remote segment DELETE_SEGMENT_STARTED, then FINISHED
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        next(iter(admin.delete_topics([topic]).values())).result(30)
    finally:
        del admin
    deadline = time.monotonic() + 120
    while (topic, 0) in _live_segments(_read_metadata(bootstrap)):
        assert time.monotonic() < deadline, "the deleted topic's remote segments are still live"
        time.sleep(1)
    # every segment went to DELETE_SEGMENT_FINISHED, and no RemotePartitionDeleteMetadataRecord was written (3.9 and 4.4)
    mine = [r for _, r in _read_metadata(bootstrap) if not isinstance(r, RemoteLogSegmentMetadataSnapshotRecord) and r.topic_id_partition.topic == topic]
    assert all(isinstance(r, (RemoteLogSegmentMetadataRecord, RemoteLogSegmentMetadataUpdateRecord)) for r in mine)
    finished = {r.segment_id for r in mine if isinstance(r, RemoteLogSegmentMetadataUpdateRecord) and r.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}
    assert finished == {r.segment_id for r in mine if isinstance(r, RemoteLogSegmentMetadataRecord)}
    gone = httpx.get(f"{url}/v1/clusters/plain/topics/{topic}/partitions/0", timeout=60)
    assert gone.status_code == 404, gone.text
