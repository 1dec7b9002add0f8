"""Kafka transactions end to end (issue 12): a real transactional producer writes to a real
Kafka broker, the agent uploads the rotated segments, and every reader returns exactly what a
plain confluent-kafka read_committed consumer of the broker returns, offset for offset, for the
offsets it covers.

The log of each partition holds committed and aborted transactions of two producers, overlapping
and interleaved with each other and with non-transactional records, and one transaction left open at the end (so the last stable offset
is below the high watermark). Readers: TieredConsumer in each mode, the gateway's records endpoint
(each mode), ``tiered-kafka cat`` and the Spark data source. The last tests then move Kafka's log
start into the middle of the uploaded transactional history (DeleteRecords, as retention would), so
that the preferred modes read transactional data from remote storage and hand over to Kafka.
"""

from __future__ import annotations

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

pytestmark = pytest.mark.integration

TOPIC = "payments"
PARTITIONS = 2
ROUNDS = 24
PER_TXN = 30
PER_OTHER = 8


def _txn_aborted(r: int) -> bool:
    return r % 3 == 1


def _other_aborted(r: int) -> bool:
    return r % 2 == 0


Row = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


def _value(tag: str, i: int) -> bytes:
    return (f"{tag}-{i:06d}|".encode() + b"x" * 300)[:300]


