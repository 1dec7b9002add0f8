"""The bulk API (``tiered_kafka.bulk``) on the real stack (a real Kafka broker, agent, SeaweedFS,
Redis, gateway): exact records against the broker's own files, offsets and partitions, pandas
(and polars / DuckDB where installed), few GETs, read_committed over the hand-built
transactional log, and errors instead of empty results (offsets not remote, a recorded gap)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.integration.spark.conftest import records_on_disk
from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, registry_for, wait_for
from tests.support.batches import build_v2
from tests.support.stack_env import TieredStack, create_tiered_topic, gateway_server, own_tiered_stack
from tests.support.transactions import BASE_TIMESTAMP, COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS, recs, uploaded_transactional_log
from tiered_kafka.bulk import BulkReader, bulk_schema, read_arrow, read_table
from tiered_kafka.errors import ConfigError, GatewayRequestError, OffsetNotRemoteError, RemoteGapError
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration

TOPIC, PARTITIONS, COUNT = "bulk", 3, 3000
GAPPY, GAPPY_COUNT = "bulk-gappy", 2000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[TieredStack]:
    with own_tiered_stack(tmp_path_factory.mktemp("bulk-stack"), redis_server, s3_server, "bulk") as tiered:
        create_tiered_topic(tiered, TOPIC, PARTITIONS)
        create_tiered_topic(tiered, GAPPY, 1, segment_bytes=16_000)
        tiered.produce(TOPIC, COUNT, PARTITIONS)
        tiered.produce(GAPPY, GAPPY_COUNT, 1, **{"compression.type": "lz4"})
        tiered.wait_uploaded(TOPIC, PARTITIONS)
        tiered.wait_uploaded(GAPPY, 1)
        yield tiered


def remote_records(stack: TieredStack, topic: str, partition: int) -> dict[int, Any]:
    return records_on_disk(stack, topic, partition)


def test_whole_topic_is_every_remote_record_once_with_its_columns(stack: TieredStack) -> None:
    table = read_table(stack.gateway_url, stack.cluster, TOPIC, include_headers=True)
    assert table.schema == bulk_schema(include_headers=True)
    rows = table.to_pylist()
    for p in range(PARTITIONS):
        expected = remote_records(stack, TOPIC, p)
        mine = [r for r in rows if r["partition"] == p]
        assert [r["offset"] for r in mine] == sorted(expected) and len(mine) > 100
        for r in mine:
            key, value, ts, ts_type, headers = expected[r["offset"]]
            assert (r["topic"], r["key"], r["value"], r["timestamp_type"]) == (TOPIC, key, value, ts_type)
            assert int(r["timestamp"].timestamp() * 1000) == ts and r["timestamp"].tzinfo is not None
            assert [(h["key"], h["value"]) for h in r["headers"]] == headers
    assert [r["partition"] for r in rows] == sorted(r["partition"] for r in rows)  # partitions in order


def test_one_partition_range_and_per_partition_offsets(stack: TieredStack) -> None:
    expected = remote_records(stack, TOPIC, 1)
    offsets = sorted(expected)
    start, end = offsets[17], offsets[-23]
    batches = list(read_arrow(stack.gateway_url, stack.cluster, TOPIC, 1, start_offset=start, end_offset=end))
    assert all(isinstance(b, pa.RecordBatch) and b.num_rows for b in batches)
    got = [o for b in batches for o in b.column("offset").to_pylist()]
    assert got == list(range(start, end))
    table = read_table(stack.gateway_url, stack.cluster, TOPIC, start_offset={0: 5, 1: 7, 2: 9}, end_offset={0: 10, 1: 10, 2: 10})
    assert [(r["partition"], r["offset"]) for r in table.select(["partition", "offset"]).to_pylist()] == [
        (0, o) for o in range(5, 10)] + [(1, o) for o in range(7, 10)] + [(2, 9)]
    assert read_table(stack.gateway_url, stack.cluster, TOPIC, 0, start_offset=4, end_offset=4).num_rows == 0  # an empty range, asked for


def test_usable_from_pandas_and_the_installed_dataframe_libraries(stack: TieredStack) -> None:
    table = read_table(stack.gateway_url, stack.cluster, TOPIC, 2, end_offset=50)
    frame = table.to_pandas()
    assert list(frame.columns) == ["topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value"]
    assert frame["offset"].tolist() == list(range(50)) and str(frame["timestamp"].dt.tz) == "UTC"
    expected = remote_records(stack, TOPIC, 2)
    assert frame["value"].tolist() == [expected[o][1] for o in range(50)]
    checked = ["pandas"]
    if importlib.util.find_spec("polars") is not None:
        import polars

        assert polars.from_arrow(table)["offset"].to_list() == list(range(50))
        checked.append("polars")
    if importlib.util.find_spec("duckdb") is not None:
        import duckdb

        assert duckdb.sql("select count(*), max(\"offset\") from table").fetchone() == (50, 49)
        checked.append("duckdb")
    assert "pandas" in checked


def test_a_plan_is_read_with_as_few_gets_as_the_budget_allows(stack: TieredStack) -> None:
    """Plans asked with ranges sized by the budget: one GET per segment with the default budget
    (where the gateway could cut 8 KiB ranges), more and smaller GETs with a small one."""
    segments = stack.registry.segments(TOPIC, 0)
    url = stack.gateway_url
    from tiered_kafka.client.gateway import GatewayClient

    with GatewayClient(url, stack.cluster) as client:  # batch indexes loaded: the gateway can cut small ranges
        for segment in segments:
            wait_for(lambda s=segment: len(client.plan(TOPIC, 0, s.base_offset, 1 << 20, range_bytes=8192).ranges) > 5, what="8 KiB ranges planned")
    with BulkReader(url, stack.cluster) as reader:  # 256 MiB: a whole segment per GET
        rows = reader.read_table(TOPIC, 0).column("offset").to_pylist()
        assert reader.stats.gets == len(segments) == reader.stats.plans and reader.stats.rows == len(rows)
        assert reader.stats.bytes == sum(s.size for s in segments)
    with BulkReader(url, stack.cluster, memory_budget=128 * 1024, parallelism=1) as small:  # GETs of at most 64 KiB
        assert small.read_table(TOPIC, 0).column("offset").to_pylist() == rows == sorted(remote_records(stack, TOPIC, 0))
        assert small.stats.gets > len(segments) and small.stats.bytes == reader.stats.bytes


def test_offsets_remote_storage_does_not_hold_are_errors(stack: TieredStack) -> None:
    info = stack.registry.partition_info(TOPIC, 0)
    assert info is not None
    url, cluster = stack.gateway_url, stack.cluster
    with pytest.raises(OffsetNotRemoteError, match=rf"OFFSET_OUT_OF_RANGE: end_offset {info.latest_offset + 5} of bulk-0 is past remote storage's end"):
        read_table(url, cluster, TOPIC, 0, end_offset=info.latest_offset + 5)
    with pytest.raises(OffsetNotRemoteError, match="start_offset"):
        read_table(url, cluster, TOPIC, 0, start_offset=info.latest_offset + 2)
    with pytest.raises(GatewayRequestError) as unknown:
        read_table(url, cluster, "no-such-topic")
    assert unknown.value.code == "unknown_topic_or_partition"
    with pytest.raises(GatewayRequestError, match="unknown_topic_or_partition: no data for bulk-7"):
        read_table(url, cluster, TOPIC, 7)
    with pytest.raises(ConfigError, match="isolation_level must be one of"):
        read_table(url, cluster, TOPIC, isolation_level="committed")
    with pytest.raises(ConfigError, match="start_offset 9 is after end_offset 3"):
        read_table(url, cluster, TOPIC, 0, start_offset=9, end_offset=3)


def test_a_recorded_gap_is_an_error_unless_skipped_and_then_reported(stack: TieredStack) -> None:
    url, cluster = stack.gateway_url, stack.cluster
    whole = read_table(url, cluster, GAPPY).column("offset").to_pylist()
    assert whole == list(range(len(whole))) and len(whole) > 500
    segments = stack.registry.segments(GAPPY, 0)
    lost = segments[2]
    assert stack.registry.delete_segment(GAPPY, 0, lost.base_offset) is not None
    stack.registry.record_gap(GAPPY, 0, lost.base_offset, lost.last_offset, "test: segment lost")
    with pytest.raises(RemoteGapError, match=rf"bulk-gappy-0: remote storage lacks offsets {lost.base_offset}..{lost.last_offset} \(test: segment lost\); pass skip_gaps=True") as err:
        read_table(url, cluster, GAPPY)
    assert (err.value.start_offset, err.value.end_offset) == (lost.base_offset, lost.last_offset)
    with BulkReader(url, cluster, skip_gaps=True) as reader:
        offsets = reader.read_table(GAPPY).column("offset").to_pylist()
        assert offsets == [o for o in whole if not lost.base_offset <= o <= lost.last_offset]
        assert [(g.start_offset, g.end_offset, g.reason) for g in reader.gaps] == [(lost.base_offset, lost.last_offset, "test: segment lost")]
    assert read_table(url, cluster, GAPPY, end_offset=lost.base_offset).num_rows == lost.base_offset  # before the gap: unaffected


def test_offsets_mapping_naming_partitions_the_topic_lacks_is_a_config_error(stack: TieredStack) -> None:
    url, cluster = stack.gateway_url, stack.cluster
    with pytest.raises(ConfigError, match=r"start_offset names partitions 3, 7 that topic 'bulk' does not have \(its partitions: 0, 1, 2\)"):
        read_table(url, cluster, TOPIC, start_offset={0: 5, 7: 3, 3: 1})  # a typo never reads every partition from earliest
    with pytest.raises(ConfigError, match=r"end_offset names partitions 9 that topic 'bulk' does not have"):
        read_table(url, cluster, TOPIC, 0, end_offset={0: 10, 9: 1})
    table = read_table(url, cluster, TOPIC, start_offset={2: 7}, end_offset={0: 3, 1: 2, 2: 9})  # unnamed: the default (earliest)
    assert [(r["partition"], r["offset"]) for r in table.select(["partition", "offset"]).to_pylist()] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 7), (2, 8)]


def write_compacted_log(directory: Path) -> None:
    """A partition log as Kafka's cleaner leaves it: whole batches removed (offsets 5..9), and a
    segment whose base offset (15) lies below its first batch (20); the active segment (25) stays local."""
    plog = PartitionLog.create(directory, LogConfig(retention_ms=-1))
    for base in (0, 10):
        plog.append(build_v2(recs("a", 5, at=base), base_offset=base), assign_offsets=False)
    plog.roll()
    plog.append(build_v2(recs("b", 5, at=20), base_offset=20), assign_offsets=False)
    plog.roll()
    plog.append(build_v2(recs("c", 1, at=25), base_offset=25), assign_offsets=False)
    plog.close()


def test_offsets_compaction_removed_are_passed_not_gaps(tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    """As a Kafka consumer: a plan starting after the asked offset with no recorded gap is compaction."""
    write_compacted_log(tmp_path / "logs" / "compacted-0")
    checkpoint_high_watermarks(tmp_path / "logs")  # no broker: everything written is committed
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments("compacted", 0)] == [0, 15], what="compacted segments uploaded")
    present = [*range(0, 5), *range(10, 15), *range(20, 25)]
    with gateway_server(settings, s3_server) as url, BulkReader(url, settings.cluster) as reader:
        assert reader.read_table("compacted").column("offset").to_pylist() == present and reader.gaps == []
        for start in (5, 15):  # inside the removed batches; a segment's base offset below its first batch
            assert reader.read_table("compacted", 0, start_offset=start).column("offset").to_pylist() == [o for o in present if o >= start]
        assert reader.read_table("compacted", 0, start_offset=6, end_offset=9).num_rows == 0  # only removed offsets: nothing, no error


@pytest.fixture
def txn(tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> Any:
    """Topic ``txn`` partition 0 (tests/support/transactions.py), segments 0 and 14 uploaded."""
    return uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)


def test_read_committed_over_committed_aborted_and_open_transactions(txn: Any, s3_server: Any) -> None:
    with gateway_server(txn, s3_server) as url:
        with BulkReader(url, txn.cluster, isolation_level="read_committed", include_headers=True) as reader:
            table = reader.read_table("txn")
            assert table.column("offset").to_pylist() == COMMITTED_OFFSETS
            assert [(h.first_offset, h.records) for h in reader.held_back] == [(19, 3)]  # p11 open, 21 behind it
        assert [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()] == [BASE_TIMESTAMP + o for o in COMMITTED_OFFSETS]
        assert table.column("value").to_pylist()[:3] == [b"plain-v0", b"plain-v1", b"p7-v0"]
        assert read_table(url, txn.cluster, "txn").column("offset").to_pylist() == UNCOMMITTED_OFFSETS  # read_uncommitted, the default
        # an end inside p9's transaction: its ABORT (offset 14) is read past the end, so nothing is held back
        with BulkReader(url, txn.cluster, isolation_level="read_committed") as reader:
            assert reader.read_table("txn", 0, end_offset=13).column("offset").to_pylist() == [0, 1, 2, 3, 4, 8]
            assert reader.held_back == []
        for start in (9, 15):  # starting after a transaction's first record, or inside an aborted one
            got = read_table(url, txn.cluster, "txn", 0, start_offset=start, isolation_level="read_committed").column("offset").to_pylist()
            assert got == [o for o in COMMITTED_OFFSETS if o >= start]
