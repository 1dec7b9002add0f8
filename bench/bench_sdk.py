"""SDK benchmark: TieredConsumer (REMOTE_ONLY) beside confluent-kafka and beside raw presigned GETs.

    .venv/bin/python bench/bench_sdk.py [--segments 4] [--segment-mib 32] [--rounds 3] [--prefetch-mib 128] [--value-bytes 1024]

Set-up: Redis, SeaweedFS and Apache Kafka (the tests' launchers; Kafka one KRaft node, 1 GiB of
heap); one partition produced to Kafka with confluent-kafka (16-record batches of 1 KiB records,
uncompressed, the records of ``bench_agent.py``) until Kafka has rolled ``--segments`` segments, which
the agent uploads from Kafka's log.dir and registers; then, each in its own process so that none
competes for the GIL of another: the gateway (uvicorn), Kafka, and each measured reader. Every
figure reads the same records: offsets 0..L, the partition's rotated segments (what remote storage
holds). Rounds alternate the readers; the best round of each counts.

1. **records/s**: ``TieredConsumer`` in REMOTE_ONLY (``consume(1000)``, no Kafka at all) beside a
   plain ``confluent_kafka.Consumer`` fetching the same offsets from Kafka.
   Goal: ratio >= 1.0. And the **reader's CPU per record** (``time.process_time``: every thread of
   the reading process, user and system, over the read) in the same runs: SDK ÷ confluent-kafka,
   goal <= 1.0 (#38). The runs compared are the best (fastest) round of each.
2. **MB/s**: the same run's segment bytes over its time, beside a raw presigned GET of the same
   bytes: plan the partition in order (8 MiB plans) and GET every range with the SDK's receive
   (``GatewayClient.fetch``, one at a time), no decoding. Goal: ratio >= 0.7. And that **raw
   receive's CPU per GB** (the GETs' CPU, not the plans') beside ``curl`` fetching the same ranges
   to /dev/null (one process, one keep-alive connection), the least of the rounds of each: goal <= 1.2 (#38).
CPU seconds (the reader's own, during the read; SeaweedFS's and Kafka's JVM's over the same run,
from ``/proc/<pid>/stat``) are printed too: on one 2-CPU machine the S3 server competes with the
SDK reader, and Kafka with confluent-kafka.
3. **peak RSS**: the SDK process's peak resident memory (``/proc``'s VmHWM) above what it used before
   reading, beside the configured prefetch budget (``tiered.prefetch.max.bytes``). Goal: within it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from collections.abc import Iterator
from typing import Any, NamedTuple

import redis

from tiered_kafka.consumer.config import DEFAULT_PREFETCH_MAX_BYTES

MIB = 1024 * 1024
TOPIC = "bench"
HERE = Path(__file__).resolve().parent


# -- the measured readers (each runs in a child process) ------------------------------------------
def read_offsets(consumer: Any, last: int) -> dict[str, Any]:
    """Assign offset 0 and consume to ``last`` with ``consume(1000)``, checking every offset in
    order; the same loop for both consumers. Wall and CPU seconds of the read."""
    from confluent_kafka import TopicPartition

    start = progressed = time.perf_counter()
    cpu_start = time.process_time()
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    expected, value_bytes = 0, 0
    while expected <= last:
        batch = consumer.consume(1000, 0.2)
        if batch:
            progressed = time.perf_counter()
        elif time.perf_counter() - progressed > 30:
            raise RuntimeError(f"no record for 30 s at offset {expected}")
        for message in batch:
            if message.error() is not None:
                raise RuntimeError(str(message.error()))
            if message.offset() != expected:
                raise RuntimeError(f"offset {message.offset()} where {expected} was expected")
            expected += 1
            value_bytes += len(message.value())
            if expected > last:
                break
    return {"records": expected, "value_bytes": value_bytes, "elapsed": time.perf_counter() - start, "cpu_s": time.process_time() - cpu_start}


def child_sdk(gateway_url: str, cluster: str, last: int, prefetch_bytes: int, parallelism: int) -> dict[str, Any]:
    from confluent_kafka import TopicPartition

    from tiered_kafka.consumer import TieredConsumer

    config = {"tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": gateway_url, "tiered.cluster": cluster, "tiered.prefetch.max.bytes": prefetch_bytes, "tiered.prefetch.parallelism": parallelism}
    consumer = TieredConsumer(config)
    consumer.get_watermark_offsets(TopicPartition(TOPIC, 0))  # the client up (a gateway call) before the baseline
    rss_before = _current_rss_bytes()
    result = read_offsets(consumer, last)
    result.update(rss_before=rss_before, rss_peak=_rss_bytes(), budget_peak=consumer._budget.peak)  # noqa: SLF001 (what the prefetch reserved at most)
    consumer.close()
    return result


def child_confluent(bootstrap: str, last: int) -> dict[str, Any]:
    from confluent_kafka import Consumer

    # fetch.queue.backoff.ms: librdkafka waits 1000 ms (its default) before fetching again once its queue
    # holds queued.min.messages (100k): small records hit that at once and the reader stalls (4x slower
    # on 100 B records here). The reference gets its best setting, not that stall.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    result = read_offsets(consumer, last)
    consumer.close()
    return result


def child_raw_get(gateway_url: str, cluster: str, last: int) -> dict[str, Any]:
    """Plan in order and GET every range with the SDK's own receive (``GatewayClient.fetch``: the body
    in memory, checked for its length and Content-Range), one at a time, nothing decoded."""
    from tiered_kafka.client.gateway import GatewayClient

    client = GatewayClient(gateway_url, cluster, timeout_s=30)
    start = time.perf_counter()
    cpu_start = time.process_time()
    total, offset, receive_cpu_s = 0, 0, 0.0
    while offset <= last:
        plan = client.plan(TOPIC, 0, offset, 8 * MIB)
        for r in plan.ranges:
            fetch_start = time.process_time()
            total += len(client.fetch(r))
            receive_cpu_s += time.process_time() - fetch_start
        offset = plan.next_offset
    elapsed = time.perf_counter() - start
    cpu_s = time.process_time() - cpu_start
    client.close()
    return {"bytes": total, "elapsed": elapsed, "cpu_s": cpu_s, "receive_cpu_s": receive_cpu_s}


def child_curl(gateway_url: str, cluster: str, last: int) -> dict[str, Any]:
    """The reference any user has: the same plans' ranges fetched by one ``curl`` process (one
    keep-alive connection, ``-K`` config from stdin) writing them to /dev/null; its CPU (user + system,
    RUSAGE_CHILDREN) beside the planning process's own over the same time."""
    import resource

    from tiered_kafka.client.gateway import GatewayClient

    client = GatewayClient(gateway_url, cluster, timeout_s=30)
    ranges, offset = [], 0
    while offset <= last:
        plan = client.plan(TOPIC, 0, offset, 8 * MIB)
        ranges.extend(plan.ranges)
        offset = plan.next_offset
    client.close()
    # "next": options (the Range header) apply to the URL before it, not to every URL; one connection still serves all
    config = "next\n".join(f'url = "{r.url}"\noutput = "/dev/null"\nheader = "Range: {r.range_header}"\n' for r in ranges)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(["curl", "--silent", "--show-error", "--fail", "--config", "-"], input=config.encode(), check=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"bytes": sum(r.size for r in ranges), "elapsed": elapsed, "cpu_s": cpu_s}


