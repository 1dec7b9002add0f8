"""Remote data is served whether or not Kafka knows the topic (issue 13, "never silently empty").

Two remote-only topics over the real stack (development broker, Redis, SeaweedFS):
- a bucket in Pinterest's layout (no registry) for a topic the broker never had;
- a topic the agent uploaded and registered, then deleted from the broker.
For each: the topic list includes it, the partition endpoint answers with the remote offsets (and
says Kafka does not know the partition), plans and records serve it, and ``tiered-kafka cat``
prints every record and exits 0. And offsets before the coverage start are reported as such.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.agent_env import agent_settings, registry_for, rotated_bases, wait_for
from tests.support.fixtures import FIXTURES, MANIFEST
from tests.support.gateway_env import gateway_client, pinterest_bucket, uploaded_partition
from tests.support.kafka_clients import create_topic, produce, value_for
from tests.support.stack_env import gateway_server
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.agent import Agent
from tiered_kafka_gateway import s3_listing

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).parent / "tiered-kafka"


def cat(gateway_url: str, cluster: str, topic: str) -> tuple[int, list[dict], str]:
    """``tiered-kafka cat`` (REMOTE_ONLY through the gateway) as a subprocess: exit code, records, stderr."""
    done = subprocess.run(
        [str(CLI), "cat", "--gateway", gateway_url, "--cluster", cluster, "--format", "json", topic, "0"],
        capture_output=True, text=True, timeout=120,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def printed_bytes(record: dict, name: str) -> bytes:
    """A key or value as cat prints it in JSON: UTF-8 text, or base64 with ``{name}_encoding``."""
    return base64.b64decode(record[name]) if record.get(f"{name}_encoding") == "base64" else record[name].encode()


def fixture_records(last_offset: int) -> list[tuple[int, str | None]]:
    """(offset, value as cat prints it) of the fixture partition test_topic_a-0 up to ``last_offset``."""
    out = []
    for name in sorted(MANIFEST["test_topic_a-0"]):
        for batch in iter_batches((FIXTURES / "test_topic_a-0" / name).read_bytes()):
            if batch.is_control:
                continue
            out += [(r.offset, None if r.value is None else r.value.decode()) for r in batch if r.offset <= last_offset]
    return out


def test_a_pinterest_layout_bucket_for_a_topic_kafka_never_had_is_listed_and_served(start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    broker = start_dev_broker(tmp_path / "logs")
    cluster = "pinterestCluster"
    last = pinterest_bucket(s3_server, s3_bucket, Keyspace("custom-prefix", cluster, 5), "history_only")
    settings = agent_settings(FIXTURES, redis_server, s3_server, s3_bucket, cluster=cluster, s3={"prefix": "custom-prefix", "entropy_bits": 5})
    client = gateway_client(settings, s3_server, broker.broker.bootstrap_servers)
    base = f"/v1/clusters/{cluster}/topics/history_only/partitions/0"

    topics = client.get(f"/v1/clusters/{cluster}/topics").json()
    assert topics["topics"] == [{"name": "history_only", "partitions": [0]}] and topics["complete"] is True

    response = client.get(base)
    assert response.status_code == 200, response.text
    detail = response.json()
    assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"], detail["remote"]["segment_count"]) == (0, last, 4)
    assert detail["kafka"] is None and detail["kafka_error"]["code"] == "unknown_topic_or_partition"
    assert detail["coverage_start_offset"] is None and detail["gaps"] == []

    plan = client.get(f"{base}/plan", params={"offset": 700})
    assert plan.status_code == 200 and plan.json()["ranges"][0]["first_offset"] <= 700 <= plan.json()["ranges"][0]["last_offset"]
    records = client.get(f"{base}/records", params={"offset": 0, "max_records": 10_000, "encoding": "utf8"})
    assert records.status_code == 200, records.text
    assert records.json()["source"] == "remote"
    expected = fixture_records(last)
    got = [(r["offset"], r["value"]) for r in records.json()["records"]]
    assert got and got == expected[: len(got)]

    with gateway_server(settings, s3_server, broker.broker.bootstrap_servers) as url:
        code, printed, stderr = cat(url, cluster, "history_only")
    assert code == 0, stderr
    assert [(r["offset"], r["value"]) for r in printed] == expected  # every record, once, in order


def test_a_listed_segment_above_offset_wm_is_an_upload_in_flight_and_not_served(redis_server, s3_server, s3_bucket) -> None:
    """A ``.log`` whose ``offset.wm`` has not moved past it may still lack its indexes: listing
    serves only committed segments, never a 502 for the missing ``.index`` of an upload in flight."""
    cluster = "inFlight"
    keyspace = Keyspace("p", cluster, 0)
    last = pinterest_bucket(s3_server, s3_bucket, keyspace, "growing", segments=2)
    names = sorted(MANIFEST["test_topic_a-0"])
    third = int(names[2][:20])
    s3_server.client().put_object(  # the next segment's .log, its indexes and offset.wm not yet written
        Bucket=s3_bucket, Key=keyspace.segment_key("growing", 0, third, FileKind.LOG), Body=(FIXTURES / "test_topic_a-0" / names[2]).read_bytes()
    )
    settings = agent_settings(FIXTURES, redis_server, s3_server, s3_bucket, cluster=cluster, s3={"prefix": "p", "entropy_bits": 0})
    client = gateway_client(settings, s3_server, None)
    base = f"/v1/clusters/{cluster}/topics/growing/partitions/0"

    detail = client.get(base).json()
    assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"], detail["remote"]["segment_count"]) == (0, last, 2)
    beyond = client.get(f"{base}/plan", params={"offset": last + 1})
    assert beyond.status_code == 416 and beyond.json()["error"]["code"] == "offset_not_in_remote_storage", beyond.text

    s3_server.client().delete_object(Bucket=s3_bucket, Key=keyspace.offset_wm_key("growing", 0))
    cleared = gateway_client(settings, s3_server)  # a new app: a fresh listing cache
    assert cleared.get(base).status_code == 404  # nothing committed: no segment is served, none is lost


def test_a_registered_topic_deleted_from_kafka_is_listed_and_served(start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    broker, settings = uploaded_partition(start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket, "erased", count=1500)
    bootstrap = broker.broker.bootstrap_servers
    latest = registry_for(settings).partition_info("erased", 0).latest_offset
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(["erased"]).values():
        future.result(30)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        with pytest.raises(KafkaException, match="Unknown (topic or )?partition"):  # Kafka no longer knows it
            probe.get_watermark_offsets(TopicPartition("erased", 0), timeout=5, cached=False)
    finally:
        probe.close()
    client = gateway_client(settings, s3_server, bootstrap)
    base = f"/v1/clusters/{settings.cluster}/topics/erased/partitions/0"

    assert client.get(f"/v1/clusters/{settings.cluster}/topics").json()["topics"] == [{"name": "erased", "partitions": [0]}]
    response = client.get(base)
    assert response.status_code == 200, response.text
    detail = response.json()
    assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"]) == (0, latest)
    assert detail["kafka"] is None and detail["kafka_error"]["code"] == "unknown_topic_or_partition"
    assert client.get(f"{base}/plan", params={"offset": latest}).status_code == 200
    records = client.get(f"{base}/records", params={"offset": 0, "max_records": 50})
    assert records.status_code == 200 and [r["offset"] for r in records.json()["records"]] == list(range(50))

    with gateway_server(settings, s3_server, bootstrap) as url:
        code, printed, stderr = cat(url, settings.cluster, "erased")
    assert code == 0, stderr
    assert [(r["offset"], r["key"], printed_bytes(r, "value")) for r in printed] == [(i, f"k{i}", value_for(i)) for i in range(latest + 1)]


def test_offsets_before_the_coverage_start_are_reported_as_such(start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    """The broker's retention deleted the first segments before the agent began following the
    partition: the agent's coverage starts at the log start it observed, and the gateway names it."""
    log_dir = tmp_path / "logs"
    broker = start_dev_broker(log_dir)
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, "late", 1, **{"segment.bytes": "100000", "index.interval.bytes": "4096", "retention.bytes": "250000", "file.delete.delay.ms": "0"})
    produce(bootstrap, "late", [(0, f"k{i}".encode(), value_for(i)) for i in range(3000)], **{"linger.ms": 2, "batch.num.messages": 7})
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        wait_for(lambda: probe.get_watermark_offsets(TopicPartition("late", 0), timeout=5, cached=False)[0] > 0, timeout_s=60, what="retention")
        log_start, high = probe.get_watermark_offsets(TopicPartition("late", 0), timeout=5, cached=False)
    finally:
        probe.close()
    wait_for(lambda: not list((log_dir / "late-0").glob("*.deleted")), what="the deleted segments' files removed")
    settings = agent_settings(log_dir, redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments("late", 0)] == rotated_bases(log_dir / "late-0"), what="uploaded")
    coverage = registry.coverage_start("late", 0)  # the log start the agent observed when it began following
    assert coverage is not None and coverage.offset == log_start == registry.partition_info("late", 0).earliest_offset
    client = gateway_client(settings, s3_server, bootstrap)
    base = f"/v1/clusters/{settings.cluster}/topics/late/partitions/0"

    detail = client.get(base).json()
    assert (detail["coverage_start_offset"], detail["coverage_observed_ms"]) == (coverage.offset, coverage.observed_ms)
    assert detail["kafka"] == {"log_start_offset": log_start, "high_watermark": high} and detail["gaps"] == []
    earliest = detail["remote"]["earliest_offset"]

    for offset in (0, coverage.offset - 1):
        below = client.get(f"{base}/plan", params={"offset": offset})
        assert below.status_code == 416, below.text
        error = below.json()["error"]
        assert (error["code"], error["coverage_start_offset"], error["earliest_offset"]) == ("offset_out_of_range", coverage.offset, earliest)
        assert f"before the coverage start {coverage.offset}" in error["message"]
    assert client.get(f"{base}/plan", params={"offset": earliest}).status_code == 200


