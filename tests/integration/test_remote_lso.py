"""The remote last stable offset (issue 12): a read of remote data that starts *past* the first
offset of a transaction opened earlier and still open returns nothing at or past that offset, as a
confluent-kafka read_committed consumer of the broker does, whatever the reader.

The log: plain records, one transaction opened and left open (its first offset F), then plain
records enough to roll several segments. The agent uploads them with the broker's producer
snapshots, and registers ``open_txn_first_offset`` = F for each segment after F. Readers start at
S > F: the gateway's records, TieredConsumer (REMOTE_ONLY, REMOTE_PREFERRED) and Spark. Then the
transaction commits, the segment with its marker is uploaded, and the records appear: consumers
of both modes kept open across the commit go on and deliver what the broker's read_committed
consumer does. (KAFKA_PREFERRED reads remote storage only below Kafka's log start; moving it past
S with DeleteRecords would also take S.. from the broker's reference consumer, so this module has
no KAFKA_PREFERRED reader; tests/integration/test_transactions_e2e.py covers that mode.)

The tests of this module run in order (the last one commits the transaction).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.kafka_clients import drain
from tests.support.stack_env import TieredStack, create_tiered_topic, own_tiered_stack
from tiered_kafka.consumer import TieredConsumer

TOPIC = "lso"
SEGMENT_BYTES = 16_000
HEAD = 20  # plain records before the open transaction
OPEN = 5  # records of the open transaction
TAIL = 400  # plain records after it: several segments

Row = tuple[int, bytes | None, bytes | None]  # offset, key, value


class Log:
    def __init__(self, stack: TieredStack, producer: Producer, first_open: int) -> None:
        self.stack = stack
        self.producer = producer  # the transaction left open
        self.first_open = first_open  # F: its first offset


def _value(tag: str, i: int) -> bytes:
    return (f"{tag}-{i:06d}|".encode() + b"x" * 300)[:300]


def _plain(bootstrap: str, tag: str, count: int) -> None:
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.size": 8000})  # batch.size <= segment.bytes
    for i in range(count):
        plain.produce(TOPIC, key=f"{tag}-{i}".encode(), value=_value(tag, i), partition=0)
    assert plain.flush(30) == 0


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[Log]:
    with own_tiered_stack(tmp_path_factory.mktemp("remote-lso"), redis_server, s3_server, "lso") as stack:
        producer: Producer | None = None
        log: Log | None = None
        try:
            create_tiered_topic(stack, TOPIC, 1, segment_bytes=SEGMENT_BYTES)
            _plain(stack.bootstrap, "head", HEAD)
            producer = Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": f"lso-{uuid.uuid4().hex[:6]}", "transaction.timeout.ms": 600_000})
            producer.init_transactions(30)
            producer.begin_transaction()
            for i in range(OPEN):
                producer.produce(TOPIC, key=f"open-{i}".encode(), value=_value("open", i), partition=0)
            assert producer.flush(30) == 0
            _plain(stack.bootstrap, "tail", TAIL)
            stack.wait_uploaded(TOPIC)
            log = Log(stack, producer, HEAD)
            yield log
        finally:
            if producer is not None:
                try:
                    producer.abort_transaction(10)
                except Exception:  # committed by the last test
                    pass
                producer = None  # destroyed before its broker stops (no client outlives the broker)
                if log is not None:
                    del log.producer


def _drain(consumer: Any, idle_s: float = 4.0) -> list[Row]:
    return [(message.offset(), message.key(), message.value()) for message in drain(consumer, idle_s)]


def _kafka(stack: TieredStack, start: int) -> list[Row]:
    """What confluent-kafka's read_committed consumer of the broker returns from ``start``."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"ref-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, start)])
    try:
        return _drain(consumer)
    finally:
        consumer.close()


def _tiered(stack: TieredStack, mode: str, start: int) -> list[Row]:
    consumer = TieredConsumer(stack.consumer_config(mode, **{"isolation.level": "read_committed"}))
    consumer.assign([TopicPartition(TOPIC, 0, start)])
    try:
        return _drain(consumer)
    finally:
        consumer.close()


