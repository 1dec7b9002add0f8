"""Errors TieredConsumer must not lose (one error channel, ``tiered_kafka.consumer.channel``):
OFFSET_OUT_OF_RANGE of several partitions when handling one fails, a recorded gap under
``tiered.remote.gap.policy=error``, and a failed commit on revoke (unassign, or a rebalance in subscribe mode: the next poll) or
close (raised as confluent-kafka's commit raises it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.integration.sdk.conftest import PARTITIONS
from tests.integration.sdk.test_consumer_modes import check_exact, expected_offsets, read_all
from tests.support.flaky_proxy import FlakyProxy
from tests.support.stack_env import TieredStack, gateway_server, topic_with_a_lost_segment
from tests.support.transactions import UNCOMMITTED_OFFSETS, uploaded_transactional_log
from tiered_kafka.consumer import TieredConsumer

pytestmark = pytest.mark.integration


def test_out_of_range_of_every_partition_survives_a_failure_of_one(retained: tuple[TieredStack, dict[int, int]]) -> None:
    """KAFKA_PREFERRED from offset 0, below Kafka's log start on both partitions: Kafka answers
    OFFSET_OUT_OF_RANGE for each, and the gateway (asked where remote storage is) is down. Each
    partition's error message (``_TRANSPORT``) comes again at every poll and no record is
    delivered; once the gateway is back, *both* partitions go on from remote storage."""
    stack, _ = retained
    host, port = stack.gateway_url.removeprefix("http://").split(":")
    proxy = FlakyProxy(host, int(port))
    proxy.down = True
    config = stack.consumer_config("KAFKA_PREFERRED", **{"tiered.gateway.url": proxy.endpoint_url, "tiered.remote.retries": 0, "enable.auto.commit": False})
    consumer = TieredConsumer(config)
    consumer.assign([TopicPartition("orders", p, 0) for p in range(PARTITIONS)])
    try:
        surfaced: dict[int, int] = {p: 0 for p in range(PARTITIONS)}
        for _ in range(40):
            for message in consumer.consume(100, 0.2):
                error = message.error()
                assert error is not None and error.code() == KafkaError._TRANSPORT, f"{message.partition()}@{message.offset()}: {error}"
                assert message.topic() == "orders" and message.offset() == 0 and "RemoteReadError" in error.str(), error.str()
                surfaced[message.partition()] += 1
            if min(surfaced.values()) >= 3:
                break
        assert min(surfaced.values()) >= 3, f"the gateway failure was not surfaced for each partition: {surfaced}"
        proxy.down = False
        check_exact(read_all(consumer, {p: len(expected_offsets(p)) for p in range(PARTITIONS)}))
    finally:
        consumer.close()
        proxy.close()


def test_a_recorded_gap_under_the_error_policy_is_the_partitions_error_message(retained: tuple[TieredStack, dict[int, int]]) -> None:
    """REMOTE_ONLY with ``tiered.remote.gap.policy=error`` over a topic whose second segment remote
    storage lost: every record before the gap, then the partition's OFFSET_OUT_OF_RANGE message naming
    the gap (again at the next poll, the position staying at the gap), and after a seek past it the
    rest of what remote storage holds."""
    stack, _ = retained
    topic = "orders-gappy"
    lost = topic_with_a_lost_segment(stack, topic, 400)
    consumer = TieredConsumer(stack.consumer_config("REMOTE_ONLY", **{"tiered.remote.gap.policy": "error", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        records: list[int] = []
        errors: list = []
        for _ in range(100):
            for message in consumer.consume(500, 0.2):
                (records if message.error() is None else errors).append(message.offset() if message.error() is None else message)
            if len(errors) >= 2:
                break
        assert records == list(range(lost.base_offset)), "every record before the gap, once"
        assert len(errors) >= 2, "the gap was not reported again"
        for message in errors:
            error = message.error()
            assert (message.topic(), message.partition(), message.offset()) == (topic, 0, lost.base_offset)
            assert error.code() == KafkaError.OFFSET_OUT_OF_RANGE and not error.retriable(), error
            assert f"offsets {lost.base_offset}..{lost.last_offset}" in error.str() and "test: segment lost" in error.str(), error.str()
        assert consumer.position([TopicPartition(topic, 0)])[0].offset == lost.base_offset
        consumer.seek(TopicPartition(topic, 0, lost.last_offset + 1))
        last = max(s.last_offset for s in stack.registry.segments(topic, 0))  # REMOTE_ONLY: up to remote storage's end
        after: list[int] = []
        for _ in range(100):
            after += [m.offset() for m in consumer.consume(500, 0.2) if m.error() is None]
            if after and after[-1] >= last:
                break
        assert after == list(range(lost.last_offset + 1, last + 1))
    finally:
        consumer.close()


def test_a_failed_commit_on_revoke_or_close_raises(start_kafka, tmp_path: Path, redis_server, s3_server, s3_bucket) -> None:
    """A remote-only topic (the broker does not know it): the offsets of what was read cannot be
    committed to the group (UNKNOWN_TOPIC_OR_PARTITION), and unassign() and close() say so."""
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    broker = start_kafka(tmp_path / "broker-logs")
    with gateway_server(settings, s3_server) as url:
        config = {
            "bootstrap.servers": broker.bootstrap_servers, "group.id": "g-commit", "tiered.mode": "REMOTE_ONLY",
            "tiered.gateway.url": url, "tiered.cluster": settings.cluster, "isolation.level": "read_uncommitted",
        }
        consumer = TieredConsumer(config)
        try:
            consumer.assign([TopicPartition("txn", 0, 0)])
            assert [m.offset() for m in read_all(consumer, {0: 5}, max_polls=20)[0]][:5] == UNCOMMITTED_OFFSETS[:5]
            with pytest.raises(KafkaException) as revoked:
                consumer.unassign()
            assert revoked.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            assert consumer.assignment() == []  # the revoke completed all the same
            consumer.assign([TopicPartition("txn", 0, 3)])
            assert read_all(consumer, {0: 2}, max_polls=20)[0][0].offset() == 3
        except BaseException:
            consumer.close()
            raise
        with pytest.raises(KafkaException) as closed:
            consumer.close()
        assert closed.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        with pytest.raises(RuntimeError, match="closed"):
            consumer.poll(0)


def test_a_failed_commit_on_a_rebalance_revoke_raises_on_the_next_poll(start_kafka, tmp_path: Path, redis_server, s3_server, s3_bucket) -> None:
    """Subscribe mode: a TieredConsumer reads ``txn`` from remote storage; the broker then forgets
    the topic (DeleteTopics), so the offsets of what was read cannot be committed
    (UNKNOWN_TOPIC_OR_PARTITION). A second consumer joins the group: the rebalance revokes the
    partition inside poll, and the failed commit of the revoke is raised by the next poll."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    from tests.support.kafka_clients import create_topic

    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    broker = start_kafka(tmp_path / "broker-logs")
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "txn", 1)
    create_topic(bootstrap, "other", 1)
    group = "g-revoke"
    with gateway_server(settings, s3_server) as url:
        consumer = TieredConsumer({
            "bootstrap.servers": bootstrap, "group.id": group, "tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": url,
            "tiered.cluster": settings.cluster, "isolation.level": "read_uncommitted", "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 3_600_000,  # only the revoke commits
        })  # fmt: skip
        joiner = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
        try:
            revoked: list[list[TopicPartition]] = []
            consumer.subscribe(["txn"], on_revoke=lambda _c, partitions: revoked.append(partitions))
            offsets: list[int] = []
            for _ in range(100):
                offsets += [m.offset() for m in consumer.consume(10, 0.2) if m.error() is None]
                if len(offsets) >= 5:
                    break
            assert offsets[:5] == UNCOMMITTED_OFFSETS[:5]
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.delete_topics(["txn"])["txn"].result(timeout=30)
            joiner.subscribe(["other"])
            raised: KafkaException | None = None
            for _ in range(200):
                joiner.poll(0.05)
                try:
                    consumer.poll(0.1)
                except KafkaException as err:
                    raised = err
                    break
            assert raised is not None, "the failed commit of the revoke was not raised"
            assert revoked and [(p.topic, p.partition) for p in revoked[0]] == [("txn", 0)]
            error = raised.args[0]
            assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and "Commit failed" in error.str(), error  # the broker's code, as confluent-kafka's commit raises it
            assert consumer.assignment() == []  # the revoke completed all the same
        finally:
            joiner.close()
            consumer.close()