def _rss_bytes() -> int:
    """Peak resident set size of this process so far: /proc's VmHWM (not getrusage's ru_maxrss,
    which Linux carries over from the parent across fork and exec)."""
    return _proc_status_kib("VmHWM") * 1024


def _current_rss_bytes() -> int:
    return _proc_status_kib("VmRSS") * 1024


def _proc_status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (/proc/<pid>/stat utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_script_child(script: str, kind: str, *args: Any) -> dict[str, Any]:
    """Run reader ``kind`` of the benchmark ``script`` (its ``--child`` mode) in a process of its own,
    so each reader's CPU is its own; its JSON result (shared by bench_bulk and bench_txn)."""
    out = subprocess.run([sys.executable, script, "--child", kind, json.dumps(args)], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} reader failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- set-up ------------------------------------------------------------------------------------------
class ServedPartition(NamedTuple):
    """What :func:`uploaded_partition` yields: where to read ``TOPIC``-0 and whose CPU to watch."""

    gateway_url: str
    cluster: str
    last: int
    """The last offset of the rotated segments the agent registered (every reader reads 0..last)."""
    segment_bytes: int
    """Their bytes as stored in S3."""
    bootstrap: str
    weed_pid: int
    kafka_pid: int


def produce_partition(bootstrap: str, directory: Path, segments: int, segment_bytes: int, value_bytes: int, partitions: int = 1) -> int:
    """Create ``TOPIC`` (``partitions`` partitions, ``segment.bytes`` = ``segment_bytes``, ``retention.ms`` -1) and
    produce records of ``value_bytes`` to it with confluent-kafka (``bench_agent.record_value``: half random,
    half text, no key; uncompressed; ``batch.num.messages`` = ``bench_agent.records_per_batch``, so batches
    of ~16 KiB as the log.dir writer builds them) until the partition's log ``directory`` holds ``segments``
    rotated segments: Kafka rolls a segment when the next batch would take it past ``segment.bytes``.
    Returns the records produced (the active segment holds the last of them). With ``partitions`` > 1
    (``directory`` is then partition 0's; the others are its siblings) records go round robin, a chunk per
    partition in turn, until every partition holds ``segments`` rotated segments."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench_agent import record_value, records_per_batch

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1, config={"segment.bytes": str(segment_bytes), "retention.ms": "-1"})]).values():
        future.result(timeout=60)
    del admin
    per_batch = records_per_batch(value_bytes)
    # distinct values over 16 MiB: a compressor (the KIP-405 RSM's zstd chunks of 4 MiB) must not find whole records again in its window
    values = [record_value(value_bytes) for _ in range(max(256, 16 * MIB // value_bytes))]
    chunk = per_batch * max(1, segment_bytes // 8 // value_bytes // per_batch)  # whole batches, under a segment between two looks at the directory
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "compression.type": "none",
                         "linger.ms": 50, "batch.num.messages": per_batch, "log_level": 3})
    produced = 0
    try:
        directories = [directory.with_name(f"{TOPIC}-{p}") for p in range(partitions)]
        while min(len(list(d.glob("*.log"))) for d in directories) <= segments:
            for n in range(chunk * partitions):
                while True:
                    try:
                        producer.produce(TOPIC, values[produced % len(values)], partition=n // chunk, on_delivery=lambda err, _m: err and errors.append(err))
                        break
                    except BufferError:
                        producer.poll(0.05)
                produced += 1
            if producer.flush(120) != 0 or errors:
                raise RuntimeError(f"producing to {TOPIC}: {errors[:3] or 'not delivered within 120 s'}")
    finally:
        producer.purge()
        producer.flush(0)
        del producer
    for d in directories:
        rotated = len(list(d.glob("*.log"))) - 1
        if rotated != segments:
            raise RuntimeError(f"{d} holds {rotated} rotated segments, {segments} were asked")
    return produced


def produce_and_upload(kafka: Any, redis_url: str, s3: Any, bucket: str, segments: int, segment_mib: int, value_bytes: int, prefix: str = "") -> tuple[str, Any]:
    """``TOPIC``-0 produced to ``kafka`` (:func:`produce_partition`) and its rotated segments uploaded from Kafka's
    log.dir and registered by the agent (in-process, static leadership, key ``prefix``) under a fresh cluster
    name; (that name, the registry's ``partition_info``)."""
    from bench_agent import agent_upload, settings_for

    from tiered_kafka.registry import Registry

    print(f"producing {segments} segments of ~{segment_mib} MiB to Kafka ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    produced = produce_partition(kafka.bootstrap_servers, kafka.log_dir / f"{TOPIC}-0", segments, segment_mib * MIB, value_bytes)
    print(f"  {produced:,} records in {time.perf_counter() - started:.1f} s; uploading the rotated segments with the agent ...", file=sys.stderr, flush=True)
    cluster = f"bench-{uuid.uuid4().hex[:8]}"
    registry = Registry(redis.Redis.from_url(redis_url), cluster)
    agent_upload(settings_for(kafka.log_dir, redis_url, s3, bucket, cluster, 2, prefix), registry, segments)
    info = registry.partition_info(TOPIC, 0)
    if info is None or info.segment_count != segments:
        raise SystemExit("the agent did not register every segment")
    return cluster, info


@contextlib.contextmanager
def uploaded_partition(segments: int, segment_mib: int, bucket_name: str, value_bytes: int = 1024) -> Iterator[ServedPartition]:
    """The stack every reader benchmark reads from, each part in its own process: Redis, SeaweedFS and
    Apache Kafka (one KRaft node, ``KafkaServer``, 1 GiB of heap); one partition of ``TOPIC`` produced to
    Kafka (:func:`produce_partition`: ``segments`` rotated segments of ~``segment_mib`` MiB, records of
    ``value_bytes``), whose rotated segments the agent uploads from Kafka's log.dir and registers; the
    gateway (uvicorn). Everything stops, then the directory goes, on exit."""
    sys.path.insert(0, str(HERE))
    from bench_gateway import gateway  # noqa: E402

    from tiered_kafka_dev.services import KafkaServer, RedisServer, S3Server

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:  # services stop before their directory goes
        print(f"starting Redis, SeaweedFS and Kafka ({value_bytes} B records) ...", file=sys.stderr, flush=True)
        redis_server = stack.enter_context(RedisServer())
        s3 = stack.enter_context(S3Server())
        kafka = stack.enter_context(KafkaServer(log_dir=Path(tmp) / "kafka-logs", heap="1g"))
        bucket = s3.create_bucket(bucket_name)
        cluster, info = produce_and_upload(kafka, redis_server.url, s3, bucket, segments, segment_mib, value_bytes)
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"clusters": {cluster: {"redis_url": redis_server.url, "s3": {
            "bucket": bucket, "prefix": "", "entropy_bits": 0, "endpoint_url": s3.endpoint_url,
            "access_key_id": s3.access_key, "secret_access_key": s3.secret_key, "region": s3.region}}}}))
        port = stack.enter_context(gateway(config, 1))
        weed_pid = s3._proc.pid  # noqa: SLF001 (SeaweedFS's CPU share is part of the story on one machine)
        if kafka.pid is None:
            raise RuntimeError("Kafka is not running")
        yield ServedPartition(f"http://127.0.0.1:{port}", cluster, info.latest_offset, info.total_bytes, kafka.bootstrap_servers, weed_pid, kafka.pid)


