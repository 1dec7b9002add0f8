"""Issue 18: with Kafka configured, ``__remote_log_metadata`` decides which segments are live (records
produced by the test, as Kafka's TopicBasedRemoteLogMetadataManager writes them, into a topic of that
name on the session's shared broker); REMOTE_PREFERRED hands off from an RSM segment to Kafka exactly.

Kafka fixes the metadata topic's name, so each test creates ``__remote_log_metadata`` afresh and deletes
it after itself (some tests write records the gateway must refuse into it); the data topic is the
test's own (``orders-…``)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

import httpx
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.rsm.conftest import CHUNK_SIZE, PREFIX, SEGMENTS, RsmBucket, expected_records, log_path, rsm_gateway
from tests.support.agent_env import wait_for
from tests.support.gateway_env import unique_topic
from tests.support.kafka_clients import create_topic, produce, produce_numbered, value_for
from tests.support.rsm_writer import layout_rsm_segment, random_uuid, upload_rsm_segment
from tiered_kafka.consumer import TieredConsumer
from tiered_kafka.rsm.remote_log_metadata import RemoteLogSegmentState, encode_record, metadata_partition

pytestmark = pytest.mark.integration

METADATA_TOPIC = "__remote_log_metadata"
METADATA_PARTITIONS = 3
EXPECTED = expected_records()


def _delete_topic(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` if the broker has it, and wait until its metadata no longer lists it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        if topic in admin.list_topics(timeout=30).topics:
            for future in admin.delete_topics([topic]).values():
                future.result(30)
        wait_for(lambda: topic not in admin.list_topics(timeout=30).topics, what=f"{topic} deleted")
    finally:
        del admin


@pytest.fixture
def metadata_topic(kafka_server: Any) -> Iterator[str]:
    """``__remote_log_metadata`` with 3 partitions, new on the shared broker for this test, deleted
    after it; yields the broker's bootstrap servers."""
    bootstrap = kafka_server.bootstrap_servers
    _delete_topic(bootstrap, METADATA_TOPIC)
    create_topic(bootstrap, METADATA_TOPIC, METADATA_PARTITIONS)
    try:
        yield bootstrap
    finally:
        _delete_topic(bootstrap, METADATA_TOPIC)


class MetadataStack(NamedTuple):
    bootstrap: str
    bucket: RsmBucket
    late_copy_finished: bytes  # the COPY_SEGMENT_FINISHED record of segment 644, not produced


@pytest.fixture
def metadata_stack(metadata_topic: str, s3_server: Any, s3_bucket: str) -> MetadataStack:
    """Three compressed segments of a topic of the test's own (``orders-…``) uploaded the RSM's way;
    the metadata says: segment 0 finished then deletion started (not live), segment 362 finished
    (live), segment 644 started only (its copy never finished: an orphan manifest). Kafka's own topic
    holds offsets 0..925 (values ``value_for``)."""
    bootstrap = metadata_topic
    topic = unique_topic("orders")
    topic_id = random_uuid()
    client = s3_server.client()
    values = []
    for name in SEGMENTS:
        objects = layout_rsm_segment(prefix=PREFIX, topic=topic, topic_id=topic_id, partition=0, segment_log=log_path(name), chunk_size=CHUNK_SIZE, compression=True)
        upload_rsm_segment(client, s3_bucket, objects)
        start = objects.key.start_offset
        values += objects.metadata_values(finished=start != 644)
        if start == 644:
            late = encode_record(objects.copy_finished)
        if start == 0:
            values.append(encode_record(dataclasses.replace(objects.copy_finished, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED)))
    partition = metadata_partition(topic_id, 0, METADATA_PARTITIONS)
    produce(bootstrap, METADATA_TOPIC, [(partition, None, value) for value in values])  # type: ignore[misc]
    create_topic(bootstrap, topic, 1)
    produce_numbered(bootstrap, topic, 0, EXPECTED[-1].offset + 1)
    return MetadataStack(bootstrap, RsmBucket(s3_server, s3_bucket, {topic: topic_id}, {}, b"", b""), late)


def _topic(bucket: RsmBucket) -> str:
    """The test's own topic (the bucket's one)."""
    (topic,) = bucket.topic_ids
    return topic