def _gateway_records(stack: TieredStack, start: int) -> tuple[list[Row], int]:
    """REMOTE_ONLY read_committed records from ``start`` until no progress; and the last next_offset."""
    rows: list[Row] = []
    offset = start
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        for _ in range(1000):
            response = client.get(
                f"/v1/clusters/{stack.cluster}/topics/{TOPIC}/partitions/0/records",
                params={"offset": offset, "mode": "REMOTE_ONLY", "isolation_level": "read_committed", "max_records": 100},
            )
            if response.status_code == 416:  # past what remote storage holds
                break
            assert response.status_code == 200, response.text
            body = response.json()
            rows += [(r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"])) for r in body["records"]]
            if body["next_offset"] == offset:
                break
            offset = body["next_offset"]
    return rows, offset


def _records_at(stack: TieredStack, offset: int, mode: str) -> dict[str, Any]:
    """One read_committed records response at ``offset`` in ``mode``."""
    response = httpx.get(
        f"{stack.gateway_url}/v1/clusters/{stack.cluster}/topics/{TOPIC}/partitions/0/records",
        params={"offset": offset, "mode": mode, "isolation_level": "read_committed", "max_records": 50},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()


def _remote_lso(stack: TieredStack) -> int | None:
    response = httpx.get(f"{stack.gateway_url}/v1/clusters/{stack.cluster}/topics/{TOPIC}/partitions/0", timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["remote"]["last_stable_offset"]


def _start(log: Log) -> int:
    """S: well past F, inside remote data."""
    segments = log.stack.registry.segments(TOPIC, 0)
    assert len(segments) >= 3, f"expected several segments, got {[(s.base_offset, s.last_offset) for s in segments]}"
    return segments[1].base_offset + 3


def test_registry_and_gateway_know_the_open_transaction(log: Log) -> None:
    segments = log.stack.registry.segments(TOPIC, 0)
    first = [s for s in segments if s.last_offset < log.first_open]
    after = [s for s in segments if s.last_offset >= log.first_open]
    assert after and all(s.open_txn_first_offset == log.first_open for s in after), [(s.base_offset, s.open_txn_first_offset) for s in segments]
    assert all(s.open_txn_first_offset == -1 for s in first)
    assert _start(log) > log.first_open
    assert _remote_lso(log.stack) == log.first_open


def test_gateway_records_from_past_the_open_transaction_return_nothing(log: Log) -> None:
    start = _start(log)
    kafka = _kafka(log.stack, start)
    assert kafka == []  # the broker's LSO is F: nothing at or past it
    rows, next_offset = _gateway_records(log.stack, start)
    assert rows == kafka and next_offset == start
    held = _records_at(log.stack, start, "REMOTE_ONLY")  # explicit: held behind the transaction open since F
    assert (held["source"], held["records"], held["next_offset"], held["last_stable_offset"]) == ("remote", [], start, log.first_open)
    rows, next_offset = _gateway_records(log.stack, 0)  # from the start: up to F, not past it
    assert [r[0] for r in rows] == list(range(log.first_open)) and next_offset == log.first_open
    assert rows == _kafka(log.stack, 0)


def test_tiered_consumer_from_past_the_open_transaction(log: Log) -> None:
    start = _start(log)
    assert _tiered(log.stack, "REMOTE_ONLY", start) == []
    assert _tiered(log.stack, "REMOTE_PREFERRED", start) == _kafka(log.stack, start) == []
    from_zero = _tiered(log.stack, "REMOTE_PREFERRED", 0)
    assert from_zero == _kafka(log.stack, 0) and [r[0] for r in from_zero] == list(range(log.first_open))


def _cat(stack: TieredStack, *extra: str) -> tuple[int, list[int], str]:
    cli = Path(sys.executable).with_name("tiered-kafka")
    done = subprocess.run(
        [str(cli), "cat", TOPIC, "0", "--gateway", stack.gateway_url, "--cluster", stack.cluster, *extra],
        capture_output=True, text=True, timeout=180, env={**os.environ},
    )
    return done.returncode, [json.loads(line)["offset"] for line in done.stdout.splitlines()], done.stderr


def test_cli_cat_stops_at_the_remote_lso_from_any_start(log: Log) -> None:
    code, offsets, stderr = _cat(log.stack)  # REMOTE_ONLY (no --bootstrap-servers), read_committed by default
    assert (code, offsets) == (0, list(range(log.first_open))), stderr
    assert f"stopped at offset {log.first_open}, the last stable offset" in stderr
    code, offsets, stderr = _cat(log.stack, "--from", str(_start(log)))
    assert code == 1 and offsets == [] and f"a transaction open at offset {log.first_open} has no marker yet" in stderr, stderr


def test_spark_slice_from_past_the_open_transaction_yields_no_row(log: Log, spark: Any) -> None:
    start = _start(log)
    options = {"tiered.gateway.url": log.stack.gateway_url, "tiered.cluster": log.stack.cluster, "kafka.isolation.level": "read_committed"}
    past = spark.read.format("tiered-kafka").options(**options, assign=f'{{"{TOPIC}":[0]}}', startingOffsets=f'{{"{TOPIC}":{{"0":{start}}}}}').load()
    assert past.count() == 0
    everything = spark.read.format("tiered-kafka").options(**options, subscribe=TOPIC).load().select("offset").collect()
    assert sorted(r["offset"] for r in everything) == list(range(log.first_open))


def test_records_appear_once_the_transaction_commits_and_its_marker_is_uploaded(log: Log) -> None:
    stack = log.stack
    start = _start(log)
    waiting = TieredConsumer(stack.consumer_config("REMOTE_ONLY", **{"isolation.level": "read_committed"}))
    waiting.assign([TopicPartition(TOPIC, 0, start)])
    # REMOTE_PREFERRED, open across the commit too: held at S by remote storage, then on from Kafka
    preferred = TieredConsumer(stack.consumer_config("REMOTE_PREFERRED", **{"isolation.level": "read_committed"}))
    preferred.assign([TopicPartition(TOPIC, 0, start)])
    try:
        assert _drain(waiting, idle_s=2.0) == []
        assert _drain(preferred, idle_s=2.0) == []
        log.producer.commit_transaction(30)
        preferred_rows = _drain(preferred)  # before the marker reaches remote storage
        assert preferred_rows and preferred_rows[0][0] == start
        # the COMMIT marker is in Kafka's active segment only: remote storage still holds S behind the
        # transaction; REMOTE_ONLY says so, REMOTE_PREFERRED answers from Kafka, which delivers
        held = _records_at(stack, start, "REMOTE_ONLY")
        assert (held["source"], held["records"], held["next_offset"], held["last_stable_offset"]) == ("remote", [], start, log.first_open)
        from_kafka = _records_at(stack, start, "REMOTE_PREFERRED")
        kafka_rows = [(r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"])) for r in from_kafka["records"]]
        assert from_kafka["source"] == "kafka" and kafka_rows and kafka_rows[0][0] == start, from_kafka
        assert from_kafka["next_offset"] == kafka_rows[-1][0] + 1
        _plain(stack.bootstrap, "after", 200)  # rolls the segment holding the COMMIT marker
        stack.wait_uploaded(TOPIC)
        segments = stack.registry.segments(TOPIC, 0)
        assert segments[-1].open_txn_first_offset == -1
        end = segments[-1].last_offset + 1
        assert _remote_lso(stack) == end
        kafka = [r for r in _kafka(stack, start) if r[0] < end]
        assert kafka and kafka[0][0] == start
        assert kafka_rows == kafka[: len(kafka_rows)]  # the gateway's Kafka answer before the upload
        assert [r for r in _drain(waiting) if r[0] < end] == kafka  # the same consumer goes on
        preferred_rows += _drain(preferred)
        reference = _kafka(stack, start)  # everything from S, Kafka's active segment included
        offsets = [r[0] for r in preferred_rows]
        assert offsets == sorted(set(offsets)), "REMOTE_PREFERRED delivered an offset twice or out of order"
        assert preferred_rows == reference
    finally:
        waiting.close()
        preferred.close()
    assert [r for r in _tiered(stack, "REMOTE_ONLY", start) if r[0] < end] == kafka
    rows, _next = _gateway_records(stack, start)
    assert rows == kafka
    opened = [r for r in _tiered(stack, "REMOTE_ONLY", 0) if r[1] and r[1].startswith(b"open-")]
    assert [r[1] for r in opened] == [f"open-{i}".encode() for i in range(OPEN)]
