"""SDK benchmark: TieredConsumer (REMOTE_ONLY) beside confluent-kafka and beside raw presigned GETs.

    .venv/bin/python bench/bench_sdk.py [--segments 4] [--segment-mib 32] [--rounds 3] [--prefetch-mib 128]

Set-up: Redis and SeaweedFS (the tests' launchers); one partition written with the format core's
log.dir writer (16-record batches of 1 KiB records, uncompressed, as ``bench_agent.py``), uploaded
and registered by the agent; then, each in its own process so that none competes for the GIL of
another: the gateway (uvicorn), the development broker serving the same log.dir, and each
measured reader. Every figure reads the same records: offsets 0..L, the partition's rotated
segments (what remote storage holds). Rounds alternate the readers; the best round of each counts.

1. **records/s**: ``TieredConsumer`` in REMOTE_ONLY (``consume(1000)``, no Kafka at all) beside a
   plain ``confluent_kafka.Consumer`` fetching the same offsets from the development broker.
   Goal: ratio >= 1.0. And the **reader's CPU per record** (``time.process_time``: every thread of
   the reading process, user and system, over the read) in the same runs: SDK ÷ confluent-kafka,
   goal <= 1.5 (#14). The runs compared are the best (fastest) round of each.
2. **MB/s**: the same run's segment bytes over its time, beside a raw presigned GET of the same
   bytes: plan the partition in order (8 MiB plans) and GET every range, one keep-alive
   connection (httpx), no decoding. Goal: ratio >= 0.7.
CPU seconds (the reader's own, during the read; SeaweedFS's over the same run) are printed too:
on one 2-CPU machine the S3 server competes with the reader, which the broker-side reference
does not pay for in the same way.
3. **peak RSS**: the SDK process's peak resident memory (``ru_maxrss``) above what it used before
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
from typing import Any

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
    import httpx

    from tiered_kafka.gateway_client import GatewayClient

    client = GatewayClient(gateway_url, cluster)
    start = time.perf_counter()
    cpu_start = time.process_time()
    total, offset = 0, 0
    with httpx.Client(timeout=30) as s3:
        while offset <= last:
            plan = client.plan(TOPIC, 0, offset, 8 * MIB)
            for r in plan.ranges:
                total += len(s3.get(r.url, headers={"Range": r.range_header}).content)
            offset = plan.next_offset
    elapsed = time.perf_counter() - start
    cpu_s = time.process_time() - cpu_start
    client.close()
    return {"bytes": total, "elapsed": elapsed, "cpu_s": cpu_s}


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


def run_child(kind: str, *args: Any) -> dict[str, Any]:
    return run_script_child(__file__, kind, *args)


def run_script_child(script: str, kind: str, *args: Any) -> dict[str, Any]:
    """Run reader ``kind`` of the benchmark ``script`` (its ``--child`` mode) in a process of its own,
    so each reader's CPU is its own; its JSON result (shared by bench_bulk and bench_txn)."""
    out = subprocess.run([sys.executable, script, "--child", kind, json.dumps(args)], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} reader failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- set-up ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def dev_broker(log_dir: Path) -> Any:
    """The development broker on ``log_dir`` in its own process; yields bootstrap.servers."""
    output = log_dir.parent / "broker.out"
    with output.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "tiered_kafka_dev.broker", "--log-dir", str(log_dir), "--port", "0"], stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "bootstrap.servers=" not in output.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the development broker did not start: {output.read_text()[-2000:]}")
            time.sleep(0.1)
        yield output.read_text().split("bootstrap.servers=")[1].split()[0]
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def uploaded_partition(segments: int, segment_mib: int, bucket_name: str, value_bytes: int = 1024) -> Iterator[tuple[str, str, int, int, str, int]]:
    """The stack every reader benchmark reads from, each part in its own process: Redis and SeaweedFS,
    one partition of ``TOPIC`` written with the format core's log.dir writer (``segments`` rotated
    segments of ~``segment_mib`` MiB, records of ``value_bytes``), uploaded and registered by the
    agent, the gateway (uvicorn) and the development broker serving the same log.dir. Yields
    (gateway URL, cluster, last remote offset, remote bytes, bootstrap.servers, SeaweedFS's pid);
    everything stops, then the directory goes, on exit."""
    sys.path.insert(0, str(HERE))
    from bench_agent import agent_upload, settings_for, write_partition  # noqa: E402
    from bench_gateway import gateway  # noqa: E402

    from tiered_kafka.registry import Registry
    from tiered_kafka_dev.broker.storage import TOPICS_FILE
    from tiered_kafka_dev.services import RedisServer, S3Server

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:  # services stop before their directory goes
        print(f"starting Redis and SeaweedFS ({value_bytes} B records) ...", file=sys.stderr, flush=True)
        redis_server = stack.enter_context(RedisServer())
        s3 = stack.enter_context(S3Server())
        bucket = s3.create_bucket(bucket_name)
        log_dir = Path(tmp) / "logs"
        print(f"writing {segments} segments of ~{segment_mib} MiB and uploading them with the agent ...", file=sys.stderr, flush=True)
        write_partition(log_dir / f"{TOPIC}-0", segments, segment_mib * MIB, value_bytes).close()
        # the development broker serves the topics its topic list names (it loads their logs from log.dir)
        (log_dir / TOPICS_FILE).write_text(json.dumps({"topics": [{"name": TOPIC, "topic_id": str(uuid.uuid4()), "partitions": 1, "configs": {}}]}))
        cluster = f"bench-{uuid.uuid4().hex[:8]}"
        registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
        agent_upload(settings_for(log_dir, redis_server.url, s3, bucket, cluster, 2), registry, segments)
        info = registry.partition_info(TOPIC, 0)
        if info is None or info.segment_count != segments:
            raise SystemExit("the agent did not register every segment")
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"clusters": {cluster: {"redis_url": redis_server.url, "s3": {
            "bucket": bucket, "prefix": "", "entropy_bits": 0, "endpoint_url": s3.endpoint_url,
            "access_key_id": s3.access_key, "secret_access_key": s3.secret_key, "region": s3.region}}}}))
        port = stack.enter_context(gateway(config, 1))
        bootstrap = stack.enter_context(dev_broker(log_dir))
        weed_pid = s3._proc.pid  # noqa: SLF001 (SeaweedFS's CPU share is part of the story on one machine)
        yield f"http://127.0.0.1:{port}", cluster, info.latest_offset, info.total_bytes, bootstrap, weed_pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prefetch-mib", type=int, default=DEFAULT_PREFETCH_MAX_BYTES // MIB, help="tiered.prefetch.max.bytes in MiB (default: the SDK's)")
    parser.add_argument("--parallelism", type=int, default=4, help="tiered.prefetch.parallelism")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("child_args", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        readers = {"sdk": child_sdk, "confluent": child_confluent, "raw": child_raw_get}
        print(json.dumps(readers[args.child](*json.loads(args.child_args))))
        return

    with uploaded_partition(args.segments, args.segment_mib, "bench-sdk") as served:
        gateway_url, cluster, last, segment_bytes, bootstrap, weed_pid = served
        print(f"reading offsets 0..{last} ({segment_bytes / MIB:.0f} MiB) in {args.rounds} rounds ...", file=sys.stderr, flush=True)
        sdk, kafka, raw = [], [], []
        for round_ in range(args.rounds):
            for results, kind, child_args in ((sdk, "sdk", (gateway_url, cluster, last, args.prefetch_mib * MIB, args.parallelism)), (kafka, "confluent", (bootstrap, last)), (raw, "raw", (gateway_url, cluster, last))):
                weed_before = process_cpu_s(weed_pid)
                results.append(run_child(kind, *child_args))
                results[-1]["s3_cpu_s"] = process_cpu_s(weed_pid) - weed_before
            print(f"  round {round_ + 1}: sdk peak RSS growth {(sdk[-1]['rss_peak'] - sdk[-1]['rss_before']) / MIB:.1f} MiB, budget peak {sdk[-1]['budget_peak'] / MIB:.1f} MiB", file=sys.stderr)
            print(f"  round {round_ + 1}: sdk {sdk[-1]['elapsed']:.2f} s, confluent {kafka[-1]['elapsed']:.2f} s, raw GET {raw[-1]['elapsed']:.2f} s", file=sys.stderr, flush=True)
        for r in raw:
            assert r["bytes"] == segment_bytes, (r["bytes"], segment_bytes)
        best_sdk = min(sdk, key=lambda r: r["elapsed"])
        best_kafka = min(kafka, key=lambda r: r["elapsed"])
        best_raw = min(raw, key=lambda r: r["elapsed"])
        records = last + 1
        sdk_rps, kafka_rps = records / best_sdk["elapsed"], records / best_kafka["elapsed"]
        sdk_mbs, raw_mbs = segment_bytes / MIB / best_sdk["elapsed"], segment_bytes / MIB / best_raw["elapsed"]
        rss_growth = max(r["rss_peak"] - r["rss_before"] for r in sdk)
        budget = args.prefetch_mib * MIB
        print(f"\n{records:,} records of 1 KiB, {segment_bytes / MIB:.1f} MiB in {args.segments} segments; best of {args.rounds} rounds\n")
        print(f"{'figure':<34} {'measured':>14} {'reference':>14} {'ratio':>7}  goal")
        rows = [
            ("records/s: SDK vs confluent-kafka", sdk_rps, kafka_rps, sdk_rps / kafka_rps, 1.0),
            ("MB/s: SDK vs raw presigned GET", sdk_mbs, raw_mbs, sdk_mbs / raw_mbs, 0.7),
        ]
        for name, measured, reference, ratio, goal in rows:
            print(f"{name:<34} {measured:>14,.1f} {reference:>14,.1f} {ratio:>7.3f}  >= {goal}  {'ok' if ratio >= goal else 'MISSED'}")
        sdk_cpu_us, kafka_cpu_us = best_sdk["cpu_s"] / records * 1e6, best_kafka["cpu_s"] / records * 1e6
        cpu_ratio = sdk_cpu_us / kafka_cpu_us
        print(f"{'CPU µs/record: SDK vs confluent':<34} {sdk_cpu_us:>14,.3f} {kafka_cpu_us:>14,.3f} {cpu_ratio:>7.3f}  <= 1.5  {'ok' if cpu_ratio <= 1.5 else 'MISSED'}")
        print(f"{'CPU seconds of the best runs':<34} {'reader':>8} {'SeaweedFS':>10} {'wall':>6}")
        for name, r in (("SDK", best_sdk), ("confluent-kafka (broker not counted)", best_kafka), ("raw presigned GET", best_raw)):
            print(f"  {name:<32} {r['cpu_s']:>8.2f} {r['s3_cpu_s']:>10.2f} {r['elapsed']:>6.2f}")
        print(f"{'peak RSS growth vs prefetch budget':<34} {rss_growth / MIB:>12.1f} Mi {budget / MIB:>12.1f} Mi {rss_growth / budget:>7.3f}  <= 1.0  {'ok' if rss_growth <= budget else 'MISSED'}")


if __name__ == "__main__":
    main()