def test_only_finished_and_undeleted_segments_are_served(metadata_stack: MetadataStack) -> None:
    bootstrap, bucket, _ = metadata_stack
    topic = _topic(bucket)
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        base = f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0"
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
        detail = httpx.get(f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0", timeout=60).json()
        assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"]) == (0, EXPECTED[-1].offset)


def test_remote_preferred_reads_the_rsm_segment_then_kafka(metadata_stack: MetadataStack) -> None:
    bootstrap, bucket, _ = metadata_stack
    topic = _topic(bucket)
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        consumer = TieredConsumer({
            "bootstrap.servers": bootstrap, "group.id": f"rsm-preferred-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
            "tiered.mode": "REMOTE_PREFERRED", "tiered.gateway.url": url, "tiered.cluster": "rsm",
        })
        try:
            consumer.assign([TopicPartition(topic, 0, 362)])
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


def test_a_refresh_reads_what_was_appended_since(metadata_stack: MetadataStack) -> None:
    # the catalog's consumer stays assigned (paused between refreshes): the copy of segment 644
    # finishing later is applied by the next refresh, and it is served from then on
    bootstrap, bucket, late_copy_finished = metadata_stack
    topic = _topic(bucket)
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        base = f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0"
        before = httpx.get(base, timeout=60).json()
        assert (before["remote"]["earliest_offset"], before["remote"]["latest_offset"]) == (362, 643), before
        produce(bootstrap, METADATA_TOPIC, [(metadata_partition(bucket.topic_ids[topic], 0, METADATA_PARTITIONS), None, late_copy_finished)])  # type: ignore[list-item]
        after = httpx.get(base, timeout=60).json()
        assert (after["remote"]["earliest_offset"], after["remote"]["latest_offset"], after["remote"]["segment_count"]) == (362, EXPECTED[-1].offset, 2), after
        records = httpx.get(f"{base}/records", params={"offset": 700, "max_records": 3, "mode": "REMOTE_ONLY"}, timeout=30)
        assert records.status_code == 200 and [r["offset"] for r in records.json()["records"]] == [700, 701, 702], records.text
        # every request refreshes (listing_ttl_s 0): the watermarks are asked while no Fetch is in flight, which
        # Kafka would hold up to fetch.max.wait.ms, 500 ms, ahead of them (rsm_catalog's module docstring)
        durations = []
        for _ in range(3):
            started = time.monotonic()
            assert httpx.get(base, timeout=60).status_code == 200
            durations.append(time.monotonic() - started)
        assert min(durations) < 0.45, durations


def _delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = next(iter(admin.delete_records([TopicPartition(topic, partition, before)]).values())).result(timeout=30)
    assert result.low_watermark == before


def test_a_metadata_partition_emptied_by_retention_is_read_at_once(metadata_stack: MetadataStack) -> None:
    # another partition of __remote_log_metadata whose records were all deleted: low == high > 0, so no
    # message ever arrives there; reading stops at its low watermark instead of waiting for one (then 503)
    bootstrap, bucket, _ = metadata_stack
    topic = _topic(bucket)
    other = (metadata_partition(bucket.topic_ids[topic], 0, METADATA_PARTITIONS) + 1) % METADATA_PARTITIONS
    produce(bootstrap, METADATA_TOPIC, [(other, None, b"deleted before any gateway read it")])  # type: ignore[list-item]
    _delete_records(bootstrap, METADATA_TOPIC, other, 1)
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap, gateway_settings={"kafka": {"timeout_s": 20}}) as url:
        started = time.monotonic()
        detail = httpx.get(f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0", timeout=60)
        assert detail.status_code == 200, detail.text
        assert detail.json()["remote"]["earliest_offset"] == 362 and time.monotonic() - started < 15


def test_remote_offsets_below_kafkas_log_start_are_not_served(metadata_stack: MetadataStack) -> None:
    # DeleteRecords moved Kafka's log start to 500, inside the live RSM segment 362..643: Kafka's
    # RemoteLogManager serves nothing below it, nor does the gateway
    bootstrap, bucket, _ = metadata_stack
    topic = _topic(bucket)
    _delete_records(bootstrap, topic, 0, 500)
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        base = f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0"
        detail = httpx.get(base, timeout=60).json()
        assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"]) == (500, 643), detail
        below = httpx.get(f"{base}/plan", params={"offset": 400}, timeout=30)
        assert (below.status_code, below.json()["error"]["code"]) == (416, "offset_out_of_range"), below.text
        records = httpx.get(f"{base}/records", params={"offset": 500, "max_records": 3, "mode": "REMOTE_ONLY"}, timeout=30)
        assert records.status_code == 200 and [r["offset"] for r in records.json()["records"]] == [500, 501, 502], records.text


def test_a_record_that_does_not_decode_fails_every_refresh(metadata_stack: MetadataStack) -> None:
    # the consumer reads records in batches: a failed refresh must not leave the records after the bad
    # one consumed but unapplied (the next refresh would then answer without them, silently)
    bootstrap, bucket, _ = metadata_stack
    topic = _topic(bucket)
    partition = metadata_partition(bucket.topic_ids[topic], 0, METADATA_PARTITIONS)
    produce(bootstrap, METADATA_TOPIC, [(partition, None, b"\x01\x00\x00 not a RemoteLogMetadata record")])  # type: ignore[list-item]
    with rsm_gateway(bucket, key_ring={}, bootstrap=bootstrap) as url:
        base = f"{url}/v1/clusters/rsm/topics/{topic}/partitions/0"
        for _ in range(2):
            answer = httpx.get(base, timeout=60)
            assert answer.status_code == 502 and answer.json()["error"]["code"] == "corrupt_remote_data", answer.text