@pytest.fixture(scope="module")
def txn_stack(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[TieredStack]:
    open_producer: Producer | None = None
    with own_tiered_stack(tmp_path_factory.mktemp("txn-e2e"), redis_server, s3_server, "txn") as stack:
        try:
            create_tiered_topic(stack, TOPIC, PARTITIONS, segment_bytes=16_000)
            open_producer = _write_log(stack.bootstrap)
            stack.wait_uploaded(TOPIC, PARTITIONS)
            yield stack
        finally:
            if open_producer is not None:
                open_producer.abort_transaction(10)
                open_producer = None  # destroyed before its broker stops (no client outlives the broker)


def _write_log(bootstrap: str) -> Producer:
    """Two transactional producers whose transactions overlap (each round both are open at once,
    their batches interleaved, one ending before the other), their commits and aborts interleaved,
    with plain records among them, over both partitions; returns the producer of the transaction
    left open (the caller aborts it when done)."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"e2e-{uuid.uuid4().hex[:6]}", "linger.ms": 1})
    other = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"e2e-other-{uuid.uuid4().hex[:6]}", "linger.ms": 1})
    txn.init_transactions(30)
    other.init_transactions(30)

    def send(producer: Producer, tag: str, r: int, indexes: range) -> None:
        for i in indexes:
            producer.produce(TOPIC, key=f"{tag[0]}{r}-{i}".encode(), value=_value(f"{tag}{r}", i), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

    for r in range(ROUNDS):
        txn.begin_transaction()
        other.begin_transaction()
        send(txn, "txn", r, range(PER_TXN // 2))
        send(other, "oth", r, range(PER_OTHER // 2))
        send(txn, "txn", r, range(PER_TXN // 2, PER_TXN))
        send(plain, "plain", r, range(5))
        send(other, "oth", r, range(PER_OTHER // 2, PER_OTHER))
        ends = [(txn, _txn_aborted(r)), (other, _other_aborted(r))]
        for producer, aborted in ends if r % 2 else reversed(ends):
            if aborted:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
    # one transaction left open, then plain records after it (not visible to read_committed)
    dangling = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"e2e-open-{uuid.uuid4().hex[:6]}", "transaction.timeout.ms": 600_000})
    dangling.init_transactions(30)
    dangling.begin_transaction()
    for i in range(10):
        dangling.produce(TOPIC, key=f"open-{i}".encode(), value=_value("open", i), partition=i % PARTITIONS)
    assert dangling.flush(30) == 0
    for i in range(100):
        plain.produce(TOPIC, key=f"tail-{i}".encode(), value=_value("tail", i), partition=i % PARTITIONS)
    assert plain.flush(30) == 0
    return dangling


def _drain(consumer: Any) -> list[Row]:
    return [(message.partition(), message.offset(), message.key(), message.value()) for message in drain(consumer)]


@pytest.fixture(scope="module")
def reference(txn_stack: TieredStack) -> list[Row]:
    """What confluent-kafka's read_committed consumer reads from the broker."""
    consumer = Consumer({"bootstrap.servers": txn_stack.bootstrap, "group.id": "ref", "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    try:
        rows = _drain(consumer)
    finally:
        consumer.close()
    assert rows, "the reference read returned nothing"
    assert not any(key and key.startswith(b"open-") for _p, _o, key, _v in rows)
    aborted = tuple(f"txn{r}-".encode() for r in range(ROUNDS) if _txn_aborted(r)) + tuple(f"oth{r}-".encode() for r in range(ROUNDS) if _other_aborted(r))
    committed = tuple(f"txn{r}-".encode() for r in range(ROUNDS) if not _txn_aborted(r))
    committed_other = tuple(f"oth{r}-".encode() for r in range(ROUNDS) if not _other_aborted(r))
    values = [value or b"" for _p, _o, _k, value in rows]
    assert not any(v.startswith(aborted) for v in values)
    assert sum(v.startswith(committed) for v in values) == len(committed) * PER_TXN
    assert sum(v.startswith(committed_other) for v in values) == len(committed_other) * PER_OTHER
    assert sum(v.startswith(b"plain") for v in values) == ROUNDS * 5
    return sorted(rows)


def _remote_end(stack: TieredStack, partition: int) -> int:
    """One past the last offset remote storage holds for the partition."""
    segments = stack.registry.segments(TOPIC, partition)
    assert segments, f"nothing uploaded for {TOPIC}-{partition}"
    return segments[-1].last_offset + 1


def _covered(rows: list[Row], ends: dict[int, int]) -> list[Row]:
    return sorted(r for r in rows if r[1] < ends[r[0]])


def test_the_log_holds_what_kafka_writes(txn_stack: TieredStack) -> None:
    """Control batches, a .txnindex for aborts, producer snapshots on roll, and the registry's facts."""
    directory = txn_stack.log_dir / f"{TOPIC}-0"
    assert list(directory.glob("*.txnindex")), "no .txnindex written for aborted transactions"
    assert list(directory.glob("*.snapshot")), "no producer snapshot written on roll"
    segments = txn_stack.registry.segments(TOPIC, 0)
    assert sum(s.control_records for s in segments) > 0
    assert sum(s.aborted_txns for s in segments) > 0


@pytest.mark.parametrize("mode", ["REMOTE_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED", "KAFKA_ONLY"])
def test_tiered_consumer_equals_kafka_read_committed(txn_stack: TieredStack, reference: list[Row], mode: str) -> None:
    consumer = TieredConsumer(txn_stack.consumer_config(mode, **{"isolation.level": "read_committed"}))
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    try:
        rows = sorted(_drain(consumer))
    finally:
        consumer.close()
    if mode == "REMOTE_ONLY":
        ends = {p: _remote_end(txn_stack, p) for p in range(PARTITIONS)}
        assert rows == _covered(reference, ends)
    else:
        assert rows == reference


@pytest.fixture(scope="module")
def broker_lso(txn_stack: TieredStack) -> dict[int, int]:
    """The broker's last stable offset per partition (ListOffsets LATEST under read_committed)."""
    lso, high = (_latest(txn_stack.bootstrap, isolation) for isolation in ("read_committed", "read_uncommitted"))
    assert all(lso[p] < high[p] for p in lso), (lso, high)  # the open transaction holds the LSO back
    return lso


def _latest(bootstrap: str, isolation: str) -> dict[int, int]:
    """ListOffsets LATEST per partition: the last stable offset under read_committed, the high
    watermark under read_uncommitted."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


@pytest.mark.parametrize("mode", ["REMOTE_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED", "KAFKA_ONLY"])
def test_gateway_records_equal_kafka_read_committed(txn_stack: TieredStack, reference: list[Row], broker_lso: dict[int, int], mode: str) -> None:
    """Paging by next_offset until an answer makes no progress; a mode that reads Kafka may only
    stop making progress at the broker's last stable offset (never on a silently empty answer)."""
    import base64

    rows: list[Row] = []
    with httpx.Client(base_url=txn_stack.gateway_url, timeout=30) as client:
        for p in range(PARTITIONS):
            offset = 0
            for _ in range(1000):
                response = client.get(
                    f"/v1/clusters/{txn_stack.cluster}/topics/{TOPIC}/partitions/{p}/records",
                    params={"offset": offset, "mode": mode, "isolation_level": "read_committed", "max_records": 200},
                )
                if response.status_code == 416:  # REMOTE_ONLY past what remote storage holds
                    assert mode == "REMOTE_ONLY", response.text
                    break
                assert response.status_code == 200, response.text
                body = response.json()
                rows += [(p, r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"])) for r in body["records"]]
                if body["next_offset"] == offset:
                    assert not body["records"]
                    if mode != "REMOTE_ONLY":
                        assert offset >= broker_lso[p], f"{mode} stalled at {offset} of {TOPIC}-{p} below the LSO {broker_lso[p]}: {body}"
                    break
                offset = body["next_offset"]
    rows.sort()
    if mode == "REMOTE_ONLY":
        assert rows == _covered(reference, {p: _remote_end(txn_stack, p) for p in range(PARTITIONS)})
    else:
        assert rows == reference


def test_cli_cat_terminates_and_equals_kafka_read_committed(txn_stack: TieredStack, reference: list[Row]) -> None:
    """The default end under read_committed is the last stable offset: ``cat`` terminates."""
    cli = Path(sys.executable).with_name("tiered-kafka")
    for p in range(PARTITIONS):
        done = subprocess.run(
            [str(cli), "cat", TOPIC, str(p), "--gateway", txn_stack.gateway_url, "--cluster", txn_stack.cluster, "--bootstrap-servers", txn_stack.bootstrap],
            capture_output=True, text=True, timeout=180, env={**os.environ},
        )
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        got = [(p, line["offset"], line["key"].encode(), line["value"].encode()) for line in lines]
        assert got == [r for r in reference if r[0] == p]


def test_spark_read_committed_equals_kafka(txn_stack: TieredStack, reference: list[Row], spark: Any) -> None:
    rows = (
        spark.read.format("tiered-kafka")
        .options(**{"tiered.gateway.url": txn_stack.gateway_url, "tiered.cluster": txn_stack.cluster, "subscribe": TOPIC, "kafka.isolation.level": "read_committed"})
        .load()
        .select("partition", "offset", "key", "value")
        .collect()
    )
    got = sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in rows)
    assert got == _covered(reference, {p: _remote_end(txn_stack, p) for p in range(PARTITIONS)})


def _gateway_rows(stack: TieredStack, mode: str, partition: int) -> list[Row]:
    """Every record the gateway's records endpoint returns from offset 0 under read_committed."""
    import base64

    rows: list[Row] = []
    offset = 0
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        for _ in range(1000):
            response = client.get(
                f"/v1/clusters/{stack.cluster}/topics/{TOPIC}/partitions/{partition}/records",
                params={"offset": offset, "mode": mode, "isolation_level": "read_committed", "max_records": 200},
            )
            assert response.status_code == 200, response.text
            body = response.json()
            rows += [(partition, r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"])) for r in body["records"]]
            if body["next_offset"] == offset:
                return rows
            offset = body["next_offset"]
    raise AssertionError(f"{mode}: no end after 1000 pages of {TOPIC}-{partition}")


@pytest.fixture(scope="module")
def kafka_trimmed(txn_stack: TieredStack, reference: list[Row], broker_lso: dict[int, int]) -> dict[int, int]:
    """Kafka's log start of each partition moved to the middle of what remote storage holds (after
    the reference was read), so offsets below it exist only remotely."""
    from confluent_kafka.admin import AdminClient

    starts = {p: _remote_end(txn_stack, p) // 2 for p in range(PARTITIONS)}
    admin = AdminClient({"bootstrap.servers": txn_stack.bootstrap})
    for future in admin.delete_records([TopicPartition(TOPIC, p, offset) for p, offset in starts.items()]).values():
        future.result(timeout=30)
    consumer = Consumer({"bootstrap.servers": txn_stack.bootstrap, "group.id": "trimmed", "isolation.level": "read_uncommitted"})
    try:
        for p, offset in starts.items():
            low, _high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)
            assert low == offset > 0, (p, low, offset)
    finally:
        consumer.close()
    return starts


@pytest.mark.parametrize("mode", ["REMOTE_PREFERRED", "KAFKA_PREFERRED"])
def test_after_kafka_retention_tiered_consumer_equals_the_reference(txn_stack: TieredStack, reference: list[Row], kafka_trimmed: dict[int, int], mode: str) -> None:
    """Below Kafka's log start only remote storage holds the transactional history: both
    preferred modes read it there under read_committed and hand over to Kafka at the exact offset."""
    consumer = TieredConsumer(txn_stack.consumer_config(mode, **{"isolation.level": "read_committed"}))
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    try:
        rows = sorted(_drain(consumer))
        sources = consumer.delivered_by_source()
    finally:
        consumer.close()
    assert rows == reference
    for p in range(PARTITIONS):
        by = sources[(TOPIC, p)]
        assert by.get("remote", 0) > 0, (mode, p, by)  # below Kafka's log start: remote only
        if mode == "KAFKA_PREFERRED":  # back to Kafka at its log start
            assert by.get("kafka", 0) > 0, (mode, p, by)


@pytest.mark.parametrize("mode", ["REMOTE_PREFERRED", "KAFKA_PREFERRED"])
def test_after_kafka_retention_gateway_records_equal_the_reference(txn_stack: TieredStack, reference: list[Row], kafka_trimmed: dict[int, int], mode: str) -> None:
    rows = sorted(row for p in range(PARTITIONS) for row in _gateway_rows(txn_stack, mode, p))
    assert rows == reference