def test_the_topic_listing_unites_registry_and_s3_and_says_when_a_bound_cut_it_short(monkeypatch, start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    broker, settings = uploaded_partition(start_dev_broker, tmp_path, redis_server, s3_server, s3_bucket, "registered", count=300)
    keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
    for topic in ("listed-a", "listed-b"):  # beside the agent's, objects no registry knows of
        pinterest_bucket(s3_server, s3_bucket, keyspace, topic, segments=1)
    s3_server.client().put_object(Bucket=s3_bucket, Key=f"{settings.s3.prefix}/{settings.cluster}/not-a-partition/x", Body=b"")  # no entropy directory: skipped
    client = gateway_client(settings, s3_server, cache={"listing_ttl_s": 0})
    listing = client.get(f"/v1/clusters/{settings.cluster}/topics").json()
    assert listing == {"cluster": settings.cluster, "topics": [{"name": n, "partitions": [0]} for n in ("listed-a", "listed-b", "registered")], "complete": True}
    monkeypatch.setattr(s3_listing, "MAX_LISTED_PARTITIONS", 2)
    cut = client.get(f"/v1/clusters/{settings.cluster}/topics").json()
    assert cut["complete"] is False and "registered" in [t["name"] for t in cut["topics"]]  # the registry's are always there
