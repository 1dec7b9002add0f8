"""The development broker's data path, through real confluent-kafka (librdkafka) clients."""

from __future__ import annotations

import datetime
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch12

from tests.support.kafka_clients import consume_all, create_topic, produce, value_for
from tests.support.kafka_wire import WireClient
from tiered_kafka.format.log_config import LogConfig
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.time_index import TimeIndex
from tiered_kafka_dev.broker.server import BrokerThread

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_200k_messages_each_codec_read_back_in_order_by_a_group(dev_broker: BrokerThread, codec: str) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    topic = f"codec-{codec}"
    partitions, count = 4, 200_000
    create_topic(bootstrap, topic, partitions, **{"segment.bytes": str(32 * 1024 * 1024)})
    produce(bootstrap, topic, [(i % partitions, str(i).encode(), value_for(i)) for i in range(count)], **{"compression.type": codec, "batch.size": 1_000_000})

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{codec}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    messages = consume_all(consumer, count)
    consumer.commit(asynchronous=False)
    consumer.close()

    assert len(messages) == count
    for p in range(partitions):
        mine = [m for m in messages if m.partition() == p]
        assert [m.offset() for m in mine] == list(range(count // partitions))
        assert [int(m.key()) for m in mine] == list(range(p, count, partitions))
        assert all(m.value() == value_for(int(m.key())) for m in mine)
    # the log.dir holds batches compressed with the producer's codec, stored as produced
    log = next((dev_broker.broker.config.log_dir / f"{topic}-0").glob("*.log"))
    codecs = {b.codec.name.lower() for b in iter_batches(log.read_bytes()[: 4 * 1024 * 1024], allow_truncated_tail=True)}
    assert codecs == {codec}


def test_list_offsets_earliest_latest_and_by_timestamp(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "times", 1, **{"segment.bytes": "4096", "index.interval.bytes": "100"})
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(100):
        producer.produce("times", value=b"v" * 200, partition=0, timestamp=base + i * 1000)
        producer.flush(10)  # one batch per message, so segments roll often
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    assert consumer.get_watermark_offsets(TopicPartition("times", 0), timeout=10) == (0, 100)
    found = consumer.offsets_for_times([TopicPartition("times", 0, base + 42_000)], timeout=10)
    assert found[0].offset == 42
    found = consumer.offsets_for_times([TopicPartition("times", 0, base + 42_500)], timeout=10)
    assert found[0].offset == 43
    found = consumer.offsets_for_times([TopicPartition("times", 0, base + 10**9)], timeout=10)
    assert found[0].offset == -1  # no record that late: OFFSET_END
    consumer.close()
    assert len(list((dev_broker.broker.config.log_dir / "times-0").glob("*.log"))) > 3

    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_offsets({TopicPartition("times", 0): OffsetSpec.max_timestamp()})
    info = next(iter(result.values())).result(timeout=10)
    assert (info.offset, info.timestamp) == (99, base + 99_000)


def _fetch_request(topic: str, offset: int) -> fetch12.FetchRequest:
    return fetch12.FetchRequest(
        cluster_id=None,
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1,
        topics=(
            fetch12.FetchTopic(
                topic=topic,
                partitions=(fetch12.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
    )


def test_delete_records_moves_log_start_and_out_of_range_is_reported(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "trim", 1, **{"segment.bytes": "20000"})
    produce(bootstrap, "trim", [(0, None, value_for(i)) for i in range(300)], **{"linger.ms": 0, "batch.num.messages": 10})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.delete_records([TopicPartition("trim", 0, 125)])
    result = next(iter(future.values())).result(timeout=10)
    assert result.low_watermark == 125

    with WireClient(bootstrap) as wire:
        below = wire.request(_fetch_request("trim", 3)).responses[0].partitions[0]
        assert (below.error_code, below.log_start_offset, below.high_watermark) == (ErrorCode.offset_out_of_range, 125, 300)
        past = wire.request(_fetch_request("trim", 301)).responses[0].partitions[0]
        assert past.error_code == ErrorCode.offset_out_of_range
        ok = wire.request(_fetch_request("trim", 125)).responses[0].partitions[0]
        assert ok.error_code == ErrorCode.none and ok.log_start_offset == 125 and ok.high_watermark == 300
        assert next(iter_batches(ok.records)).last_offset >= 125

    strict = Consumer({"bootstrap.servers": bootstrap, "group.id": "strict", "auto.offset.reset": "error"})
    strict.assign([TopicPartition("trim", 0, 0)])
    error = None
    deadline = time.monotonic() + 20
    while error is None and time.monotonic() < deadline:
        message = strict.poll(0.5)
        if message is not None and message.error():
            error = message.error()
    strict.close()
    assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET and "out of range" in error.str().lower()

    lenient = Consumer({"bootstrap.servers": bootstrap, "group.id": "lenient", "auto.offset.reset": "earliest"})
    lenient.assign([TopicPartition("trim", 0, 0)])
    messages = consume_all(lenient, 175)
    lenient.close()
    assert [m.offset() for m in messages] == list(range(125, 300))
    # whole segments below the new log start are gone from disk
    bases = sorted(int(p.stem) for p in (dev_broker.broker.config.log_dir / "trim-0").glob("*.log"))
    assert bases[0] > 0 and bases[0] <= 125


def test_retention_renames_to_deleted_then_deletes_after_the_delay(start_dev_broker) -> None:
    broker = start_dev_broker(retention_check_interval_ms=100)
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, "expiring", 1, **{"segment.bytes": "20000", "retention.ms": "2000", "file.delete.delay.ms": "1500"})
    old = int(time.time() * 1000) - 10_000  # already past retention.ms
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 16_000})  # batches below segment.bytes
    for i in range(60):
        producer.produce("expiring", value=value_for(i), partition=0, timestamp=old)
    producer.flush(10)
    directory = broker.broker.config.log_dir / "expiring-0"
    deadline = time.monotonic() + 10
    while not list(directory.glob("*.log.deleted")) and time.monotonic() < deadline:
        time.sleep(0.05)
    renamed = list(directory.glob("*.deleted"))
    assert renamed, "retention did not rename any segment to .deleted"
    assert {p.name.split(".")[1] for p in renamed} >= {"log", "index", "timeindex"}
    deadline = time.monotonic() + 10
    while any(p.exists() for p in renamed) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(p.exists() for p in renamed)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "x"})
    low, high = consumer.get_watermark_offsets(TopicPartition("expiring", 0), timeout=10)
    consumer.close()
    assert high == 60 and low > 0


