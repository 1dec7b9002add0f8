"""Remote data is served whether or not Kafka knows the topic (issue 13, "never silently empty").

Two remote-only topics over the real stack (Kafka, the session's shared broker; Redis, SeaweedFS):
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

from tests.support.agent_env import agent_settings, only_topics, registry_for, rotated_bases, wait_for
from tests.support.fixtures import FIXTURES, MANIFEST
from tests.support.gateway_env import gateway_client, pinterest_bucket, unique_topic, uploaded_partition
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


def test_a_pinterest_layout_bucket_for_a_topic_kafka_never_had_is_listed_and_served(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    topic = unique_topic("history_only")  # never created on the broker (a consumer's metadata request creates no topic)
    cluster = "pinterestCluster"
    last = pinterest_bucket(s3_server, s3_bucket, Keyspace("custom-prefix", cluster, 5), topic)
    settings = agent_settings(FIXTURES, redis_server, s3_server, s3_bucket, cluster=cluster, s3={"prefix": "custom-prefix", "entropy_bits": 5})
    client = gateway_client(settings, s3_server, kafka_server.bootstrap_servers)
    base = f"/v1/clusters/{cluster}/topics/{topic}/partitions/0"

    topics = client.get(f"/v1/clusters/{cluster}/topics").json()
    assert topics["topics"] == [{"name": topic, "partitions": [0]}] and topics["complete"] is True

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

    with gateway_server(settings, s3_server, kafka_server.bootstrap_servers) as url:
        code, printed, stderr = cat(url, cluster, topic)
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


def test_a_registered_topic_deleted_from_kafka_is_listed_and_served(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    topic = unique_topic("erased")
    broker, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, count=1500)
    bootstrap = broker.bootstrap_servers
    latest = registry_for(settings).partition_info(topic, 0).latest_offset
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    del admin
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        with pytest.raises(KafkaException, match="Unknown (topic or )?partition"):  # Kafka no longer knows it
            probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)
    finally:
        probe.close()
    client = gateway_client(settings, s3_server, bootstrap)
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"

    assert client.get(f"/v1/clusters/{settings.cluster}/topics").json()["topics"] == [{"name": topic, "partitions": [0]}]
    response = client.get(base)
    assert response.status_code == 200, response.text
    detail = response.json()
    assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"]) == (0, latest)
    assert detail["kafka"] is None and detail["kafka_error"]["code"] == "unknown_topic_or_partition"
    assert client.get(f"{base}/plan", params={"offset": latest}).status_code == 200
    records = client.get(f"{base}/records", params={"offset": 0, "max_records": 50})
    assert records.status_code == 200 and [r["offset"] for r in records.json()["records"]] == list(range(50))

    with gateway_server(settings, s3_server, bootstrap) as url:
        code, printed, stderr = cat(url, settings.cluster, topic)
    assert code == 0, stderr
    assert [(r["offset"], r["key"], printed_bytes(r, "value")) for r in printed] == [(i, f"k{i}", value_for(i)) for i in range(latest + 1)]


def test_offsets_before_the_coverage_start_are_reported_as_such(kafka_server, redis_server, s3_server, s3_bucket) -> None:
    """The broker's retention (``retention.bytes``) deleted the first segments before the agent began
    following the partition: the agent's coverage starts at the log start it observed, and the gateway
    names it."""
    topic = unique_topic("late")
    bootstrap, directory = kafka_server.bootstrap_servers, kafka_server.log_dir / f"{topic}-0"
    retention_bytes = 250_000
    create_topic(bootstrap, topic, 1, **{"segment.bytes": "100000", "index.interval.bytes": "4096", "retention.bytes": str(retention_bytes), "file.delete.delay.ms": "0"})
    produce(bootstrap, topic, [(0, f"k{i}".encode(), value_for(i)) for i in range(3000)], **{"linger.ms": 2, "batch.num.messages": 7})

    def retention_done() -> bool:
        """Kafka's rule met (``UnifiedLog.deleteRetentionSizeBreachedSegments``): the log less its oldest
        segment is below ``retention.bytes``, and the deleted segments' files are gone. Kafka's retention
        also ran while the records were produced: a log start above 0 alone says one pass ran, not the last."""
        try:
            sizes = [path.stat().st_size for path in sorted(directory.glob("*.log"))]
        except FileNotFoundError:  # renamed to .deleted meanwhile
            return False
        return not list(directory.glob("*.deleted")) and sum(sizes) - sizes[0] < retention_bytes

    wait_for(retention_done, timeout_s=60, what="retention")
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        log_start, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)
    finally:
        probe.close()
    assert 0 < log_start == min(int(path.name[:20]) for path in directory.glob("*.log")) and high == 3000
    settings = agent_settings(kafka_server.log_dir, redis_server, s3_server, s3_bucket, topics=only_topics(topic))
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated_bases(directory), what="uploaded")
    coverage = registry.coverage_start(topic, 0)  # the log start the agent observed when it began following
    assert coverage is not None and coverage.offset == log_start == registry.partition_info(topic, 0).earliest_offset
    client = gateway_client(settings, s3_server, bootstrap)
    base = f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0"

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


def test_the_topic_listing_unites_registry_and_s3_and_says_when_a_bound_cut_it_short(monkeypatch, kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    topic = unique_topic("registered")
    _, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, count=300)
    keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
    for listed in ("listed-a", "listed-b"):  # beside the agent's, objects no registry knows of
        pinterest_bucket(s3_server, s3_bucket, keyspace, listed, segments=1)
    s3_server.client().put_object(Bucket=s3_bucket, Key=f"{settings.s3.prefix}/{settings.cluster}/not-a-partition/x", Body=b"")  # no entropy directory: skipped
    client = gateway_client(settings, s3_server, cache={"listing_ttl_s": 0})
    listing = client.get(f"/v1/clusters/{settings.cluster}/topics").json()
    names = ("listed-a", "listed-b", topic)
    assert listing == {"cluster": settings.cluster, "topics": [{"name": n, "partitions": [0]} for n in names], "complete": True,
                       "next_after": None, "total_partitions": 3}
    pages, after = [], None  # paged (issue 34): one partition a page, the cursor walks registry and S3 partitions in order
    while True:
        page = client.get(f"/v1/clusters/{settings.cluster}/topics", params={"limit": 1, **({"after": after} if after else {})}).json()
        pages += [t["name"] for t in page["topics"]]
        after = page["next_after"]
        if after is None:
            break
    assert pages == list(names)
    monkeypatch.setattr(s3_listing, "MAX_LISTED_PARTITIONS", 2)
    client.get(f"/v1/clusters/{settings.cluster}/topics")  # stale: answered from the last listing while it is refreshed off the request path
    assert client.app.state.readers[settings.cluster].wait_for_background_loads()
    cut = client.get(f"/v1/clusters/{settings.cluster}/topics").json()
    assert cut["complete"] is False and topic in [t["name"] for t in cut["topics"]]  # the registry's are always there
