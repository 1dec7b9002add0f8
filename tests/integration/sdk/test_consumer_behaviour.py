"""TieredConsumer beyond one mode: mode switches mid-stream, a rebalance mid-read, a restart from
committed offsets, read_committed over remote data, Pinterest-layout buckets, failures."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from tests.integration.sdk.conftest import COUNT, PARTITIONS
from tests.integration.sdk.test_consumer_modes import check_exact, expected_offsets, read_all
from tests.support.agent_env import agent_settings, wait_for
from tests.support.flaky_proxy import FlakyProxy
from tests.support.gateway_env import pinterest_bucket
from tests.support.kafka_clients import value_for
from tests.support.stack_env import TieredStack, create_tiered_topic, gateway_server, tiered_stack
from tests.support.transactions import COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS, uploaded_transactional_log
from tiered_kafka.consumer import Mode, TieredConsumer
from tiered_kafka.errors import RemoteReadError
from tiered_kafka.format.record_batch import iter_records
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.client.remote_read import decode_range, fetch_range

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kafka-segments"  # broker-written segments kept in the repository


def test_mode_switches_mid_stream_hand_off_at_the_exact_offset(retained: tuple[TieredStack, dict[int, int]]) -> None:
    stack, log_starts = retained
    consumer = TieredConsumer(stack.consumer_config("REMOTE_ONLY", **{"enable.auto.commit": False}))
    consumer.assign([TopicPartition("orders", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}

    def take(n: int) -> None:
        want = {p: min(len(got[p]) + n, len(expected_offsets(p))) for p in range(PARTITIONS)}
        for p, messages in read_all(consumer, {p: want[p] - len(got[p]) for p in range(PARTITIONS)}).items():
            got[p].extend(messages)

    try:
        take(200)  # remote only
        consumer.set_mode(Mode.KAFKA_PREFERRED)  # Kafka refuses (below its log start): remote again
        take(200)
        consumer.set_mode("REMOTE_PREFERRED")
        take(max(log_starts.values()) - 400 + 100)  # past the log start: still remote while it holds them
        consumer.set_mode(Mode.KAFKA_ONLY)  # the rest from Kafka
        take(COUNT)
        assert consumer.position([TopicPartition("orders", p) for p in range(PARTITIONS)])[0].offset == len(expected_offsets(0))
    finally:
        consumer.close()
    check_exact(got)


def test_a_rebalance_mid_read_loses_and_repeats_nothing(retained: tuple[TieredStack, dict[int, int]]) -> None:
    stack, _ = retained
    config = stack.consumer_config("REMOTE_PREFERRED", **{"auto.commit.interval.ms": 60_000})
    first = TieredConsumer(config)
    assigned: dict[str, list[int]] = {"first": [], "second": []}
    first.subscribe(["orders"], on_assign=lambda c, ps: assigned["first"].extend(p.partition for p in ps))
    seen: list = []
    try:
        while len(seen) < 600:  # mid-read, both partitions started
            seen.extend(m for m in first.consume(100, 0.5) if m.error() is None)
        first.pause(first.assignment())  # hold the read here until the group rebalances (revoke forgets the pause)
        second = TieredConsumer(config)
        second.subscribe(["orders"], on_assign=lambda c, ps: assigned["second"].extend(p.partition for p in ps))
        try:
            for _ in range(2000):
                if len(seen) >= COUNT:
                    break
                for consumer in (first, second):
                    seen.extend(m for m in consumer.consume(200, 0.2) if m.error() is None)
            assert assigned["second"], "the second consumer never got a partition"
        finally:
            second.close()
    finally:
        first.close()
    by_partition = {p: [m.offset() for m in seen if m.partition() == p] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        assert sorted(by_partition[p]) == expected_offsets(p), f"partition {p}: lost or repeated offsets"


def test_a_restart_continues_from_the_committed_offsets(retained: tuple[TieredStack, dict[int, int]]) -> None:
    stack, _ = retained
    config = stack.consumer_config("KAFKA_PREFERRED", **{"enable.auto.commit": False})
    first = TieredConsumer(config)
    first.subscribe(["orders"])
    before = read_all(first, {0: 500, 1: 500})
    first.commit(asynchronous=False)
    first.close()
    second = TieredConsumer(config)
    second.subscribe(["orders"])
    try:
        after = read_all(second, {p: len(expected_offsets(p)) - len(before[p]) for p in range(PARTITIONS)})
    finally:
        second.close()
    check_exact({p: before[p] + after[p] for p in range(PARTITIONS)})


def test_read_committed_over_remote_data(tmp_path: Path, redis_server, s3_server, s3_bucket) -> None:
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    with gateway_server(settings, s3_server) as url:
        # the position moves past control records, as Kafka's does; read_committed stops at p11's open transaction (19)
        for level, expected, position in (("read_committed", COMMITTED_OFFSETS, 19), ("read_uncommitted", UNCOMMITTED_OFFSETS, 22)):
            consumer = TieredConsumer({"tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": url, "tiered.cluster": settings.cluster, "isolation.level": level, "tiered.remote.poll.interval.ms": 100})
            consumer.assign([TopicPartition("txn", 0, 0)])
            try:
                offsets = [m.offset() for m in read_all(consumer, {0: len(expected)}, max_polls=20)[0]]
                assert offsets == expected, level
                assert consumer.consume(10, 0.5) == []  # read_committed: p11 (19-20) has no marker remote yet
                assert consumer.position([TopicPartition("txn", 0)])[0].offset == position
            finally:
                consumer.close()


def test_a_bucket_in_pinterests_layout(tmp_path: Path, redis_server, s3_server, s3_bucket) -> None:
    """Segments written by Pinterest's uploader (keyspace and Kafka files, no registry) read through the gateway."""
    cluster, topic = "pinterestCluster", "test_topic_a"
    keyspace = Keyspace("custom-prefix", cluster, 5)
    pinterest_bucket(s3_server, s3_bucket, keyspace, topic, segments=4, fixture=f"{topic}-0")  # with offset.wm, as Pinterest's uploader
    logs = sorted((FIXTURES / f"{topic}-0").glob("*.log"))[:4]
    expected = [(r.offset, r.value) for log in logs for r in iter_records(log.read_bytes())]
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    assert len(expected) == sum(manifest[f"{topic}-0"][log.name]["records"] for log in logs)
    settings = agent_settings(tmp_path, redis_server, s3_server, s3_bucket, cluster=cluster, s3={"prefix": "custom-prefix", "entropy_bits": 5})
    with gateway_server(settings, s3_server) as url:
        consumer = TieredConsumer({"tiered.storage.mode": "TIERED_STORAGE_ONLY", "kafka.cluster.id": cluster, "tiered.gateway.url": url, "offset.reset.policy": "EARLIEST"})
        consumer.assign([TopicPartition(topic, 0)])
        try:
            got = read_all(consumer, {0: len(expected)}, max_polls=50)[0]
        finally:
            consumer.close()
    assert [(m.offset(), m.value()) for m in got] == expected


