"""Coverage (DESIGN.md, contract 5): a durable coverage start, gaps whatever crashes happen, and the audit.

Real components: Apache Kafka (DeleteRecords moves the log start; its retention task deletes the
segments below it), Redis, SeaweedFS, and the agent as a process that is SIGKILLed. The tests share
the session's KRaft broker, each with its own topic and an agent limited to it, except the one that
needs Kafka to write its log-start-offset-checkpoint soon (a broker of its own).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_env import AgentProcess, broker_agent_settings, delete_records, registry_for, rotated_bases, settings_properties, unique_topic, wait_for
from tests.support.kafka_clients import create_topic, produce, value_for
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.registry import CoverageStart
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.config import AgentSettings
from tiered_kafka_agent.rebuild import rebuild_registry

pytestmark = pytest.mark.integration

TOPIC_CONFIG = {"segment.bytes": "40000", "file.delete.delay.ms": "0"}


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    produce(bootstrap, topic, [(0, None, value_for(i)) for i in range(start, start + count)], **{"linger.ms": 1, "batch.num.messages": 5})


def _delete_records(bootstrap: str, topic: str, before: int, directory: Path) -> None:
    """DeleteRecords up to ``before``, then wait until the broker's retention removed the segments below it:
    renamed to ``.deleted`` and then deleted (file.delete.delay.ms 0 still deletes asynchronously, and an
    agent started while a ``.log.deleted`` is there may see that segment vanish: a gap in two pieces)."""
    delete_records(bootstrap, topic, before)

    def gone() -> bool:
        bases = [int(p.name[:20]) for p in directory.iterdir() if p.name.endswith((".log", ".log.deleted"))]
        return min(bases) == before

    wait_for(gone, what=f"segments below {before} deleted")


def _audit(settings: AgentSettings, bootstrap: str, tmp_path: Path, *topics: str) -> tuple[int, dict[str, Any], str]:
    """``tiered-kafka-agent audit --json`` as a process: (exit code, its JSON, its stderr)."""
    config = tmp_path / "audit.properties"
    config.write_text(settings_properties(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_AGENT_")}
    args = [sys.executable, "-m", "tiered_kafka_agent", "audit", "--config", str(config), "--bootstrap-servers", bootstrap, "--json"]
    for topic in topics:
        args += ["--topic", topic]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}, done.stderr


def _only(report: dict[str, Any]) -> dict[str, Any]:
    assert len(report["partitions"]) == 1, report
    return report["partitions"][0]


def test_a_crash_before_the_first_upload_then_retention_is_a_recorded_gap(
    kafka_server, redis_server, s3_server, s3_bucket, tmp_path, caplog
) -> None:
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("fresh")
    create_topic(bootstrap, topic, 1, **TOPIC_CONFIG)
    _produce(bootstrap, topic, 0, 600)
    directory = kafka_server.log_dir / f"{topic}-0"
    rotated = rotated_bases(directory)
    assert len(rotated) >= 5

    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    crashed = AgentProcess(settings, tmp_path / "agent.properties", crash_at="after_coverage_start")
    try:
        assert crashed.wait(120) == -signal.SIGKILL, crashed.output()[-3000:]
    finally:
        crashed.stop()
    start = registry.coverage_start(topic, 0)
    assert start is not None and start.offset == 0
    assert registry.segments(topic, 0) == []  # it died before its first upload

    # while the agent is down, retention deletes the first segments
    survivor = rotated[2]
    _delete_records(bootstrap, topic, survivor, directory)

    caplog.set_level(logging.ERROR, logger="tiered_kafka_agent")
    with Agent(settings) as agent:
        expected = [b for b in rotated if b >= survivor]
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == expected, what="the survivors registered")
        assert registry.gaps(topic, 0)[0].start_offset == 0
        gaps = registry.gaps(topic, 0)
        assert [(g.start_offset, g.end_offset) for g in gaps] == [(0, survivor - 1)]
        assert "deleted before upload" in gaps[0].reason
        assert agent.metrics.value("tiered_kafka_agent_gaps_total", topic=topic) == 1
        marker = agent.keyspace.gap_key(topic, 0, 0, survivor - 1)
        assert json.loads(s3_server.client().get_object(Bucket=s3_bucket, Key=marker)["Body"].read())["start_offset"] == 0
    assert any("GAP offsets 0.." in r.getMessage() for r in caplog.records)
    assert registry.coverage_start(topic, 0) == start  # the first observation stands

    # no offset lost silently, none twice: gap + contiguous segments + Kafka's active segment
    entries = registry.segments(topic, 0)
    assert all(a.last_offset + 1 == b.base_offset for a, b in zip(entries, entries[1:]))
    code, report, stderr = _audit(settings, bootstrap, tmp_path, topic)
    assert code == 0, (report, stderr)
    found = _only(report)
    assert found["coverage_start"]["offset"] == 0 and found["unaccounted"] == []
    assert found["kafka"] == {"log_start": survivor, "log_end": 600}
    assert found["remote"] == [[survivor, entries[-1].last_offset]]
    assert [(g["start_offset"], g["end_offset"]) for g in found["gaps"]] == [(0, survivor - 1)]


def test_the_audit_names_an_unaccounted_range(kafka_server, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("audited")
    create_topic(bootstrap, topic, 1, **TOPIC_CONFIG)
    _produce(bootstrap, topic, 0, 600)
    directory = kafka_server.log_dir / f"{topic}-0"
    rotated = rotated_bases(directory)
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings) as agent:
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated, what="all registered")
        store = agent.store
    assert _audit(settings, bootstrap, tmp_path)[0] == 0

    # by hand, without recording a gap: a middle segment leaves the registry and S3, and Kafka
    # deletes everything below the segment after it
    victim = registry.segments(topic, 0)[2]
    assert registry.delete_segment(topic, 0, victim.base_offset) == victim
    store.delete_segment_objects(topic, 0, victim.base_offset, [FileKind(k) for k in victim.files])
    _delete_records(bootstrap, topic, rotated[4], directory)

    code, report, _ = _audit(settings, bootstrap, tmp_path)
    assert code == 1
    assert _only(report)["unaccounted"] == [[victim.base_offset, victim.last_offset]]
    assert report["ok"] is False
    text = subprocess.run(
        [sys.executable, "-m", "tiered_kafka_agent", "audit", "--config", str(tmp_path / "audit.properties"), "--bootstrap-servers", bootstrap],
        capture_output=True, text=True, timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_AGENT_")},
    )  # fmt: skip
    assert text.returncode == 1
    assert f"UNACCOUNTED:    {victim.base_offset}..{victim.last_offset}" in text.stdout

    registry.record_gap(topic, 0, victim.base_offset, victim.last_offset, "deleted by hand")
    assert _audit(settings, bootstrap, tmp_path)[0] == 0

    # a topic nobody knows: not an empty success
    code, report, stderr = _audit(settings, bootstrap, tmp_path, "nobody-knows")
    assert code == 1 and report["partitions"] == [] and "nobody-knows" in stderr


def test_gaps_are_checked_after_remote_retention_emptied_the_partition(
    kafka_server, redis_server, s3_server, s3_bucket, tmp_path, caplog
) -> None:
    bootstrap, topic = kafka_server.bootstrap_servers, unique_topic("aged")
    create_topic(bootstrap, topic, 1, **TOPIC_CONFIG)
    _produce(bootstrap, topic, 0, 400)
    directory = kafka_server.log_dir / f"{topic}-0"
    settings = broker_agent_settings(kafka_server, [topic], redis_server, s3_server, s3_bucket, remote_retention={"interval_s": 3600})
    registry = registry_for(settings)
    with Agent(settings) as agent:
        first_round = rotated_bases(directory)
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == first_round, what="all registered")
        accounted = registry.segments(topic, 0)[-1].next_offset
        agent.retention.settings = agent.retention.settings.model_copy(update={"bytes": 0})
        assert len(agent.retention.run_once()) == len(first_round)
    assert registry.segments(topic, 0) == [] and registry.partition_info(topic, 0).is_empty
    coverage = registry.coverage(topic, 0)
    assert (coverage.next_offset, coverage.expired_until) == (accounted, accounted)  # still known

    # the agent is down; more data rolls, and Kafka deletes the first new segments
    _produce(bootstrap, topic, 400, 600)
    second_round = [b for b in rotated_bases(directory) if b >= accounted]
    survivor = second_round[2]
    _delete_records(bootstrap, topic, survivor, directory)
    caplog.set_level(logging.ERROR, logger="tiered_kafka_agent")
    with Agent(settings) as agent:
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == [b for b in second_round if b >= survivor], what="survivors")
        assert [(g.start_offset, g.end_offset) for g in registry.gaps(topic, 0)] == [(accounted, survivor - 1)]
        assert agent.metrics.value("tiered_kafka_agent_gaps_total", topic=topic) == 1
        marker = agent.keyspace.gap_key(topic, 0, accounted, survivor - 1)
        recorded = json.loads(s3_server.client().get_object(Bucket=s3_bucket, Key=marker)["Body"].read())
        assert (recorded["start_offset"], recorded["end_offset"]) == (accounted, survivor - 1)
        store = agent.store
    assert any(f"GAP offsets {accounted}..{survivor - 1}" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    code, report, stderr = _audit(settings, bootstrap, tmp_path, topic)
    assert code == 0, (report, stderr)
    assert _only(report)["expired_until"] == accounted

    # the coverage start and the retention mark survive a rebuild from S3 alone
    registered = registry.dump()
    registry.clear_partition(topic, 0)
    assert registry.coverage_start(topic, 0) is None
    report_ = rebuild_registry(store, registry)
    assert report_.coverage_starts == 1
    assert registry.dump() == registered
    assert registry.coverage_start(topic, 0) == CoverageStart(0, registered["partitions"][f"{topic}-0"]["coverage"]["start"]["observed_ms"])
    assert _audit(settings, bootstrap, tmp_path, topic)[0] == 0


def test_a_partition_first_followed_late_starts_its_coverage_at_the_observed_log_start(
    start_kafka, redis_server, s3_server, s3_bucket, tmp_path
) -> None:
    """Offsets deleted before any agent watched cannot be claimed: the start is the log start seen
    then, from Kafka's log-start-offset-checkpoint when it is inside the first segment.

    Kafka writes that checkpoint every ``log.flush.start.offset.checkpoint.interval.ms`` (60 s by
    default), and only for partitions whose log start is past their first segment's base: a
    broker of its own checks it every 500 ms."""
    broker = start_kafka(tmp_path / "logs", config={"log.flush.start.offset.checkpoint.interval.ms": 500})
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "late", 1, **TOPIC_CONFIG)
    _produce(bootstrap, "late", 0, 600)
    directory = tmp_path / "logs" / "late-0"
    rotated = rotated_bases(directory)
    inside = rotated[2] + 3  # DeleteRecords inside a segment: the log start is ahead of its base
    delete_records(bootstrap, "late", inside)
    wait_for(lambda: min(int(p.name[:20]) for p in directory.glob("*.log")) == rotated[2], what="earlier segments deleted")
    wait_for(lambda: f"late 0 {inside}" in (tmp_path / "logs" / "log-start-offset-checkpoint").read_text(), what="checkpoint")
    settings = broker_agent_settings(broker, ["late"], redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments("late", 0)] == rotated[2:], what="registered")
    assert registry.coverage_start("late", 0).offset == inside
    assert registry.gaps("late", 0) == []  # the segment holding the start is uploaded whole
    code, report, stderr = _audit(settings, bootstrap, tmp_path, "late")
    assert code == 0, (report, stderr)
