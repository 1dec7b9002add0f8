"""Issue 18: with Kafka configured, ``__remote_log_metadata`` decides which segments are live (records
produced into the development broker); REMOTE_PREFERRED hands off from an RSM segment to Kafka exactly."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.rsm.conftest import CHUNK_SIZE, PREFIX, SEGMENTS, RsmBucket, expected_records, log_path, rsm_gateway
from tests.support.kafka_clients import create_topic, produce, value_for
from tests.support.rsm_writer import layout_rsm_segment, random_uuid, upload_rsm_segment
from tiered_kafka.consumer import TieredConsumer
from tiered_kafka.rsm.remote_log_metadata import RemoteLogSegmentState, encode_record, metadata_partition

pytestmark = pytest.mark.integration

METADATA_TOPIC = "__remote_log_metadata"
METADATA_PARTITIONS = 3
TOPIC = "orders"
EXPECTED = expected_records()


@pytest.fixture
def metadata_stack(start_dev_broker: Any, tmp_path: Path, s3_server: Any, s3_bucket: str) -> tuple[str, RsmBucket]:
    """Three compressed segments uploaded the RSM's way; the metadata says: segment 0 finished then
    deletion started (not live), segment 362 finished (live), segment 644 started only (its copy never
    finished: an orphan manifest). Kafka's own ``orders`` holds offsets 0..925 (values ``value_for``)."""
    broker = start_dev_broker(tmp_path / "logs")
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, METADATA_TOPIC, METADATA_PARTITIONS)
    topic_id = random_uuid()
    client = s3_server.client()
    values = []
    for name in SEGMENTS:
        objects = layout_rsm_segment(prefix=PREFIX, topic=TOPIC, topic_id=topic_id, partition=0, segment_log=log_path(name), chunk_size=CHUNK_SIZE, compression=True)
        upload_rsm_segment(client, s3_bucket, objects)
        start = objects.key.start_offset
        values += objects.metadata_values(finished=start != 644)
        if start == 0:
            values.append(encode_record(dataclasses.replace(objects.copy_finished, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED)))
    partition = metadata_partition(topic_id, 0, METADATA_PARTITIONS)
    produce(bootstrap, METADATA_TOPIC, [(partition, None, value) for value in values])  # type: ignore[misc]
    create_topic(bootstrap, TOPIC, 1)
    produce(bootstrap, TOPIC, [(0, f"k{i}".encode(), value_for(i)) for i in range(EXPECTED[-1].offset + 1)])
    return bootstrap, RsmBucket(s3_server, s3_bucket, {TOPIC: topic_id}, {}, b"", b"")


def test_only_finished_and_undeleted_segments_are_served(metadata_stack: tuple[str, RsmBucket]) -> None:
    bootstrap, bucket = metadata_stack
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        base = f"{url}/v1/clusters/rsm/topics/{TOPIC}/partitions/0"
        detail = httpx.get(base, timeout=60).json()
        assert detail["remote"]["earliest_offset"] == 362 and detail["remote"]["latest_offset"] == 643, detail
        assert detail["remote"]["segment_count"] == 1
        unfinished = httpx.get(f"{base}/plan", params={"offset": 700}, timeout=30)
        assert (unfinished.status_code, unfinished.json()["error"]["code"]) == (416, "offset_not_in_remote_storage")
        deleted = httpx.get(f"{base}/plan", params={"offset": 100}, timeout=30)
        assert (deleted.status_code, deleted.json()["error"]["code"]) == (416, "offset_out_of_range")
        records = httpx.get(f"{base}/records", params={"offset": 700, "mode": "REMOTE_ONLY"}, timeout=30)
        assert records.status_code == 416, records.text
    # the same bucket by listing (no Kafka): best effort serves every manifest, the orphan too
    with rsm_gateway(bucket, key_ring={}) as url:
        detail = httpx.get(f"{url}/v1/clusters/rsm/topics/{TOPIC}/partitions/0", timeout=60).json()
        assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"]) == (0, EXPECTED[-1].offset)