def test_an_unreachable_gateway_is_a_clear_error_and_nothing_is_skipped(retained: tuple[TieredStack, dict[int, int]]) -> None:
    """A gateway failure that outlives the retries is the partition's error message (one error
    channel, as confluent-kafka: ``_TRANSPORT``, retriable), never a record skipped."""
    stack, _ = retained
    host, port = stack.gateway_url.removeprefix("http://").split(":")
    proxy = FlakyProxy(host, int(port))
    proxy.down = True
    config = stack.consumer_config("REMOTE_ONLY", **{"tiered.gateway.url": proxy.endpoint_url, "tiered.remote.retries": 1, "tiered.remote.retry.backoff.ms": 10})
    consumer = TieredConsumer(config)
    consumer.assign([TopicPartition("orders", 0, 0)])
    try:
        errors = []
        for _ in range(50):
            messages = consumer.consume(100, 0.2)
            assert all(m.error() is not None for m in messages), "a record while the gateway is down"
            errors += messages
            if errors:
                break
        assert errors, "the gateway failure was not surfaced"
        error = errors[0].error()
        assert (errors[0].topic(), errors[0].partition(), errors[0].offset()) == ("orders", 0, 0)
        assert error.code() == KafkaError._TRANSPORT and error.retriable() and not error.fatal(), error
        assert "orders-0: RemoteReadError" in error.str() and "failed after 2 attempts" in error.str(), error.str()
        assert consumer.position([TopicPartition("orders", 0)])[0].offset == 0
        proxy.down = False  # the gateway is back: the same consumer goes on from where it was
        assert [m.offset() for m in read_all(consumer, {0: 100})[0]][:100] == list(range(100))
    finally:
        consumer.close()
        proxy.close()


def test_an_expired_presigned_url_is_replanned(start_kafka, tmp_path: Path, redis_server, s3_server, s3_bucket) -> None:
    with tiered_stack(start_kafka, tmp_path, redis_server, s3_server, s3_bucket, presign_ttl_s=1) as stack:
        create_tiered_topic(stack, "ttl", 1)
        stack.produce("ttl", 500)
        stack.wait_uploaded("ttl")
        client = GatewayClient(stack.gateway_url, stack.cluster)
        plan = client.plan("ttl", 0, 10, 20_000)
        planned = plan.ranges[0]
        wait_for(lambda: plan.expires_at_ms < time.time() * 1000 - 1500, what="the URL to expire")
        with pytest.raises(RemoteReadError):
            client.fetch(planned)  # S3 refuses it now
        batches = decode_range(fetch_range(client, "ttl", 0, planned), planned, object_key=plan.object_key)
        assert batches[0].base_offset <= 10 <= batches[-1].last_offset
        client.close()


def test_the_cli_cats_a_range_with_a_progress_bar(retained: tuple[TieredStack, dict[int, int]]) -> None:
    stack, _ = retained
    command = [str(Path(sys.executable).parent / "tiered-kafka"), "cat", "orders", "1", "--gateway", stack.gateway_url, "--cluster", stack.cluster, "--from", "10", "--to", "700", "--progress"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["offset"] for r in lines] == list(range(10, 700))
    for r in lines:  # values are not all UTF-8: those come base64-encoded
        value = base64.b64decode(r["value"]) if r.get("value_encoding") == "base64" else r["value"].encode()
        assert value == value_for(r["offset"] * 2 + 1) and r["key"] == f"k{r['offset'] * 2 + 1}"
    assert "690/690" in result.stderr  # the progress bar's final state
    usage = subprocess.run([*command[:4], "--from", "1"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "--gateway and --cluster" in usage.stderr
