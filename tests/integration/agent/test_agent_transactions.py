"""The agent on a transactional log: .txnindex and producer snapshots uploaded, markers counted."""

from __future__ import annotations

import pytest

from tests.support.agent_env import registry_for
from tests.support.transactions import ABORTED_TXNS, uploaded_transactional_log
from tiered_kafka.format import txn_index
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.rebuild import rebuild_registry

pytestmark = pytest.mark.integration


def test_segments_carry_their_aborted_transactions_and_control_records(redis_server, s3_server, s3_bucket, tmp_path) -> None:
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    directory = tmp_path / "logs" / "txn-0"
    first, second = registry.segments("txn", 0)
    # segment 0: COMMIT p7 at 9, ABORT p8 at 10 (one .txnindex entry); segment 14: ABORTs at 14 and 18
    assert (first.aborted_txns, first.control_records) == (1, 2)
    assert (second.aborted_txns, second.control_records) == (2, 2)
    assert [len(ABORTED_TXNS[e.base_offset]) for e in (first, second)] == [1, 2]

    client = s3_server.client()
    keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
    for entry, next_base in ((first, 14), (second, 22)):
        assert "txnindex" in entry.files
        key = keyspace.segment_key("txn", 0, entry.base_offset, FileKind.TXNINDEX)
        body = client.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
        assert body == (directory / f"{entry.base_offset:020d}.txnindex").read_bytes()
        assert txn_index.parse(body) == ABORTED_TXNS[entry.base_offset]
        # the producer state after this segment is the snapshot the writer took at the roll,
        # named by the next segment's base offset; it ships under this segment's stem
        snapshot = directory / f"{next_base:020d}.snapshot"
        assert snapshot.exists() and "snapshot" in entry.files
        key = keyspace.segment_key("txn", 0, entry.base_offset, FileKind.SNAPSHOT)
        assert client.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == snapshot.read_bytes()

    # the counts are in the .log object's metadata too: a rebuilt registry keeps them
    registered = registry.dump()
    registry.clear_partition("txn", 0)
    agent = Agent(settings)
    rebuild_registry(agent.store, registry)
    assert registry.dump() == registered
    assert [(e.aborted_txns, e.control_records) for e in registry.segments("txn", 0)] == [(1, 2), (2, 2)]
    # and the first offset of the earliest transaction open after each (p9 since 11, p11 since 19)
    assert [e.open_txn_first_offset for e in registry.segments("txn", 0)] == [11, 19]
