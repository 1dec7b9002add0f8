"""read_committed in every mode (issue 12) over the hand-built transactional log
(tests/support/transactions.py): segments 0 and 14 are remote, and the development broker serves the
whole log, whose active segment holds p11's COMMIT marker (22).

No aborted record, no control record; remote storage holds p11 (19-20) behind its undecided
transaction and hands over to Kafka at 19, where Kafka's read_committed takes over; a resume from a
committed offset inside that transaction delivers nothing below it; the position passes the trailing
marker, so the committed offset reaches the high watermark (lag 0)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tests.integration.sdk.test_consumer_modes import read_all
from tests.support.stack_env import gateway_server
from tests.support.transactions import COMMITTED_OFFSETS, uploaded_transactional_log
from tiered_kafka.consumer import TieredConsumer

pytestmark = pytest.mark.integration
TP0 = TopicPartition("txn", 0)
ALL_COMMITTED = [*COMMITTED_OFFSETS, 19, 20, 21]  # p11 commits at 22, in the segment only Kafka has
END = 23


@pytest.fixture
def txn_stack(start_dev_broker: Any, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> Iterator[tuple[str, str, str]]:
    """(bootstrap, gateway URL, cluster): the broker serving topic ``txn`` from the hand-built log."""
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    log_dir = tmp_path / "logs"
    topics = {"topics": [{"name": "txn", "topic_id": str(uuid.uuid4()), "partitions": 1, "configs": {"retention.ms": "-1"}}]}
    (log_dir / "dev-broker-topics.json").write_text(json.dumps(topics))
    broker = start_dev_broker(log_dir)
    bootstrap = broker.broker.bootstrap_servers
    with gateway_server(settings, s3_server, bootstrap) as url:
        yield bootstrap, url, settings.cluster


def consumer_for(stack: tuple[str, str, str], mode: str) -> TieredConsumer:
    bootstrap, url, cluster = stack
    return TieredConsumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "tiered.mode": mode, "tiered.gateway.url": url,
        "tiered.cluster": cluster, "isolation.level": "read_committed", "enable.auto.commit": False, "tiered.remote.poll.interval.ms": 100,
    })


@pytest.mark.parametrize("mode", ["KAFKA_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED"])
def test_read_committed_in_each_mode_and_lag_reaches_zero(txn_stack: tuple[str, str, str], mode: str) -> None:
    consumer = consumer_for(txn_stack, mode)
    try:
        consumer.assign([TopicPartition("txn", 0, 0)])
        got = read_all(consumer, {0: len(ALL_COMMITTED)}, max_polls=40)[0]
        assert [m.offset() for m in got] == ALL_COMMITTED, mode
        assert consumer.consume(10, 1.0) == []
        assert consumer.position([TP0])[0].offset == END  # past p11's COMMIT marker (22)
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TP0], timeout=10)[0].offset
        assert committed == consumer.get_watermark_offsets(TP0, timeout=10)[1] == END, "committed lag is 0"
    finally:
        consumer.close()


@pytest.mark.parametrize("mode", ["REMOTE_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED", "KAFKA_ONLY"])
def test_a_resume_inside_an_open_transaction_delivers_nothing_below_it(txn_stack: tuple[str, str, str], mode: str) -> None:
    """Offset 20 is inside p11's transaction (19-20), undecided in remote storage."""
    consumer = consumer_for(txn_stack, mode)
    try:
        consumer.assign([TopicPartition("txn", 0, 20)])
        if mode == "REMOTE_ONLY":  # remote storage has no marker for p11: nothing is decided after 19
            assert consumer.consume(10, 1.5) == []
            assert consumer.position([TP0])[0].offset == 20
            return
        got = read_all(consumer, {0: 2}, max_polls=20)[0]
        assert [m.offset() for m in got] == [20, 21]
        assert consumer.consume(10, 0.5) == [] and consumer.position([TP0])[0].offset == END
    finally:
        consumer.close()