def test_log_dir_passes_the_format_checks(dev_broker: BrokerThread, tmp_path: Path) -> None:
    """Every segment decodes with CRCs verified; rotated segments' indexes follow Kafka's rules."""
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "checked", 2, **{"segment.bytes": "60000", "index.interval.bytes": "4096"})
    produce(bootstrap, "checked", [(i % 2, None, value_for(i)) for i in range(2000)], **{"linger.ms": 1, "batch.num.messages": 7})
    from tiered_kafka.format.log_writer import PartitionLog

    for p in range(2):
        directory = dev_broker.broker.config.log_dir / f"checked-{p}"
        logs = sorted(directory.glob("*.log"))
        assert len(logs) > 3
        replay = PartitionLog.create(tmp_path / f"replay-{p}", LogConfig(segment_bytes=2**31 - 1, retention_ms=-1))
        next_offset = 0
        for i, log in enumerate(logs):
            base = int(log.stem)
            batches = list(iter_batches(log.read_bytes()))
            assert batches[0].base_offset == base == next_offset
            next_offset = batches[-1].last_offset + 1
            if i:
                replay.roll(base)
            for batch in batches:
                replay.append(batch.bytes(), assign_offsets=False)
            if log != logs[-1]:  # rotated: trimmed indexes, equal to a replay through Kafka's rules
                replay_dir = tmp_path / f"replay-{p}"
                replay._active.seal()  # noqa: SLF001 - seal to compare like a rolled segment
                for ext in (".index", ".timeindex"):
                    assert log.with_suffix(ext).read_bytes() == (replay_dir / log.with_suffix(ext).name).read_bytes()
                index = OffsetIndex.read(log.with_suffix(".index"), base)
                positions = {b.position: b.last_offset for b in batches}
                assert all(positions.get(e.position) == e.offset for e in index.entries())
                assert len(TimeIndex.read(log.with_suffix(".timeindex"), base)) >= 1
        assert next_offset == 1000


