"""Agent benchmark: upload throughput beside plain boto3, and roll-to-registered latency.

    .venv/bin/python bench/bench_agent.py [--segments 8] [--segment-mib 32]

It starts Redis and SeaweedFS (the same launchers as the tests) and writes a partition
directory with the format core's log.dir writer (1 KiB records, half random). Then, in one run:

1. **Upload MB/s**: the agent (static leadership, every file of every rotated segment: read,
   CRC-check, multipart upload, register, offset.wm) beside a plain ``boto3`` ``upload_file`` of
   the same files with the same transfer settings and the same number of concurrent files.
   Goal: ratio agent/boto3 >= 0.90. The two are run alternately for ``--rounds`` rounds; the
   ratio is printed best-of (each side's fastest round) and paired (median over rounds of the
   in-round ratio), since SeaweedFS here stalls now and then for a second or more.
2. **Roll to registered, minus the upload time**: with the agent running, the writer rolls a
   segment; the time until it is registered in Redis, less the time its upload took, is the
   agent's own latency (noticing the roll, reading the segment, registering, offset.wm).
   Goal: under 1 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.high_watermarks import checkpoint_high_watermarks
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import Registry
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.config import load_settings
from tiered_kafka_agent.remote_store import transfer_config
from tiered_kafka_dev.services import RedisServer, S3Server

MIB = 1024 * 1024
TOPIC = "bench"


def record_value(value_bytes: int = 1024) -> bytes:
    """One record value of ``value_bytes``: half random, half repetitive text (so a codec gets about 2x)."""
    text = b"the quick brown fox jumps over the lazy dog " * (1 + value_bytes // 44)
    half = value_bytes // 2
    return os.urandom(half) + text[: value_bytes - half]


def records_per_batch(value_bytes: int) -> int:
    """Records in a batch of about 16 KiB (the Java producer's default ``batch.size``): 16 of 1 KiB, more when smaller."""
    return max(16, 16384 // max(1, value_bytes))


def batch(records: int, start_ts: int, value_bytes: int = 1024) -> bytes:
    """One uncompressed batch of ``records`` values of ``value_bytes`` (:func:`record_value`), no keys."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i in range(records):
        builder.append(i, timestamp=start_ts + i, key=None, value=record_value(value_bytes), headers=[])
    return bytes(builder.build())


def write_partition(directory: Path, segments: int, segment_bytes: int, value_bytes: int = 1024) -> PartitionLog:
    """A partition with ``segments`` rotated segments of about ``segment_bytes`` each, plus an active one:
    batches of about 16 KiB (16 records of 1 KiB; more records when they are smaller)."""
    plog = PartitionLog.create(directory, LogConfig(segment_bytes=segment_bytes, retention_ms=-1))
    payload = batch(records_per_batch(value_bytes), int(time.time() * 1000), value_bytes)
    while len(plog.segment_base_offsets()) <= segments:
        plog.append(payload)
    checkpoint_high_watermarks(directory.parent, [directory])  # as a broker would: every record committed
    return plog


def settings_for(log_dir: Path, redis_url: str, s3: S3Server, bucket: str, cluster: str, concurrency: int, prefix: str = "") -> object:
    return load_settings(
        None,
        cluster=cluster,
        broker_id=0,
        log_dirs=[log_dir],
        s3={
            "bucket": bucket,
            "prefix": prefix,
            "endpoint_url": s3.endpoint_url,
            "access_key_id": s3.access_key,
            "secret_access_key": s3.secret_key,
            "region": s3.region,
            "part_concurrency": 4,
        },
        redis={"url": redis_url},
        leadership={"mode": "static"},
        upload={"max_concurrent_segments": concurrency, "rescan_interval_s": 0.2},
        metrics={"port": 0},
    )


def rotated_files(directory: Path) -> list[Path]:
    bases = sorted({p.name[:20] for p in directory.glob("*.log")})[:-1]
    return [p for b in bases for p in sorted(directory.glob(f"{b}.*"))]


def plain_boto3(s3: S3Server, bucket: str, files: list[Path], concurrency: int) -> float:
    """The same files under the same key layout as the agent's (a fresh cluster name, like each
    agent round), so both pay the same for SeaweedFS's directory entries."""
    client = s3.client()
    config = transfer_config(8 * MIB, 8 * MIB, 4)
    keyspace = Keyspace("", f"plain-{uuid.uuid4().hex[:8]}", 0)
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda p: client.upload_file(str(p), bucket, keyspace.partition_prefix(TOPIC, 0) + p.name, Config=config), files))
    return time.perf_counter() - start


def registered(registry: Registry) -> int:
    info = registry.partition_info(TOPIC, 0)
    return 0 if info is None else info.segment_count


def agent_upload(settings: object, registry: Registry, count: int) -> float:
    """From ``start()`` (clients built beforehand, as for plain boto3) to the last registration."""
    agent = Agent(settings)  # type: ignore[arg-type]
    start = time.perf_counter()
    with agent:
        while registered(registry) < count:  # a light poll: the agent runs in this process
            time.sleep(0.02)
        elapsed = time.perf_counter() - start
    return elapsed


def start_services(stack: contextlib.ExitStack, bucket: str = "bench") -> tuple[RedisServer, S3Server, str]:
    """Redis and SeaweedFS (the tests' launchers) entered on ``stack``, and a bucket created: the start of
    every benchmark reading what the agent uploaded."""
    print("starting Redis and SeaweedFS ...", file=sys.stderr, flush=True)
    redis_server = stack.enter_context(RedisServer())
    s3 = stack.enter_context(S3Server())
    return redis_server, s3, s3.create_bucket(bucket)