def measure_round(results: list[dict[str, Any]], served: ServedPartition, script: str, kind: str, *args: Any) -> None:
    """Reader ``kind`` of ``script`` in its own process (:func:`run_script_child`), its result appended to
    ``results`` with the CPU-seconds SeaweedFS (``s3_cpu_s``) and Kafka's JVM (``kafka_cpu_s``) used meanwhile."""
    weed_before, kafka_before = process_cpu_s(served.weed_pid), process_cpu_s(served.kafka_pid)
    results.append(run_script_child(script, kind, *args))
    results[-1]["s3_cpu_s"] = process_cpu_s(served.weed_pid) - weed_before
    results[-1]["kafka_cpu_s"] = process_cpu_s(served.kafka_pid) - kafka_before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prefetch-mib", type=int, default=DEFAULT_PREFETCH_MAX_BYTES // MIB, help="tiered.prefetch.max.bytes in MiB (default: the SDK's)")
    parser.add_argument("--parallelism", type=int, default=4, help="tiered.prefetch.parallelism")
    parser.add_argument("--value-bytes", type=int, default=1024, help="record value size (1024 and 100 are the issue's two cases)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("child_args", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        readers = {"sdk": child_sdk, "confluent": child_confluent, "raw": child_raw_get, "curl": child_curl}
        print(json.dumps(readers[args.child](*json.loads(args.child_args))))
        return

    with uploaded_partition(args.segments, args.segment_mib, "bench-sdk", args.value_bytes) as served:
        gateway_url, cluster, last, segment_bytes, bootstrap = served.gateway_url, served.cluster, served.last, served.segment_bytes, served.bootstrap
        print(f"reading offsets 0..{last} ({segment_bytes / MIB:.0f} MiB) in {args.rounds} rounds ...", file=sys.stderr, flush=True)
        sdk: list[dict[str, Any]] = []
        kafka: list[dict[str, Any]] = []
        raw: list[dict[str, Any]] = []
        curl: list[dict[str, Any]] = []
        for round_ in range(args.rounds):
            for results, kind, child_args in ((sdk, "sdk", (gateway_url, cluster, last, args.prefetch_mib * MIB, args.parallelism)), (kafka, "confluent", (bootstrap, last)),
                                              (raw, "raw", (gateway_url, cluster, last)), (curl, "curl", (gateway_url, cluster, last))):
                measure_round(results, served, __file__, kind, *child_args)
            print(f"  round {round_ + 1}: sdk peak RSS growth {(sdk[-1]['rss_peak'] - sdk[-1]['rss_before']) / MIB:.1f} MiB, budget peak {sdk[-1]['budget_peak'] / MIB:.1f} MiB", file=sys.stderr)
            print(f"  round {round_ + 1}: sdk {sdk[-1]['elapsed']:.2f} s, confluent {kafka[-1]['elapsed']:.2f} s (Kafka {kafka[-1]['kafka_cpu_s']:.2f} CPU-s), raw GET {raw[-1]['elapsed']:.2f} s", file=sys.stderr, flush=True)
        for r in raw:
            assert r["bytes"] == segment_bytes, (r["bytes"], segment_bytes)
        best_sdk = min(sdk, key=lambda r: r["elapsed"])
        best_kafka = min(kafka, key=lambda r: r["elapsed"])
        best_raw = min(raw, key=lambda r: r["elapsed"])
        best_curl = min(curl, key=lambda r: r["elapsed"])
        records = last + 1
        sdk_rps, kafka_rps = records / best_sdk["elapsed"], records / best_kafka["elapsed"]
        sdk_mbs, raw_mbs = segment_bytes / MIB / best_sdk["elapsed"], segment_bytes / MIB / best_raw["elapsed"]
        rss_growth = max(r["rss_peak"] - r["rss_before"] for r in sdk)
        budget = args.prefetch_mib * MIB
        print(f"\n{records:,} records of {args.value_bytes} B, {segment_bytes / MIB:.1f} MiB in {args.segments} segments; best of {args.rounds} rounds\n")
        print(f"{'figure':<34} {'measured':>14} {'reference':>14} {'ratio':>7}  goal")
        rows = [
            ("records/s: SDK vs confluent-kafka", sdk_rps, kafka_rps, sdk_rps / kafka_rps, 1.0),
            ("MB/s: SDK vs raw presigned GET", sdk_mbs, raw_mbs, sdk_mbs / raw_mbs, 0.7),
        ]
        for name, measured, reference, ratio, goal in rows:
            print(f"{name:<34} {measured:>14,.1f} {reference:>14,.1f} {ratio:>7.3f}  >= {goal}  {'ok' if ratio >= goal else 'MISSED'}")
        sdk_cpu_us, kafka_cpu_us = best_sdk["cpu_s"] / records * 1e6, best_kafka["cpu_s"] / records * 1e6
        cpu_ratio = sdk_cpu_us / kafka_cpu_us
        print(f"{'CPU µs/record: SDK vs confluent':<34} {sdk_cpu_us:>14,.3f} {kafka_cpu_us:>14,.3f} {cpu_ratio:>7.3f}  <= 1.0  {'ok' if cpu_ratio <= 1.0 else 'MISSED'}")
        # the receive alone (the GETs, not the plans between them: curl's ranges were planned before it started)
        raw_gb, curl_gb = min(r["receive_cpu_s"] for r in raw) / (segment_bytes / 1e9), min(r["cpu_s"] for r in curl) / (segment_bytes / 1e9)
        print(f"{'CPU s/GB: raw receive vs curl':<34} {raw_gb:>14,.3f} {curl_gb:>14,.3f} {raw_gb / curl_gb:>7.3f}  <= 1.2  {'ok' if raw_gb <= 1.2 * curl_gb else 'MISSED'}")
        print(f"{'CPU seconds of the best runs':<34} {'reader':>8} {'SeaweedFS':>10} {'Kafka':>6} {'wall':>6}")
        for name, r in (("SDK", best_sdk), ("confluent-kafka reading Kafka", best_kafka), ("raw presigned GET (SDK receive)", best_raw), ("curl to /dev/null", best_curl)):
            print(f"  {name:<32} {r['cpu_s']:>8.2f} {r['s3_cpu_s']:>10.2f} {r['kafka_cpu_s']:>6.2f} {r['elapsed']:>6.2f}")
        print(f"{'peak RSS growth vs prefetch budget':<34} {rss_growth / MIB:>12.1f} Mi {budget / MIB:>12.1f} Mi {rss_growth / budget:>7.3f}  <= 1.0  {'ok' if rss_growth <= budget else 'MISSED'}")


if __name__ == "__main__":
    main()
