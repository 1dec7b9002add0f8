"""``kafka_reading.read_kafka_slice``'s exactness rules against a scripted consumer (pure logic: no
broker): invisible offsets, offsets below Kafka's log start (remote storage's or data loss),
OFFSET_OUT_OF_RANGE inside and past Kafka's range, end of partition, error events, the timeout."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError

from tiered_kafka.errors import KafkaDataLossError, KafkaReadError
from tiered_kafka.modes import Mode
from tiered_kafka.spark.kafka_reading import _Rows, read_kafka_slice
from tiered_kafka.spark.planning import KafkaSlice, ReadTask

TOPIC = "t"


class FakeError:
    def __init__(self, code: int, name: str, *, fatal: bool = False, retriable: bool = False) -> None:
        self._code, self._name, self._fatal, self._retriable = code, name, fatal, retriable

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return f"{self._name} (fake)"

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable


class Msg:
    def __init__(self, offset: int, error: FakeError | None = None, topic: str | None = TOPIC) -> None:
        self._offset, self._error, self._topic = offset, error, topic

    def error(self) -> FakeError | None:
        return self._error

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int:
        return 0

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return f"v{self._offset}".encode()

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_700_000_000_000

    def headers(self) -> None:
        return None


def eof(offset: int) -> Msg:
    return Msg(offset, FakeError(KafkaError._PARTITION_EOF, "_PARTITION_EOF"))


def out_of_range(offset: int) -> Msg:
    return Msg(offset, FakeError(KafkaError.OFFSET_OUT_OF_RANGE, "OFFSET_OUT_OF_RANGE"))


class FakeConsumer:
    """consume() answers the scripted batches in order, then nothing; watermarks as set."""

    def __init__(self, batches: list[list[Msg]], watermarks: tuple[int, int]) -> None:
        self.batches, self.watermarks = list(batches), watermarks
        self.assigned: list[int] = []
        self.closed = False

    def assign(self, partitions: list) -> None:  # type: ignore[type-arg]
        self.assigned.append(partitions[0].offset)

    def consume(self, _n: int, _timeout: float) -> list[Msg]:
        return self.batches.pop(0) if self.batches else []

    def get_watermark_offsets(self, _tp: object, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        return self.watermarks

    def close(self) -> None:
        self.closed = True


class FakeRemote:
    def __init__(self, bounds: tuple[int, int] | None) -> None:
        self._bounds = bounds
        self.reads: list[tuple[int, int]] = []

    def bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        return self._bounds

    def read(self, task: ReadTask, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        self.reads.append((start, end))
        rows = _Rows(KafkaSlice(topic, partition, start, end), task)
        for o in range(start, end):
            rows.add(Msg(o))
        yield rows.batch()


def task(*, fail_on_data_loss: bool = True, mode: Mode = Mode.REMOTE_PREFERRED, poll_timeout_ms: int = 200) -> ReadTask:
    return ReadTask(0, "http://gw", "c", None, False, False, (), fail_on_data_loss=fail_on_data_loss, poll_timeout_ms=poll_timeout_ms, mode=mode, kafka_group_id="g")


def read(t: ReadTask, piece: KafkaSlice, consumer: FakeConsumer, remote: FakeRemote | None = None) -> list[int]:
    batches = list(read_kafka_slice(t, piece, consumer=consumer, remote=remote or FakeRemote(None)))
    assert consumer.closed
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_invisible_offsets_and_the_end_of_the_partition() -> None:
    """A marker at 2 (Kafka's log start below it: invisible), then the partition ends at 6 with aborted records at 5."""
    consumer = FakeConsumer([[Msg(0), Msg(1), Msg(3)], [Msg(4), eof(6)]], (0, 6))
    assert read(task(), KafkaSlice(TOPIC, 0, 0, 6), consumer) == [0, 1, 3, 4]


@pytest.mark.parametrize("mode", [Mode.REMOTE_PREFERRED, Mode.KAFKA_PREFERRED])
def test_offsets_retention_removed_meanwhile_are_read_from_remote_storage(mode: Mode) -> None:
    """Kafka's log start moved from 0 to 6 after planning; remote storage holds 0..19: no data loss."""
    consumer, remote = FakeConsumer([[Msg(6), Msg(7)], [Msg(8), Msg(9)]], (6, 20)), FakeRemote((0, 19))
    assert read(task(mode=mode), KafkaSlice(TOPIC, 0, 0, 10), consumer, remote) == list(range(10))
    assert remote.reads == [(0, 6)]


def test_out_of_range_below_the_log_start_reads_remote_storage_then_kafka() -> None:
    """OFFSET_OUT_OF_RANGE at 0 (log start 4); remote storage holds 2..19: 0..1 lost (warned), 2..3 remote, 4.. Kafka."""
    consumer, remote = FakeConsumer([[out_of_range(0)], [Msg(4), Msg(5)]], (4, 20)), FakeRemote((2, 19))
    assert read(task(fail_on_data_loss=False), KafkaSlice(TOPIC, 0, 0, 6), consumer, remote) == [2, 3, 4, 5]
    assert consumer.assigned == [0, 4] and remote.reads == [(2, 4)]
    with pytest.raises(KafkaDataLossError, match=r"t-0: Cannot fetch records in \[0, 2\): they are no longer in Kafka \(retention\)"):
        read(task(), KafkaSlice(TOPIC, 0, 0, 6), FakeConsumer([[out_of_range(0)]], (4, 20)), FakeRemote((2, 19)))


def test_lost_in_both_tiers_follows_fail_on_data_loss(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(KafkaDataLossError, match=r"t-0: Cannot fetch records in \[0, 6\): they are no longer in Kafka \(retention\) \(set failOnDataLoss=false"):
        read(task(), KafkaSlice(TOPIC, 0, 0, 10), FakeConsumer([[Msg(6)]], (6, 20)))
    with caplog.at_level(logging.WARNING, logger="tiered_kafka.spark.kafka_reading"):
        got = read(task(fail_on_data_loss=False), KafkaSlice(TOPIC, 0, 0, 8), FakeConsumer([[Msg(6), Msg(7)]], (6, 20)))
    assert got == [6, 7]
    assert "tiered-kafka: t-0: Skip missing records in [0, 6) (no longer in Kafka; failOnDataLoss=false)" in caplog.messages


def test_out_of_range_within_kafkas_range_seeks_again() -> None:
    """A leader change: OFFSET_OUT_OF_RANGE at 3 though Kafka holds [0, 10): a new seek at 3 (Spark retries there)."""
    consumer = FakeConsumer([[Msg(2)], [out_of_range(3)], [Msg(3), Msg(4)]], (0, 10))
    assert read(task(), KafkaSlice(TOPIC, 0, 2, 5), consumer) == [2, 3, 4]
    assert consumer.assigned == [2, 3]


def test_out_of_range_past_kafkas_end_is_data_loss(caplog: pytest.LogCaptureFixture) -> None:
    """Kafka's end went back to 3 (an unclean election) below the planned slice [0, 8)."""
    with pytest.raises(KafkaDataLossError, match=r"t-0: Cannot fetch records in \[3, 8\): they are past Kafka's end 3"):
        read(task(), KafkaSlice(TOPIC, 0, 0, 8), FakeConsumer([[Msg(0), Msg(1), Msg(2), out_of_range(3)]], (0, 3)))
    with caplog.at_level(logging.WARNING, logger="tiered_kafka.spark.kafka_reading"):
        assert read(task(fail_on_data_loss=False), KafkaSlice(TOPIC, 0, 0, 8), FakeConsumer([[Msg(0), Msg(1), Msg(2), out_of_range(3)]], (0, 3))) == [0, 1, 2]
    assert "tiered-kafka: t-0: Skip missing records in [3, 8) (past Kafka's end; failOnDataLoss=false)" in caplog.messages


def test_transient_and_group_errors_do_not_fail_the_task() -> None:
    unknown = Msg(-1, FakeError(KafkaError.UNKNOWN_TOPIC_OR_PART, "UNKNOWN_TOPIC_OR_PART"))
    group = Msg(-1, FakeError(KafkaError.GROUP_AUTHORIZATION_FAILED, "GROUP_AUTHORIZATION_FAILED"), topic=None)
    transport = Msg(-1, FakeError(KafkaError._TRANSPORT, "_TRANSPORT", retriable=True), topic=None)
    consumer = FakeConsumer([[unknown], [group, transport], [Msg(0), Msg(1)]], (0, 2))
    assert read(task(), KafkaSlice(TOPIC, 0, 0, 2), consumer) == [0, 1]


@pytest.mark.parametrize(
    "event",
    [
        Msg(-1, FakeError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "TOPIC_AUTHORIZATION_FAILED")),
        Msg(-1, FakeError(KafkaError._FATAL, "_FATAL", fatal=True), topic=None),
    ],
)
def test_fatal_and_partition_errors_fail_the_task(event: Msg) -> None:
    with pytest.raises(KafkaReadError, match=rf"t-0: Kafka answered {event.error().name()} at offset 0"):  # type: ignore[union-attr]
        read(task(), KafkaSlice(TOPIC, 0, 0, 2), FakeConsumer([[event]], (0, 2)))


def test_no_progress_times_out_naming_the_last_error() -> None:
    unknown = Msg(-1, FakeError(KafkaError.UNKNOWN_TOPIC_OR_PART, "UNKNOWN_TOPIC_OR_PART"))
    with pytest.raises(KafkaReadError, match=r"t-0: Cannot fetch record for offset 1 in 200 milliseconds \(kafkaConsumer.pollTimeoutMs\) \(last error: UNKNOWN_TOPIC_OR_PART"):
        read(task(), KafkaSlice(TOPIC, 0, 0, 3), FakeConsumer([[Msg(0)], [unknown]], (0, 3)))


def test_a_record_below_the_expected_offset_is_an_error() -> None:
    with pytest.raises(KafkaReadError, match=r"Kafka returned offset 0 while offset 1 was expected"):
        read(task(), KafkaSlice(TOPIC, 0, 0, 3), FakeConsumer([[Msg(0), Msg(0)]], (0, 3)))