def test_bad_requests_get_errors_or_a_closed_connection_and_the_broker_survives(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    with WireClient(bootstrap) as wire:  # a malformed frame
        wire.send_raw(struct.pack(">i", 10) + b"\x00\x12\x00\x03garbage!")
        assert wire.is_closed_by_peer()
    with WireClient(bootstrap) as wire:  # an oversized frame
        wire.send_raw(struct.pack(">i", 200 * 1024 * 1024))
        assert wire.is_closed_by_peer()
    with WireClient(bootstrap) as wire:  # a negative size
        wire.send_raw(struct.pack(">i", -5))
        assert wire.is_closed_by_peer()
    with WireClient(bootstrap) as wire:  # an unknown API key
        wire.send_raw(struct.pack(">ihhih", 10, 999, 0, 1, -1))
        assert wire.is_closed_by_peer()
    with WireClient(bootstrap) as wire:  # ApiVersions at a version we do not speak: v0 error + our ranges
        wire.send_raw(struct.pack(">ihhih", 10, 18, 99, 7, -1))
        frame = wire.receive_frame()
        correlation_id, error_code, count = struct.unpack_from(">ihi", frame)
        assert (correlation_id, error_code) == (7, ErrorCode.unsupported_version) and count > 10
    with WireClient(bootstrap) as wire:  # an unknown topic in a fetch
        response = wire.request(_fetch_request("no-such-topic", 0))
        assert response.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
        assert wire.request(ApiVersionsRequest(client_software_name="t", client_software_version="1")).error_code == ErrorCode.none

    producer = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False, "message.timeout.ms": 3000})
    errors: list[KafkaError] = []
    producer.produce("no-such-topic", value=b"x", partition=0, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    create_topic(bootstrap, "still-alive", 1)  # the broker kept serving through all of it
    produce(bootstrap, "still-alive", [(0, None, b"ok")])


def test_restart_reopens_the_log_dir_and_continues_offsets(start_dev_broker, tmp_path: Path) -> None:
    log_dir = tmp_path / "restart-logs"
    first = start_dev_broker(log_dir)
    create_topic(first.broker.bootstrap_servers, "durable", 1, **{"segment.bytes": "30000"})
    produce(first.broker.bootstrap_servers, "durable", [(0, None, value_for(i)) for i in range(100)], **{"batch.size": 16_000})
    first.stop()
    checkpoint = (log_dir / "recovery-point-offset-checkpoint").read_text()
    assert checkpoint == "0\n1\ndurable 0 100\n"
    assert (log_dir / "meta.properties").read_text().count("cluster.id=") == 1

    second = start_dev_broker(log_dir)
    assert second.broker.cluster_id == first.broker.cluster_id
    produce(second.broker.bootstrap_servers, "durable", [(0, None, value_for(i)) for i in range(100, 150)], **{"batch.size": 16_000})
    consumer = Consumer({"bootstrap.servers": second.broker.bootstrap_servers, "group.id": "r", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("durable", 0, OFFSET_BEGINNING)])
    messages = consume_all(consumer, 150)
    consumer.close()
    assert [m.offset() for m in messages] == list(range(150))
    assert [m.value() for m in messages] == [value_for(i) for i in range(150)]


def test_admin_list_topics_sees_every_topic(dev_broker: BrokerThread) -> None:
    """librdkafka's all-topics Metadata request carries trailing bytes that Kafka ignores."""
    bootstrap = dev_broker.broker.bootstrap_servers
    for name in ("listed-a", "listed-b"):
        create_topic(bootstrap, name, 2)
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert {"listed-a", "listed-b"} <= set(metadata.topics)
    assert {p.leader for p in metadata.topics["listed-a"].partitions.values()} == {0}


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_with_every_acks_setting(dev_broker: BrokerThread, acks: str) -> None:
    """acks=0 gets no response at all (Kafka sends none); 1 and all get offsets back."""
    bootstrap = dev_broker.broker.bootstrap_servers
    topic = f"acks-{acks}"
    create_topic(bootstrap, topic, 1)
    delivered: list[tuple[object, int | None]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    for i in range(500):
        producer.produce(topic, value=value_for(i), partition=0, on_delivery=lambda err, m: delivered.append((err, m.offset())))
    assert producer.flush(30) == 0
    assert len(delivered) == 500 and all(err is None for err, _ in delivered)
    offsets = [offset for _, offset in delivered]
    if acks == "0":
        assert all(o is None or o < 0 for o in offsets)  # without a response no offset is known
    else:
        assert offsets == list(range(500))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    messages = consume_all(consumer, 500)
    consumer.close()
    assert [m.value() for m in messages] == [value_for(i) for i in range(500)]