@dataclass(frozen=True)
class UploadedPartition:
    """``TOPIC``-0 as :func:`upload_partition` left it: the services holding it, the cluster name, the agent's
    settings (``settings_for``) and the registry the agent wrote."""

    redis: RedisServer
    s3: S3Server
    bucket: str
    cluster: str
    agent: Any
    registry: Registry


def upload_partition(stack: contextlib.ExitStack, tmp: Path, segments: int, segment_mib: int) -> UploadedPartition:
    """:func:`start_services`, then ``segments`` rotated segments of about ``segment_mib`` MiB of ``TOPIC``-0 written
    under ``tmp``/logs (:func:`write_partition`) and uploaded by the agent (static leadership, 2 files at a
    time) to a fresh cluster; returns once every segment is registered."""
    redis_server, s3, bucket = start_services(stack)
    log_dir = tmp / "logs"
    print(f"writing {segments} segments of ~{segment_mib} MiB, uploading with the agent ...", file=sys.stderr, flush=True)
    write_partition(log_dir / f"{TOPIC}-0", segments, segment_mib * MIB).close()
    cluster = f"bench-{uuid.uuid4().hex[:8]}"
    agent = settings_for(log_dir, redis_server.url, s3, bucket, cluster, 2)
    registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
    agent_upload(agent, registry, segments)
    return UploadedPartition(redis_server, s3, bucket, cluster, agent, registry)


def roll_latency(plog: PartitionLog, settings: object, registry: Registry, rolls: int) -> list[tuple[float, float]]:
    """(roll -> registered, upload time) per rolled segment, with the agent running."""
    upload_time: dict[int, float] = {}
    results = []
    agent = Agent(settings)  # type: ignore[arg-type]
    original = agent.store.upload_segment

    def timed(topic, partition, opened, stats, hooks, **kwargs):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        entry = original(topic, partition, opened, stats, hooks, **kwargs)
        upload_time[entry.base_offset] = time.perf_counter() - t0
        return entry

    agent.store.upload_segment = timed  # type: ignore[method-assign]
    payload = batch(16, int(time.time() * 1000))
    with agent:
        while len(registry.segments(TOPIC, 0)) < len(plog.segment_base_offsets()) - 1:
            time.sleep(0.01)
        for _ in range(rolls):
            base = plog.active_segment_base_offset
            plog.append(payload)
            rolled_at = time.perf_counter()
            plog.roll()
            checkpoint_high_watermarks(plog.directory.parent, [plog.directory])  # a broker's HW checkpoint, written at once
            while registry.find(TOPIC, 0, base) is None:
                time.sleep(0.001)
            registered = time.perf_counter() - rolled_at
            results.append((registered, upload_time[base]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rolls", type=int, default=20)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:  # services stop before their directory goes
        redis_server, s3, bucket = start_services(stack)
        log_dir = Path(tmp) / "logs"
        plog = write_partition(log_dir / f"{TOPIC}-0", args.segments, args.segment_mib * MIB)
        files = rotated_files(log_dir / f"{TOPIC}-0")
        total_mb = sum(p.stat().st_size for p in files) / 1e6

        plain_times, agent_times = [], []
        for _ in range(args.rounds):
            plain_times.append(plain_boto3(s3, bucket, files, args.concurrency))
            cluster = f"bench-{uuid.uuid4().hex[:8]}"
            settings = settings_for(log_dir, redis_server.url, s3, bucket, cluster, args.concurrency)
            registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
            agent_times.append(agent_upload(settings, registry, args.segments))
        plain_mbs, agent_mbs = total_mb / min(plain_times), total_mb / min(agent_times)

        cluster = f"bench-{uuid.uuid4().hex[:8]}"
        settings = settings_for(log_dir, redis_server.url, s3, bucket, cluster, args.concurrency)
        registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
        small = PartitionLog.create(Path(tmp) / "small" / f"{TOPIC}-0", LogConfig(retention_ms=-1))
        small.append(batch(16, int(time.time() * 1000)))
        small_settings = settings.model_copy(update={"log_dirs": [Path(tmp) / "small"]})  # type: ignore[attr-defined]
        latencies = roll_latency(small, small_settings, registry, args.rolls)
        plog.close()

    own = [registered - upload for registered, upload in latencies]
    print(f"agent benchmark: {args.segments} segments of ~{args.segment_mib} MiB ({total_mb:.0f} MB with indexes), "
          f"{args.concurrency} files at a time, 4 parts per multipart file, best of {args.rounds}")
    print(f"{'':36}{'MB/s':>10}")
    print(f"{'plain boto3 upload_file':36}{plain_mbs:>10.1f}")
    print(f"{'agent (read, CRC, upload, register)':36}{agent_mbs:>10.1f}")
    paired = statistics.median(p / a for p, a in zip(plain_times, agent_times, strict=True))
    print(f"ratio agent/boto3: paired median {paired:.3f}, best-of {agent_mbs / plain_mbs:.3f} "
          f"(rounds: {', '.join(f'{p / a:.2f}' for p, a in zip(plain_times, agent_times, strict=True))})   "
          f"goal (paired median) >= 0.90: {'met' if paired >= 0.9 else 'NOT met'}")
    print(f"roll -> registered over {len(latencies)} rolls of 1-batch segments: "
          f"median {statistics.median(r for r, _ in latencies) * 1000:.0f} ms, of which upload median {statistics.median(u for _, u in latencies) * 1000:.0f} ms")
    print(f"roll -> registered minus upload: median {statistics.median(own) * 1000:.0f} ms, max {max(own) * 1000:.0f} ms   "
          f"goal < 1000 ms: {'met' if max(own) < 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