def test_remote_preferred_reads_the_rsm_segment_then_kafka(metadata_stack: tuple[str, RsmBucket]) -> None:
    bootstrap, bucket = metadata_stack
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        consumer = TieredConsumer({
            "bootstrap.servers": bootstrap, "group.id": "rsm-preferred", "auto.offset.reset": "earliest",
            "tiered.mode": "REMOTE_PREFERRED", "tiered.gateway.url": url, "tiered.cluster": "rsm",
        })
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 362)])
            got: list[tuple[int, bytes | None]] = []
            for _ in range(240):
                for message in consumer.consume(500, 0.5):
                    assert message.error() is None, message.error()
                    got.append((message.offset(), message.value()))
                if got and got[-1][0] >= EXPECTED[-1].offset:
                    break
        finally:
            consumer.close()
    remote = {e.offset: e.value for e in EXPECTED if 362 <= e.offset <= 643}
    assert [o for o, _ in got] == list(range(362, EXPECTED[-1].offset + 1))
    assert [v for o, v in got if o <= 643] == [remote[o] for o in range(362, 644)]  # the RSM segment's records
    assert [v for o, v in got if o > 643] == [value_for(o) for o in range(644, EXPECTED[-1].offset + 1)]  # then Kafka's


def _delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = next(iter(admin.delete_records([TopicPartition(topic, partition, before)]).values())).result(timeout=30)
    assert result.low_watermark == before


def test_a_metadata_partition_emptied_by_retention_is_read_at_once(metadata_stack: tuple[str, RsmBucket]) -> None:
    # another partition of __remote_log_metadata whose records were all deleted: low == high > 0, so no
    # message ever arrives there; reading stops at its low watermark instead of waiting for one (then 503)
    bootstrap, bucket = metadata_stack
    other = (metadata_partition(bucket.topic_ids[TOPIC], 0, METADATA_PARTITIONS) + 1) % METADATA_PARTITIONS
    produce(bootstrap, METADATA_TOPIC, [(other, None, b"deleted before any gateway read it")])  # type: ignore[list-item]
    _delete_records(bootstrap, METADATA_TOPIC, other, 1)
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap, gateway_settings={"kafka": {"timeout_s": 20}}) as url:
        started = time.monotonic()
        detail = httpx.get(f"{url}/v1/clusters/rsm/topics/{TOPIC}/partitions/0", timeout=60)
        assert detail.status_code == 200, detail.text
        assert detail.json()["remote"]["earliest_offset"] == 362 and time.monotonic() - started < 15


def test_remote_offsets_below_kafkas_log_start_are_not_served(metadata_stack: tuple[str, RsmBucket]) -> None:
    # DeleteRecords moved Kafka's log start to 500, inside the live RSM segment 362..643: Kafka's
    # RemoteLogManager serves nothing below it, nor does the gateway
    bootstrap, bucket = metadata_stack
    _delete_records(bootstrap, TOPIC, 0, 500)
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        base = f"{url}/v1/clusters/rsm/topics/{TOPIC}/partitions/0"
        detail = httpx.get(base, timeout=60).json()
        assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"]) == (500, 643), detail
        below = httpx.get(f"{base}/plan", params={"offset": 400}, timeout=30)
        assert (below.status_code, below.json()["error"]["code"]) == (416, "offset_out_of_range"), below.text
        records = httpx.get(f"{base}/records", params={"offset": 500, "max_records": 3, "mode": "REMOTE_ONLY"}, timeout=30)
        assert records.status_code == 200 and [r["offset"] for r in records.json()["records"]] == [500, 501, 502], records.text


def test_a_record_that_does_not_decode_fails_every_refresh(metadata_stack: tuple[str, RsmBucket]) -> None:
    # the consumer reads records in batches: a failed refresh must not leave the records after the bad
    # one consumed but unapplied (the next refresh would then answer without them, silently)
    bootstrap, bucket = metadata_stack
    partition = metadata_partition(bucket.topic_ids[TOPIC], 0, METADATA_PARTITIONS)
    produce(bootstrap, METADATA_TOPIC, [(partition, None, b"\x01\x00\x00 not a RemoteLogMetadata record")])  # type: ignore[list-item]
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        base = f"{url}/v1/clusters/rsm/topics/{TOPIC}/partitions/0"
        for _ in range(2):
            answer = httpx.get(base, timeout=60)
            assert answer.status_code == 502 and answer.json()["error"]["code"] == "corrupt_remote_data", answer.text
