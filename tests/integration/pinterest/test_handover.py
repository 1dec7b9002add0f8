"""From Pinterest's uploader to ours on the same bucket (issue 37), one scenario shared by the module's tests.

On the package's ZooKeeper-mode Kafka 3.9 broker (``conftest.seed``), Pinterest's real ts-segment-uploader
uploads the first part of topic ``handover``'s history with settings of its own (prefix ``pinterest-archive``,
5 bits of prefix entropy, cluster ``migrating``); DeleteRecords then has the broker's retention delete its
oldest segments (only Pinterest's objects hold them now), and the uploader is stopped. Then, as the README's
migration steps say, while a producer keeps writing: ``tiered-kafka-agent adopt --dry-run`` (a line per segment,
writes nothing),
``adopt`` SIGKILLed mid-way (two segments registered, the third's batch index written and not registered),
retention deleting more of their segments from the broker, ``adopt`` again (completes the rest), once more
(nothing to do: exit 0); their offset.wm set back to a segment the broker no longer has (it can go backwards), our
agent on the same keyspace, SIGKILLed during its first upload (after the ``.log``, before the indexes and
registration) while producers keep writing, our agent again; retention deletes more from the broker. Every
reader then reads the partition, Pinterest's segments first and ours after them: each offset once, byte for
byte what a plain consumer read from the broker before retention (KAFKA_ONLY, which reads Kafka alone, what
Kafka still holds, after the error message naming what it passes).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import pytest
import redis
from confluent_kafka import KafkaError, TopicPartition

from tests.integration.pinterest.conftest import Kept, SeedTopic, produce_seed, read_back
from tests.support.agent_env import AgentProcess, agent_settings, delete_records, only_topics, registry_for, rotated_bases, settings_properties, wait_for
from tests.support.kafka_clients import create_topic
from tests.support.stack_env import gateway_server
from tiered_kafka.bulk import read_table
from tiered_kafka.consumer import TieredConsumer
from tiered_kafka.format.checkpoints import format_offset_wm, parse_offset_wm
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import Registry
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.config import AgentSettings
from tiered_kafka_agent.faults import CRASH_ENV
from tiered_kafka_agent.rebuild import rebuild_registry
from tiered_kafka_dev.services import KAFKA_ZK_VERSION
from tiered_kafka_dev.services._pinterest import PinterestUploader, read_with_ts_consumer

pytestmark = pytest.mark.integration

TOPIC = "handover"
CLUSTER = "migrating"
PREFIX = "pinterest-archive"
ENTROPY_BITS = 5


@dataclass
class Handover:
    settings: AgentSettings
    bucket: str
    keyspace: Keyspace
    theirs: list[int]  # base offsets of the segments Pinterest's uploader wrote
    end: int  # offsets [0, end) are in remote storage
    records: list[Kept]  # offsets [0, end), read by confluent-kafka from the broker before retention deleted any
    log_start: int  # the broker's log start at the end: offsets below it are in remote storage only
    gateway_url: str
    bootstrap: str


def _adopt(config: Path, *extra: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TIERED_KAFKA_AGENT_")}
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.run([sys.executable, "-m", "tiered_kafka_agent", "adopt", "--config", str(config), *extra], env=env, capture_output=True, text=True, timeout=120, check=False)


def _adopt_here(store: Any, registry: Registry, settings: AgentSettings, dry_run: bool = False) -> str:
    """What ``tiered-kafka-agent adopt`` prints, run in this process; its report must be ok."""
    import io

    from tiered_kafka_agent.adopt import adopt_segments
    from tiered_kafka_agent.progress import Progress

    out = io.StringIO()
    report = adopt_segments(store, registry, out, log_dirs=settings.log_dirs, dry_run=dry_run, progress=Progress("adopt", out=io.StringIO()))
    assert report.ok and report.failed == 0, out.getvalue()
    return out.getvalue()


def _objects(s3: Any, bucket: str) -> dict[str, tuple[str, Any]]:
    return {o["Key"]: (o["ETag"], o["LastModified"]) for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in page.get("Contents", ())}


def _log_start(bootstrap: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False)[0]
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def handover(seed: SeedTopic, tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[Handover]:
    broker = seed.broker
    bootstrap = broker.bootstrap_servers
    root = tmp_path_factory.mktemp("handover")
    bucket = s3_server.create_bucket(f"handover-{uuid.uuid4().hex[:12]}")
    s3 = s3_server.client()
    directory = broker.log_dir / f"{TOPIC}-0"
    create_topic(bootstrap, TOPIC, 1, version=KAFKA_ZK_VERSION, **{"segment.bytes": "40000", "index.interval.bytes": "2048"})
    uploader = PinterestUploader(
        log_dir=broker.log_dir, zookeeper_connect=broker.zookeeper_connect, broker_id=broker.node_id,
        endpoint_url=s3_server.endpoint_url, access_key=s3_server.access_key, secret_key=s3_server.secret_key,
        bucket=bucket, cluster=CLUSTER, prefix=PREFIX, entropy_bits=ENTROPY_BITS, topics=TOPIC,
    )  # fmt: skip
    keyspace = uploader.keyspace
    prefix = keyspace.partition_prefix(TOPIC, 0)

    # 1. Pinterest's uploader writes the first part of the history; retention deletes its oldest segments from the broker
    with uploader:
        uploader.wait_watching(TOPIC, 0)
        produce_seed(bootstrap, topic=TOPIC, group=50)
        theirs = rotated_bases(directory)
        their_end = max(int(p.name[:20]) for p in directory.glob("*.log"))  # the active segment's base
        assert len(theirs) >= 6, theirs
        wait_for(lambda: {keyspace.segment_key(TOPIC, 0, b, FileKind.LOG) for b in theirs} <= set(_objects(s3, bucket)), timeout_s=90, what="Pinterest's uploader to upload every rotated segment")
        reference = read_back(bootstrap, TOPIC, 0, 0, their_end)
        delete_records(bootstrap, TOPIC, theirs[2])
        wait_for(lambda: min(rotated_bases(directory) or [0]) >= theirs[2], timeout_s=60, what="the broker's retention to delete the first two segments")
    wait_for(lambda: not uploader.running, timeout_s=30, what="Pinterest's uploader to stop")
    theirs_before = {k: v for k, v in _objects(s3, bucket).items()}
    assert theirs_before[keyspace.offset_wm_key(TOPIC, 0)]  # their offset.wm is there: our agent must not take it as progress

    settings = agent_settings(broker.log_dir, redis_server, s3_server, bucket, cluster=CLUSTER, topics=only_topics(TOPIC), s3={"prefix": PREFIX, "entropy_bits": ENTROPY_BITS})
    registry = registry_for(settings)
    config = root / "agent.properties"
    config.write_text(settings_properties(settings))

    # 2. adopt, while a producer writes: a dry run (the command) prints a line per segment and writes nothing; a run
    # (the command) killed mid-way, after two registrations and the third segment's batch index; retention deletes
    # more of their segments from the broker; a run that completes (in-process: the command's function); one more
    # (the command), which finds everything registered, exits 0 and writes nothing
    producing_errors: list[BaseException] = []

    def producing() -> None:
        try:
            produce_seed(bootstrap, topic=TOPIC, group=50)
        except BaseException as err:  # noqa: BLE001 - raised again by the test's thread
            producing_errors.append(err)

    producer = threading.Thread(target=producing, name="producing-during-adoption")
    producer.start()
    store = Agent(settings).store
    spans = list(zip(theirs, [*theirs[1:], their_end]))  # each segment of theirs: base, next offset
    dry = _adopt(config, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert dry.stdout.startswith(f"{len(theirs)} segment(s) without tk-* metadata and 0 registered already in 1 partition(s) of cluster {CLUSTER} (dry run: nothing is written)"), dry.stdout
    would = [line.split(": would register ")[0] for line in dry.stdout.splitlines() if ": would register " in line]
    assert would == [f"{TOPIC}-0 segment {b}..{n - 1}" for b, n in spans], dry.stdout  # a line per segment, naming it
    assert f"adopted: {len(theirs)} would be registered, 0 registered already" in dry.stdout and "adopt: segments [" in dry.stderr, dry.stdout + dry.stderr
    assert _objects(s3, bucket) == theirs_before  # no new object (no .batchindex, coverage.json or gap marker), none rewritten
    assert registry.segments(TOPIC, 0) == [] and registry.gaps(TOPIC, 0) == [] and registry.coverage_start(TOPIC, 0) is None
    killed = _adopt(config, crash_at="adopt_before_register@3")
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert "adopt: segments [" in killed.stderr, killed.stderr  # the progress bar
    assert [e.base_offset for e in registry.segments(TOPIC, 0)] == theirs[:2], killed.stdout
    assert keyspace.segment_key(TOPIC, 0, theirs[2], FileKind.BATCHINDEX) in _objects(s3, bucket)  # written, not registered
    delete_records(bootstrap, TOPIC, theirs[3])
    wait_for(lambda: min(rotated_bases(directory) or [0]) >= theirs[3], timeout_s=60, what="the broker's retention to delete their third segment")
    done = _adopt_here(store, registry, settings)
    assert f"adopted: {len(theirs) - 2} registered, 2 registered already" in done, done
    adopted = registry.segments(TOPIC, 0)
    assert [(e.base_offset, e.first, e.object_key) for e in adopted] == [(b, b, keyspace.segment_key(TOPIC, 0, b, FileKind.LOG)) for b in theirs]
    assert [e.next_offset for e in adopted] == [*theirs[1:], their_end] and registry.gaps(TOPIC, 0) == []
    assert sum(e.record_count for e in adopted) == len(reference) and all("batchindex" in e.files for e in adopted)
    for e in adopted:  # each entry what the object and the records say
        held = [r for r in reference if e.first <= r.offset < e.next_offset]
        assert (e.record_count, e.min_timestamp, e.max_timestamp) == (len(held), min(r.timestamp for r in held), max(r.timestamp for r in held))
        body = s3.get_object(Bucket=bucket, Key=e.object_key)["Body"].read()
        assert (e.checksum, e.size) == (f"crc32c:{crc32c.crc32c(body):08x}", len(body))
        last = list(iter_batches(body))[-1]  # the leader epoch as Kafka wrote it: the partitionLeaderEpoch of the last batch
        assert (e.leader_epoch, e.last_offset) == (last.partition_leader_epoch, last.last_offset), (e, last.partition_leader_epoch)
    registered = (_objects(s3, bucket), registry.segments(TOPIC, 0), registry.coverage_start(TOPIC, 0))
    again = _adopt(config)  # nothing of theirs left: an idempotent success
    assert again.returncode == 0, again.stdout + again.stderr
    assert [line for line in again.stdout.splitlines() if line.endswith(": registered already")] == [f"{TOPIC}-0 segment {b}..{n - 1}: registered already" for b, n in spans], again.stdout
    assert f"nothing left to adopt: every one of the {len(theirs)} segment(s) is registered already" in again.stdout, again.stdout
    assert again.stdout.startswith(f"0 segment(s) without tk-* metadata and {len(theirs)} registered already in 1 partition(s)"), again.stdout
    assert (_objects(s3, bucket), registry.segments(TOPIC, 0), registry.coverage_start(TOPIC, 0)) == registered and registry.gaps(TOPIC, 0) == []
    producer.join(300)
    assert not producer.is_alive() and not producing_errors, producing_errors
    after_adoption = _objects(s3, bucket)
    assert {k: v for k, v in after_adoption.items() if k in theirs_before} == theirs_before  # nothing of theirs rewritten
    assert sorted(set(after_adoption) - set(theirs_before)) == sorted(
        [keyspace.segment_key(TOPIC, 0, b, FileKind.BATCHINDEX) for b in theirs] + [keyspace.coverage_start_key(TOPIC, 0)]
    )

    # 3. the hand-over: their offset.wm gone backwards (it is written per segment, unordered) to a segment the broker
    # no longer has; our agent, SIGKILLed after its first .log, while producers keep writing; then again
    s3.put_object(Bucket=bucket, Key=keyspace.offset_wm_key(TOPIC, 0), Body=format_offset_wm(theirs[1]))
    crashed = AgentProcess(settings, root / "crashing.properties", crash_at="after_log")
    try:
        produce_seed(bootstrap, topic=TOPIC, group=50)
        assert crashed.wait(120) == -9, crashed.output()
    finally:
        crashed.stop()
    agent = AgentProcess(settings, root / "agent.properties")
    try:
        produce_seed(bootstrap, topic=TOPIC, group=50)
        wait_for(lambda: set(rotated_bases(directory)) <= {e.base_offset for e in registry.segments(TOPIC, 0)}, timeout_s=120, what="our agent to upload every rotated segment")
        end = registry.partition_info(TOPIC, 0).latest_offset + 1
        records = reference + read_back(bootstrap, TOPIC, 0, their_end, end)
        # retention deletes more: our first segments are gone from the broker too
        ours = [e.base_offset for e in registry.segments(TOPIC, 0) if e.base_offset >= their_end]
        delete_records(bootstrap, TOPIC, ours[1])
        wait_for(lambda: _log_start(bootstrap) == ours[1], timeout_s=60, what="the broker's log start to move")
        assert "ObjectKeyTakenError" not in agent.output() and "holds another upload" not in agent.output(), agent.output()[-3000:]
    finally:
        agent.stop()
    assert {k: v for k, v in _objects(s3, bucket).items() if k in theirs_before and not k.endswith("offset.wm")} == {
        k: v for k, v in theirs_before.items() if not k.endswith("offset.wm")
    }
    assert registry.gaps(TOPIC, 0) == []
    assert parse_offset_wm(s3.get_object(Bucket=bucket, Key=keyspace.offset_wm_key(TOPIC, 0))["Body"].read()) >= their_end  # ours now
    with gateway_server(settings, s3_server, bootstrap) as url:
        yield Handover(settings, bucket, keyspace, theirs, end, records, ours[1], url, bootstrap)


def test_the_registry_holds_their_segments_then_ours_in_order_and_a_rebuild_restores_it(handover: Handover) -> None:
    registry = registry_for(handover.settings)
    entries = registry.segments(TOPIC, 0)
    assert [e.first for e in entries][: len(handover.theirs)] == handover.theirs
    assert [e.first for e in entries[1:]] == [e.next_offset for e in entries[:-1]] and entries[0].first == 0 and entries[-1].next_offset == handover.end
    rebuilt = Registry(redis.Redis.from_url(handover.settings.redis.url), CLUSTER, namespace=f"rebuilt{uuid.uuid4().hex[:6]}")
    report = rebuild_registry(Agent(handover.settings).store, rebuilt)
    assert report.foreign == 0
    assert [(e.first, e.last_offset, e.checksum, e.object_key) for e in rebuilt.segments(TOPIC, 0)] == [(e.first, e.last_offset, e.checksum, e.object_key) for e in entries]


def test_adopt_on_a_keyspace_holding_none_of_their_segments_exits_1_naming_the_prefixes_searched(handover: Handover, tmp_path: Path, s3_server: Any) -> None:
    """``tiered-kafka-agent adopt`` (and ``--dry-run``) with an ``s3.prefix`` under which their uploader wrote
    nothing: asked for their segments and got none, it exits 1 with a message naming the bucket, the prefixes and
    the topic searched, and writes nothing (the fixture runs the other exit-0 cases: a dry run, and a re-run that
    finds everything registered)."""
    s3 = s3_server.client()
    registry = registry_for(handover.settings)
    before = (_objects(s3, handover.bucket), registry.segments(TOPIC, 0), registry.gaps(TOPIC, 0), registry.coverage_start(TOPIC, 0))
    elsewhere = handover.settings.model_copy(update={"s3": handover.settings.s3.model_copy(update={"prefix": "not-their-prefix"})})
    config = tmp_path / "elsewhere.properties"
    config.write_text(settings_properties(elsewhere))
    searched = f"s3://{handover.bucket}/not-their-prefix/00000/{CLUSTER}/ .. not-their-prefix/11111/{CLUSTER}/ (32 prefixes)"
    for extra in ((), ("--dry-run",), ("--topic", TOPIC)):
        done = _adopt(config, *extra)
        assert done.returncode == 1, (extra, done.stdout + done.stderr)
        assert f"no segment without tk-* metadata under {searched} for cluster {CLUSTER} (s3.prefix 'not-their-prefix', {ENTROPY_BITS} entropy bits" in done.stderr, done.stderr
        assert (f", topics {TOPIC})" in done.stderr) == ("--topic" in extra) and "nothing to adopt" in done.stderr, done.stderr
        assert done.stdout.startswith(f"0 segment(s) without tk-* metadata and 0 registered already in 0 partition(s) of cluster {CLUSTER}") and not [line for line in done.stdout.splitlines() if ": would register" in line or ": registered" in line], done.stdout
    assert (_objects(s3, handover.bucket), registry.segments(TOPIC, 0), registry.gaps(TOPIC, 0), registry.coverage_start(TOPIC, 0)) == before


def test_the_gateway_and_the_bulk_api_serve_every_offset_once(handover: Handover) -> None:
    import httpx

    detail = httpx.get(f"{handover.gateway_url}/v1/clusters/{CLUSTER}/topics/{TOPIC}/partitions/0", timeout=30).json()
    assert (detail["remote"]["earliest_offset"], detail["remote"]["latest_offset"]) == (0, handover.end - 1)
    table = read_table(handover.gateway_url, CLUSTER, TOPIC, 0, include_headers=True)
    got = [Kept(r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], r["value"], tuple((h["key"], h["value"]) for h in r["headers"] or ())) for r in table.to_pylist()]
    assert [k.offset for k in got] == list(range(handover.end))
    assert got == handover.records


@pytest.mark.parametrize("mode", ["REMOTE_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED", "KAFKA_ONLY"])
def test_tiered_consumer_reads_every_offset_once_in_each_mode(handover: Handover, mode: str) -> None:
    """Every offset once from 0 in the modes that read remote storage. KAFKA_ONLY reads Kafka alone, which no
    longer holds offsets below its log start (Pinterest's segments and our first): as the SDK's rules say
    (``tiered_kafka.modes``), auto.offset.reset=earliest moves it forward to the log start with one
    OFFSET_OUT_OF_RANGE error message naming the offsets remote storage holds there (never passed silently),
    then every offset Kafka holds once."""
    consumer = TieredConsumer({
        "bootstrap.servers": handover.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "tiered.mode": mode, "tiered.gateway.url": handover.gateway_url, "tiered.cluster": CLUSTER, "auto.offset.reset": "earliest",
    })  # fmt: skip
    got: list[Kept] = []
    errors: list[Any] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        for _ in range(240):
            if got and got[-1].offset >= handover.end - 1:
                break
            for m in consumer.consume(500, 0.5):
                if m.error() is not None:
                    errors.append(m.error())
                    continue
                got.append(Kept(m.offset(), m.timestamp()[1], m.key(), m.value(), tuple(m.headers() or ())))
    finally:
        consumer.close()
    got = [k for k in got if k.offset < handover.end]
    first = handover.log_start if mode == "KAFKA_ONLY" else 0
    if mode == "KAFKA_ONLY":
        assert [e.code() for e in errors] == [KafkaError.OFFSET_OUT_OF_RANGE], [str(e) for e in errors]
        assert f"offsets 0..{first - 1} are skipped" in errors[0].str() and f"remote storage holds 0..{first - 1}" in errors[0].str(), errors[0].str()
    else:
        assert errors == [], [str(e) for e in errors]
    assert [k.offset for k in got] == list(range(first, handover.end))
    assert got == handover.records[first:]


def test_spark_reads_every_offset_once(handover: Handover, spark: Any) -> None:
    options = {"tiered.gateway.url": handover.gateway_url, "tiered.cluster": CLUSTER, "subscribe": TOPIC, "includeHeaders": "true"}
    rows = spark.read.format("tiered-kafka").options(**options).load().collect()
    got = [(r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], None if r["value"] is None else bytes(r["value"]), tuple((h["key"], h["value"]) for h in r["headers"] or ())) for r in rows]
    assert [g[0] for g in got] == list(range(handover.end))
    assert got == [(k.offset, k.timestamp, k.key, k.value, k.headers) for k in handover.records]


def test_ts_consumer_still_reads_the_whole_bucket(handover: Handover, s3_server: Any) -> None:
    records = read_with_ts_consumer(handover.bootstrap, s3_server, handover.bucket, handover.keyspace, TOPIC, 0, 0, handover.end)
    assert [r.offset for r in records] == list(range(handover.end))
    assert [Kept(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == handover.records


def test_the_cli_the_coverage_page_and_the_audit_show_the_partition_whole(handover: Handover, tmp_path: Path) -> None:
    import html
    import json
    import re

    import httpx

    from tests.integration.sdk.test_cli_terminal import run, user_env
    from tiered_kafka_dev.stack import cli_exports

    entries = registry_for(handover.settings).segments(TOPIC, 0)
    done = run(user_env(tmp_path, **cli_exports(handover.gateway_url, CLUSTER, handover.bootstrap)), "describe", TOPIC, "--json")
    assert done.returncode == 0, done.stderr
    partition = json.loads(done.stdout)["partitions"][0]
    assert (partition["remote"]["earliest_offset"], partition["remote"]["latest_offset"], partition["remote"]["segments"]) == (0, handover.end - 1, len(entries))
    assert partition["gaps"] == []
    page = httpx.get(f"{handover.gateway_url}/ui/clusters/{CLUSTER}/topics/{TOPIC}/partitions/0?rows=1000", timeout=30)
    assert page.status_code == 200, page.text[:500]
    rows = re.findall(r'<tr class="segment"><td>(\d+)</td><td>(\d+)</td>.*?<td class="note">([^<]+)</td>', page.text)
    assert [(int(a), int(b), html.unescape(k)) for a, b, k in rows] == [(e.first, e.last_offset, e.object_key) for e in entries]
    config = tmp_path / "agent.properties"
    config.write_text(settings_properties(handover.settings))
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TIERED_KAFKA_AGENT_")}
    audit = subprocess.run([sys.executable, "-m", "tiered_kafka_agent", "audit", "--config", str(config), "--topic", TOPIC, "--bootstrap-servers", handover.bootstrap],
                           env=env, capture_output=True, text=True, timeout=120, check=False)
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.parametrize("adopt_first", [False, True], ids=["agent-alone", "after-adopt"])
def test_their_objects_under_our_keys_same_bytes_kept_other_bytes_reported_once_without_a_tight_loop(
    seed: SeedTopic, seed_dir: Path, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str, caplog: pytest.LogCaptureFixture, adopt_first: bool
) -> None:
    """Our agent started beside their bucket without ``adopt`` (the issue's first try), or after ``adopt``: a segment
    their uploader wrote (its objects copied from the seed bucket: the same bytes, no tk-* metadata) is kept and
    registered where it is (by the agent, or by adopt); their offset.wm naming a later segment is not taken as
    progress (ignored with an empty registry; taken no higher than the registry vouches after adopt), so the segment
    between, which they never uploaded, is uploaded by us; a segment whose key holds other bytes of theirs is an
    error naming both, logged once however often the uploader is woken, retried with a backoff, and nothing of
    theirs is rewritten."""
    import logging

    s3 = s3_server.client()
    log_dir = tmp_path / "logs"
    from tests.support.agent_env import copy_partition

    copy_partition(seed_dir, log_dir)
    bases = rotated_bases(log_dir / seed_dir.name)
    cluster = f"conflicts-{uuid.uuid4().hex[:8]}"  # a registry of its own (Redis is the session's)
    settings = agent_settings(log_dir, redis_server, s3_server, s3_bucket, cluster=cluster, topics=only_topics(seed_dir.name[:-2]), s3={"prefix": "theirs", "entropy_bits": 2})
    ours = Keyspace("theirs", cluster, 2)
    topic = seed_dir.name[:-2]

    def copy(source_base: int, target_base: int, kind: FileKind) -> None:
        source = seed.keyspace.segment_key(topic, 0, source_base, kind)
        s3.copy_object(Bucket=s3_bucket, Key=ours.segment_key(topic, 0, target_base, kind), CopySource={"Bucket": seed.bucket, "Key": source})

    for kind in (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX):
        copy(bases[0], bases[0], kind)  # their upload of segment 0
    copy(bases[3], bases[2], FileKind.LOG)  # other bytes under segment 2's key
    s3.put_object(Bucket=s3_bucket, Key=ours.offset_wm_key(topic, 0), Body=format_offset_wm(bases[2]))  # their offset.wm, past segment 1
    before = _objects(s3, s3_bucket)
    registry = registry_for(settings)
    if adopt_first:  # registers segment 0, stops at the hole before segment 2 (this host's log holds it)
        out = _adopt_here(Agent(settings).store, registry, settings)
        assert [e.base_offset for e in registry.segments(topic, 0)] == bases[:1] and "left to the agent" in out, out
    caplog.set_level(logging.INFO, logger="tiered_kafka_agent")
    caplog.set_level(logging.DEBUG, logger="tiered_kafka_agent.partition_uploader")  # every try at the conflicting segment
    with Agent(settings) as agent:
        wait_for(lambda: [e.base_offset for e in registry.segments(topic, 0)] == bases[:2], timeout_s=60, what="segments 0 and 1 registered")
        for _ in range(100):  # filesystem events: they must not cut the backoff short
            agent.wake(seed_dir.name)
            __import__("time").sleep(0.05)
        failures = agent.metrics.failures.labels(topic)._value.get()
    entries = registry.segments(topic, 0)
    assert [e.base_offset for e in entries] == bases[:2]
    assert entries[0].object_key == ours.segment_key(topic, 0, bases[0], FileKind.LOG)
    after = _objects(s3, s3_bucket)
    assert {k: after[k] for k in before if not k.endswith("offset.wm")} == {k: v for k, v in before.items() if not k.endswith("offset.wm")}  # nothing of theirs rewritten
    index = s3.head_object(Bucket=s3_bucket, Key=ours.segment_key(topic, 0, bases[0], FileKind.BATCHINDEX))
    assert index["Metadata"]["tk-checksum"] == entries[0].checksum  # what rebuild restores the adopted entry from
    assert s3.head_object(Bucket=s3_bucket, Key=ours.segment_key(topic, 0, bases[1], FileKind.LOG))["Metadata"]["tk-checksum"] == entries[1].checksum
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "another uploader" in r.getMessage()]
    assert len(errors) == 1 and failures == 1, errors
    tries = [r for r in caplog.records if r.name == "tiered_kafka_agent.partition_uploader" and "was written by another uploader" in r.getMessage()]
    assert 2 <= len(tries) <= 5, [r.getMessage()[:120] for r in tries]  # tried again after 2 s, 4 s...: a tight loop tries hundreds of times
    assert ours.segment_key(topic, 0, bases[2], FileKind.LOG) in errors[0] and f"{bases[2]:020d}.log" in errors[0], errors[0]
    assert not [r for r in caplog.records if "ObjectKeyTakenError" in r.getMessage() or "holds another upload" in r.getMessage()]


def test_adopt_stops_at_a_hole_the_broker_still_holds_and_records_one_neither_has(
    seed: SeedTopic, seed_dir: Path, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str
) -> None:
    """Their objects for segments 0, 1 and 3 (copied from the seed bucket), none for segment 2. With the partition
    in this host's log dir from before the hole, adoption registers 0 and 1 and leaves 3 to the agent; with no
    log dir holding it, the hole is a gap with its reason and 3 is registered after it."""
    import io

    from tests.support.agent_env import copy_partition

    s3 = s3_server.client()
    topic = seed_dir.name[:-2]
    bases = rotated_bases(seed_dir)
    log_dir = tmp_path / "logs"
    copy_partition(seed_dir, log_dir)
    (tmp_path / "empty").mkdir()
    suffix = uuid.uuid4().hex[:8]  # registries of their own (Redis is the session's)
    for cluster, log_dirs in ((f"holes-local-{suffix}", [log_dir]), (f"holes-gone-{suffix}", [tmp_path / "empty"])):
        keyspace = Keyspace("theirs", cluster, 2)
        for base in (bases[0], bases[1], bases[3]):
            for kind in (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX):
                s3.copy_object(Bucket=s3_bucket, Key=keyspace.segment_key(topic, 0, base, kind), CopySource={"Bucket": seed.bucket, "Key": seed.keyspace.segment_key(topic, 0, base, kind)})
        settings = agent_settings(log_dirs[0], redis_server, s3_server, s3_bucket, cluster=cluster, s3={"prefix": "theirs", "entropy_bits": 2})
        registry = registry_for(settings)
        out = io.StringIO()
        from tiered_kafka_agent.adopt import adopt_segments

        report = adopt_segments(Agent(settings).store, registry, out, log_dirs=log_dirs)
        registered = [(e.first, e.last_offset) for e in registry.segments(topic, 0)]
        if cluster.startswith("holes-local"):
            assert (report.adopted, report.left, report.gaps) == (2, 1, 0), out.getvalue()
            assert registered == [(bases[0], bases[1] - 1), (bases[1], bases[2] - 1)] and registry.gaps(topic, 0) == []
            assert "left to the agent" in out.getvalue()
        else:
            assert (report.adopted, report.left, report.gaps) == (3, 0, 1), out.getvalue()
            assert [r[0] for r in registered] == [bases[0], bases[1], bases[3]]
            gaps = registry.gaps(topic, 0)
            assert [(g.start_offset, g.end_offset) for g in gaps] == [(bases[2], bases[3] - 1)] and "no longer in the broker's log" in gaps[0].reason
            assert s3.get_object(Bucket=s3_bucket, Key=keyspace.gap_key(topic, 0, bases[2], bases[3] - 1))  # rebuild finds it
