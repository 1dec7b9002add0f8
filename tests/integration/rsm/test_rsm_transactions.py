"""Issue 18, read_committed over a KIP-405 cluster: the remote last stable offset comes from the producer
snapshot the RSM stores in ``.indexes``, aborted transactions from its ``.txnindex``, by the same rules as
for our agent's segments (``tiered_kafka.transactions``).

The log is ``tests/support/transactions.py``'s (segments 0 and 14 rotated: a committed, three aborted
transactions, and p11 open from offset 19 at the end of remote data), laid out by the RSM writer
compressed (the SDK decompresses) and compressed + encrypted (the gateway decrypts).
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.rsm.conftest import KEY_ID, PREFIX, RsmBucket, rsm_gateway
from tests.support.transactions import COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS, write_transactional_log
from tests.support.rsm_writer import write_rsm_segment
from tiered_kafka.bulk import BulkReader, read_table
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.rsm.keys import uuid_from_bytes

pytestmark = pytest.mark.integration

VARIANTS = {"txn-zipped": {"compression": True, "encryption": False}, "txn-vault": {"compression": True, "encryption": True}}
NO_SNAPSHOT = "txn-bare"
OPEN_TXN_FIRST_OFFSET = 19  # p11's first record: its COMMIT (22) is in the active segment, never uploaded


@pytest.fixture
def txn_bucket(tmp_path: Path, s3_server: Any, s3_bucket: str, key_pair: tuple[bytes, bytes]) -> RsmBucket:
    directory = tmp_path / "txn-0"
    write_transactional_log(directory).close()
    assert (directory / "00000000000000000022.snapshot").exists()  # the producer state at segment 14's end
    private_pem, public_pem = key_pair
    client = s3_server.client()
    topic_ids, keys = {}, {}
    bare = tmp_path / "bare" / "txn-0"  # the same segments without producer snapshots
    shutil.copytree(directory, bare, ignore=shutil.ignore_patterns("*.snapshot"))
    for topic, variant in {**VARIANTS, NO_SNAPSHOT: {"compression": False, "encryption": False}}.items():
        topic_ids[topic] = uuid_from_bytes(secrets.token_bytes(16))
        keys[topic] = [
            write_rsm_segment(
                client, s3_bucket, prefix=PREFIX, topic=topic, topic_id=topic_ids[topic], partition=0,
                segment_dir_or_files=(bare if topic == NO_SNAPSHOT else directory) / f"{base:020d}.log", chunk_size=256,
                compression=variant["compression"],
                encryption_key=(KEY_ID, public_pem) if variant["encryption"] else None,
            )
            for base in (0, 14)
        ]
    return RsmBucket(s3_server, s3_bucket, topic_ids, keys, private_pem, public_pem)


def _records(url: str, topic: str, offset: int, level: str) -> dict[str, Any]:
    response = httpx.get(
        f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0/records",
        params={"offset": offset, "isolation_level": level, "mode": "REMOTE_ONLY", "encoding": "utf8"}, timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("topic", sorted(VARIANTS))
def test_read_committed_over_rsm_segments(txn_bucket: RsmBucket, topic: str) -> None:
    with rsm_gateway(txn_bucket) as url:
        with GatewayClient(url, "rsm") as client:
            remote = client.partition(topic, 0).remote
            assert remote is not None and (remote.latest_offset, remote.last_stable_offset) == (21, OPEN_TXN_FIRST_OFFSET)
            assert client.plan(topic, 0, 0, 10_000, read_committed=True).last_stable_offset == OPEN_TXN_FIRST_OFFSET

        # the records endpoint: p7 committed, p8/p9/p10 aborted (p9's ABORT and .txnindex entry in the next segment)
        assert [r["offset"] for r in _records(url, topic, 0, "read_uncommitted")["records"]] == UNCOMMITTED_OFFSETS
        committed = _records(url, topic, 0, "read_committed")
        assert [r["offset"] for r in committed["records"]] == COMMITTED_OFFSETS
        assert [r["value"] for r in committed["records"]][:3] == ["plain-v0", "plain-v1", "p7-v0"]
        assert (committed["next_offset"], committed["last_stable_offset"]) == (OPEN_TXN_FIRST_OFFSET, OPEN_TXN_FIRST_OFFSET)
        # offset 21 is not transactional: only the remote LSO (p11 open since 19, from the snapshot) holds it back
        held = _records(url, topic, 21, "read_committed")
        assert (held["records"], held["next_offset"], held["last_stable_offset"]) == ([], 21, OPEN_TXN_FIRST_OFFSET)
        assert [r["offset"] for r in _records(url, topic, 21, "read_uncommitted")["records"]] == [21]

        # the SDK (bulk reader: GatewayClient plans + remote_read.fetch_range + the CommittedFilter)
        with BulkReader(url, "rsm", isolation_level="read_committed") as reader:
            table = reader.read_table(topic, 0)
            assert table.column("offset").to_pylist() == COMMITTED_OFFSETS
            assert [(h.first_offset, h.records) for h in reader.held_back] == [(OPEN_TXN_FIRST_OFFSET, 3)]  # 19, 20, 21
        assert table.column("value").to_pylist()[-2:] == [b"tail-v0", b"mid-v0"]
        with BulkReader(url, "rsm", isolation_level="read_committed") as reader:
            assert reader.read_table(topic, 0, start_offset=21).num_rows == 0
            assert [h.first_offset for h in reader.held_back] == [21]
        assert read_table(url, "rsm", topic, 0).column("offset").to_pylist() == UNCOMMITTED_OFFSETS


def test_the_last_stable_offset_without_open_transactions_and_without_a_snapshot(rsm_bucket: RsmBucket, txn_bucket: RsmBucket) -> None:
    """The fixture segments' snapshot holds no open transaction: the LSO is the remote end + 1. Segments
    stored without a producer snapshot (an empty index, as the writer stores a missing one) leave it
    unknown (null): read_committed then holds only what the markers leave undecided, as for agent
    entries that do not know (``transactions.remote_last_stable_offset``)."""
    with rsm_gateway(rsm_bucket) as url, GatewayClient(url, "rsm") as client:  # one bucket: every topic is listed
        remote = client.partition("plain", 0).remote
        assert remote is not None and remote.last_stable_offset == remote.latest_offset + 1
        remote = client.partition(NO_SNAPSHOT, 0).remote
        assert remote is not None and (remote.latest_offset, remote.last_stable_offset) == (21, None)
        held = _records(url, NO_SNAPSHOT, 19, "read_committed")
        assert (held["records"], held["next_offset"], held["last_stable_offset"]) == ([], 19, 19)  # p11 undecided: its marker is not remote
        assert [r["offset"] for r in _records(url, NO_SNAPSHOT, 21, "read_committed")["records"]] == [21]  # no LSO to hold it
