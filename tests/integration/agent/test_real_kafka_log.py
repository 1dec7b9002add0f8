"""The agent on what Apache Kafka really writes: rolls, retention, DeleteRecords and a crash (transactions,
the other names a log.dir holds and a compacted topic: ``test_real_kafka_txn_and_names``). Each test
asserts exact offsets in S3 and the registry against the broker's own files.

Tests that only need topics share the session's broker (``kafka_server``: each its own topic, the
agent limited to it by ``topics.include``; retention and deletion are topic configs); those that
kill, stop or restart a broker start their own (``start_kafka``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests.support.agent_env import agent_settings, only_topics, registry_for, unique_topic, wait_for
from tests.support.kafka_clients import create_topic, produce_numbered
from tiered_kafka.format.checkpoints import parse_offset_wm
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.registry import Registry, SegmentEntry
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.audit import KafkaOffsets, run_audit

pytestmark = pytest.mark.integration

SEGMENT_BYTES = 50_000  # about 45 one-KiB records a segment (batches of at most 7: kafka_clients)


# -- helpers ----------------------------------------------------------------------------------------


def segment_files(directory: Path) -> dict[int, Path]:
    """Base offset → the segment's ``.log``, under its live or ``.deleted`` name (Kafka's retention
    renames every file of a segment to ``{name}.deleted`` and deletes it ``file.delete.delay.ms`` later)."""
    found: dict[int, Path] = {}
    for path in directory.iterdir():
        if path.name.endswith(".log") or path.name.endswith(".log.deleted"):
            found[int(path.name[:20])] = path
    return dict(sorted(found.items()))


def live_bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


def local_bounds(directory: Path) -> list[tuple[int, int]]:
    """(base, last offset) of every rotated segment still on disk (live or ``.deleted``), from its batches."""
    files = segment_files(directory)
    active = max(live_bases(directory))
    return [(base, last_offset(path.read_bytes(), base)) for base, path in files.items() if base < active]


def last_offset(log: bytes, base: int) -> int:
    last = base - 1
    for batch in iter_batches(log):
        last = batch.last_offset
    return last


def bounds(entries: list[SegmentEntry]) -> list[tuple[int, int]]:
    return [(e.first, e.last_offset) for e in entries]


def s3_body(s3_server: Any, bucket: str, key: str) -> bytes:
    return s3_server.client().get_object(Bucket=bucket, Key=key)["Body"].read()


def partition_keys(s3_server: Any, bucket: str, agent: Agent, topic: str, partition: int) -> list[str]:
    prefix = agent.keyspace.partition_prefix(topic, partition)
    pages = s3_server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix):].lstrip("/") for page in pages for o in page.get("Contents", []))


def assert_uploaded_as_written(s3_server: Any, bucket: str, agent: Agent, entries: list[SegmentEntry], directory: Path) -> None:
    """Every registered segment's ``.log`` in S3 is the broker's file byte for byte (live or ``.deleted``)."""
    files = segment_files(directory)
    for entry in entries:
        remote = s3_body(s3_server, bucket, entry.object_key)
        assert remote == files[entry.base_offset].read_bytes(), f"segment {entry.base_offset}"
        assert (entry.size, entry.last_offset) == (len(remote), last_offset(remote, entry.base_offset))


def set_topic_configs(bootstrap: str, topic: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET on topic configs under Kafka's names (applied to the live log)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()]
    try:
        for future in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)]).values():
            future.result(timeout=30)
    finally:
        del admin


def kafka_log_range(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    kafka = KafkaOffsets(bootstrap)
    try:
        found, error = kafka.log_range(topic, partition)
    finally:
        kafka.close()
    assert found is not None, error
    return found


def audit(bootstrap: str, registry: Registry, topic: str) -> list[Any]:
    kafka = KafkaOffsets(bootstrap)
    try:
        return run_audit(registry, kafka, [topic])
    finally:
        kafka.close()


# -- rolls --------------------------------------------------------------------------------------


def first_segments_uploaded(kafka_server: Any, redis_server: Any, s3_server: Any, bucket: str, stem: str, records: int, *, file_delete_delay_ms: int) -> tuple[str, Path, Any, Registry, list[tuple[int, int]]]:
    """A topic of its own on the shared broker, ``records`` records produced while an agent ran, and
    that agent stopped once every rotated segment was registered: (topic, its partition 0's directory,
    the agent's settings, the registry, the registered (base, last) bounds)."""
    bootstrap = kafka_server.bootstrap_servers
    topic = unique_topic(stem)
    create_topic(bootstrap, topic, 1, **{"segment.bytes": str(SEGMENT_BYTES), "file.delete.delay.ms": str(file_delete_delay_ms)})
    directory = kafka_server.log_dir / f"{topic}-0"
    settings = agent_settings(kafka_server.log_dir, redis_server, s3_server, bucket, topics=only_topics(topic))
    registry = registry_for(settings)
    with Agent(settings):
        produce_numbered(bootstrap, topic, 0, records)
        first = local_bounds(directory)
        wait_for(lambda: bounds(registry.segments(topic, 0)) == first, what="the first segments registered")
    return topic, directory, settings, registry, first


def test_rolls_by_segment_bytes_and_segment_ms_upload_exactly_the_rolled_offsets(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """segment.bytes (internal.segment.bytes on 4.x): Kafka rolls before an append that would take the
    segment past it. segment.ms: Kafka rolls at the first append once the segment's first batch is
    older than segment.ms (never on an idle partition). Both roll points are uploaded exactly."""
    bootstrap = kafka_server.bootstrap_servers
    by_bytes, by_time = unique_topic("roll-bytes"), unique_topic("roll-ms")
    create_topic(bootstrap, by_bytes, 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    create_topic(bootstrap, by_time, 1, **{"segment.ms": "2000"})
    settings = agent_settings(kafka_server.log_dir, redis_server, s3_server, s3_bucket, topics=only_topics(by_bytes, by_time))
    registry = registry_for(settings)
    with Agent(settings) as agent:
        produce_numbered(bootstrap, by_bytes, 0, 400)
        for start in (0, 20, 40, 60):  # each round's first append rolls the previous round's segment
            if start:
                time.sleep(2.5)  # segment.ms is wall time: nothing but waiting makes a segment old
            produce_numbered(bootstrap, by_time, start, 20)

        directory = kafka_server.log_dir / f"{by_bytes}-0"
        rotated = local_bounds(directory)
        assert len(rotated) >= 7 and rotated[0][0] == 0
        wait_for(lambda: bounds(registry.segments(by_bytes, 0)) == rotated, what=f"{by_bytes} registered")
        files = segment_files(directory)
        for (base, _last), (next_base, _) in zip(rotated, [*rotated[1:], (max(live_bases(directory)), 0)]):
            size = files[base].stat().st_size
            first_batch_of_next = next(iter_batches(files[next_base].read_bytes()))
            assert size <= SEGMENT_BYTES < size + first_batch_of_next.size  # Kafka's roll rule, as the agent found it
        entries = registry.segments(by_bytes, 0)
        assert_uploaded_as_written(s3_server, s3_bucket, agent, entries, directory)
        assert sum(e.record_count for e in entries) == rotated[-1][1] + 1
        assert parse_offset_wm(s3_body(s3_server, s3_bucket, agent.keyspace.offset_wm_key(by_bytes, 0))) == rotated[-1][0]

        time_dir = kafka_server.log_dir / f"{by_time}-0"
        wait_for(lambda: bounds(registry.segments(by_time, 0)) == [(0, 19), (20, 39), (40, 59)], what=f"{by_time} registered")
        assert live_bases(time_dir) == [0, 20, 40, 60]
        assert_uploaded_as_written(s3_server, s3_bucket, agent, registry.segments(by_time, 0), time_dir)
        for topic in (by_bytes, by_time):
            assert registry.gaps(topic, 0) == []
            assert registry.coverage_start(topic, 0).offset == 0
        assert agent.metrics.value("tiered_kafka_agent_upload_failures_total", topic=by_bytes) == 0


# -- retention ----------------------------------------------------------------------------------


def test_time_retention_renames_to_deleted_and_the_agent_uploads_the_deleted_files(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """retention.ms: Kafka renames every segment whose largest timestamp is older than retention.ms to
    ``.deleted`` (rolling the active segment first when it is breached too) and deletes the files
    file.delete.delay.ms later. An agent started in between uploads them from the ``.deleted``
    names, continuing exactly where the registry stopped: no gap, no offset twice."""
    bootstrap = kafka_server.bootstrap_servers
    topic, directory, settings, registry, first = first_segments_uploaded(kafka_server, redis_server, s3_server, s3_bucket, "retention-ms", 150, file_delete_delay_ms=120000)
    produce_numbered(bootstrap, topic, 150, 250)  # the agent is down: rolled, not uploaded
    end = 400
    set_topic_configs(bootstrap, topic, **{"retention.ms": "1000"})
    wait_for(lambda: live_bases(directory) == [end], timeout_s=90, what="time retention renaming every segment .deleted")
    deleted = local_bounds(directory)  # every segment, the rolled active one included, now .log.deleted
    assert all(p.name.endswith(".deleted") for b, p in segment_files(directory).items() if b < end)
    assert deleted[0] == first[0] and deleted[-1][1] == end - 1
    set_topic_configs(bootstrap, topic, **{"retention.ms": "-1"})
    assert kafka_log_range(bootstrap, topic) == (end, end)

    with Agent(settings) as agent:
        wait_for(lambda: registry.coverage(topic, 0).next_offset == end, what="the .deleted segments registered")
        entries = registry.segments(topic, 0)
        assert bounds(entries) == deleted
        assert_uploaded_as_written(s3_server, s3_bucket, agent, entries, directory)
        assert registry.gaps(topic, 0) == []
        assert parse_offset_wm(s3_body(s3_server, s3_bucket, agent.keyspace.offset_wm_key(topic, 0))) == deleted[-1][0]
    assert [r.ok for r in audit(bootstrap, registry, topic)] == [True]


def test_size_retention_deletes_segments_the_agent_never_saw_and_it_records_the_gap(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """retention.bytes: Kafka deletes the oldest segments while the log minus the segment stays at or
    above retention.bytes; after file.delete.delay.ms the ``.deleted`` files are gone. Offsets deleted
    while the agent was down are a recorded gap, exactly from the registry's next offset to the
    first segment Kafka kept; the audit accounts for every offset."""
    bootstrap = kafka_server.bootstrap_servers
    topic, directory, settings, registry, first = first_segments_uploaded(kafka_server, redis_server, s3_server, s3_bucket, "retention-bytes", 150, file_delete_delay_ms=300)
    uploaded_until = first[-1][1] + 1
    produce_numbered(bootstrap, topic, 150, 350)
    before = local_bounds(directory)
    set_topic_configs(bootstrap, topic, **{"retention.bytes": str(3 * SEGMENT_BYTES)})

    def settled() -> bool:
        names = [p.name for p in directory.iterdir()]
        return len(live_bases(directory)) < len(before) + 1 and not any(n.endswith(".deleted") for n in names)

    wait_for(settled, timeout_s=90, what="size retention deleting the oldest segments")
    kept = live_bases(directory)
    log_start, log_end = kafka_log_range(bootstrap, topic)
    assert (log_start, log_end) == (kept[0], 500)
    sizes = {base: path.stat().st_size for base, path in segment_files(directory).items()}
    assert sum(sizes.values()) <= 3 * SEGMENT_BYTES + sizes[kept[-1]]  # Kafka's rule, as the agent will find it
    assert kept[0] > uploaded_until  # some offsets were never seen by the agent

    with Agent(settings) as agent:
        wait_for(lambda: registry.coverage(topic, 0).next_offset == kept[-1], what="the kept segments registered")
        gaps = registry.gaps(topic, 0)
        assert [(g.start_offset, g.end_offset) for g in gaps] == [(uploaded_until, kept[0] - 1)]
        assert gaps[0].reason.startswith("deleted before upload")
        entries = registry.segments(topic, 0)
        assert bounds(entries) == first + [b for b in local_bounds(directory)]
        assert_uploaded_as_written(s3_server, s3_bucket, agent, [e for e in entries if e.base_offset >= kept[0]], directory)
        assert f"gaps/{uploaded_until:020d}-{kept[0] - 1:020d}" in partition_keys(s3_server, s3_bucket, agent, topic, 0)
        assert agent.metrics.value("tiered_kafka_agent_gaps_total", topic=topic) == 1
    result = audit(bootstrap, registry, topic)
    assert [(r.ok, r.kafka) for r in result] == [(True, (kept[0], 500))]


def test_delete_records_moves_the_log_start_and_the_segment_holding_it_is_uploaded_whole(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """DeleteRecords (Admin API) moves the log start offset at once, inside a segment; Kafka deletes
    the segments wholly below it (``.deleted``, then gone after file.delete.delay.ms) and keeps the one
    holding it. The agent, down meanwhile, records the deleted segments' offsets as a gap and uploads
    the kept segment whole, from its base offset (its offsets below the log start included)."""
    bootstrap = kafka_server.bootstrap_servers
    topic, directory, settings, registry, first = first_segments_uploaded(kafka_server, redis_server, s3_server, s3_bucket, "delete-records", 100, file_delete_delay_ms=300)
    uploaded_until = first[-1][1] + 1
    produce_numbered(bootstrap, topic, 100, 300)
    rotated = local_bounds(directory)
    holding = next(b for b in rotated if b[0] > uploaded_until + 50)  # a rotated segment past a whole unseen one
    target = holding[0] + 10
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        (future,) = admin.delete_records([KafkaTopicPartition(topic, 0, target)]).values()
        assert future.result(timeout=30).low_watermark == target  # the new log start offset
    finally:
        del admin
    assert kafka_log_range(bootstrap, topic)[0] == target
    wait_for(lambda: min(segment_files(directory)) == holding[0] and not list(directory.glob("*.deleted")), timeout_s=90, what="segments below the log start deleted")

    with Agent(settings) as agent:
        active = max(live_bases(directory))
        wait_for(lambda: registry.coverage(topic, 0).next_offset == active, what="the kept segments registered")
        gaps = registry.gaps(topic, 0)
        assert [(g.start_offset, g.end_offset) for g in gaps] == [(uploaded_until, holding[0] - 1)]
        entries = registry.segments(topic, 0)
        assert bounds(entries) == first + local_bounds(directory)
        assert entries[len(first)].first == holding[0] < target  # whole: Kafka keeps serving nothing below target, S3 holds it
        assert_uploaded_as_written(s3_server, s3_bucket, agent, entries[len(first):], directory)
    assert [(r.ok, r.kafka) for r in audit(bootstrap, registry, topic)] == [(True, (target, 400))]


# -- a crash ------------------------------------------------------------------------------------


def test_broker_sigkilled_and_restarted_recovers_its_log_and_the_agent_stays_exact(start_kafka, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    """SIGKILL leaves the active segment with preallocated indexes and, here, a torn write at its end
    (bytes appended while the broker is dead). Kafka's log recovery on restart truncates the torn
    bytes and goes on appending to the same segment; the agent, running throughout, uploads that
    segment once it rolls, exactly as recovered, and nothing before it again."""
    logs = tmp_path / "logs"
    broker = start_kafka(logs)
    bootstrap = broker.bootstrap_servers
    topic = unique_topic("crash")
    create_topic(bootstrap, topic, 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    directory = logs / f"{topic}-0"
    settings = agent_settings(logs, redis_server, s3_server, s3_bucket, topics=only_topics(topic))
    registry = registry_for(settings)
    with Agent(settings) as agent:
        produce_numbered(bootstrap, topic, 0, 300)
        before = local_bounds(directory)
        wait_for(lambda: bounds(registry.segments(topic, 0)) == before, what="registered before the crash")
        registered_before = registry.segments(topic, 0)
        broker.kill()
        active = max(live_bases(directory))
        active_log = directory / f"{active:020d}.log"
        recovered_size = active_log.stat().st_size
        with active_log.open("ab") as torn:
            torn.write(b"\x00\x00\x00\x00\x00\x00\x01\x2c\x00\x00\x03\xe8" + b"\xa5" * 500)  # a batch header cut short
        broker.restart()
        assert active_log.stat().st_size == recovered_size  # recovery truncated the torn write
        assert max(live_bases(directory)) == active  # and appends go on into the same segment
        produce_numbered(bootstrap, topic, 300, 200)
        after = local_bounds(directory)
        assert after[: len(before)] == before and after[len(before)][0] == active
        wait_for(lambda: bounds(registry.segments(topic, 0)) == after, what="registered after the restart")
        entries = registry.segments(topic, 0)
        assert entries[: len(before)] == registered_before  # nothing uploaded again
        assert_uploaded_as_written(s3_server, s3_bucket, agent, entries, directory)
        assert registry.gaps(topic, 0) == []
    assert [r.ok for r in audit(bootstrap, registry, topic)] == [True]
