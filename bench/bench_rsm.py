"""KIP-405 RSM benchmark (issue 18): MB/s reading a *compressed* RSM segment through the SDK ÷ reading
the same segment uploaded by our agent, in the same run.

    .venv/bin/python bench/bench_rsm.py [--segments 4] [--segment-mib 16] [--rounds 5] [--chunk-mib 4] [--max-mib 8]

Set-up (dev services: SeaweedFS, Redis; one partition of ``bench`` written with the format core's log.dir
writer, ``--segments`` rotated segments of ``--segment-mib``, batches of 64 records of 1 KiB: half random,
half text, so zstd gets about 2x, as ``bench_agent.batch`` builds them), the same rotated segments stored
twice:

* **agent**: uploaded and registered by our agent (``bench_agent.agent_upload``: registry entries with
  batch indexes and sparse plan indexes, byte-identical objects), served by a normal agent cluster: plans
  from memory, presigned ranges of the ``.log``;
* **rsm**: laid out as Aiven's RemoteStorageManager writes them (``tests/support/rsm_writer``) with
  compression on: one zstd frame per ``--chunk-mib`` chunk of original bytes (4 MiB, the size the RSM's
  documentation suggests) and a variable chunk index; served by a ``kip405`` cluster (listing discovery),
  planned from the offset index in ``.indexes`` and batch headers, chunk-aligned presigned ranges
  decompressed by the client (``remote_read.fetch_range``).

One gateway process serves both. Each read runs in a child process of its own: ``GatewayClient.plan``
+ ``remote_read.fetch_range`` + ``remote_read.decode_range`` over every remote offset (the path of
TieredConsumer, bulk and Spark), every record decoded and its offset checked. Rounds alternate the two
(round 0 warms both gateways' caches and is not counted); the best round of each counts.

Printed: MB/s of original segment bytes (**rsm ÷ agent** is the issue's figure), the reader's
CPU-seconds beside its wall time, the gateway's CPU-seconds over the read, and the bytes fetched
(compressed chunks for rsm; a chunk shared by two plans is fetched by both).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_sdk import MIB, TOPIC, process_cpu_s, run_script_child  # noqa: E402

RECORDS_PER_BATCH = 64
VALUE_BYTES = 1024


def child_read(gateway_url: str, cluster: str, last: int, max_bytes: int) -> dict[str, Any]:
    from tiered_kafka.client.gateway import GatewayClient, coalesce_ranges
    from tiered_kafka.client.remote_read import decode_range, fetch_range

    with GatewayClient(gateway_url, cluster) as client:
        start, cpu_start = time.perf_counter(), time.process_time()
        offset, expected, original, fetched = 0, 0, 0, 0
        while offset <= last:
            plan = client.plan(TOPIC, 0, offset, max_bytes)
            for planned in coalesce_ranges(plan.ranges, max_bytes):
                data = fetch_range(client, TOPIC, 0, planned)
                original += len(data)
                fetched += planned.size if planned.transformed is None else planned.transformed.fetch_end - planned.transformed.fetch_start
                for batch in decode_range(data, planned, object_key=plan.object_key):
                    for record in batch.records:
                        if record.offset < offset:
                            continue
                        if record.offset != expected:
                            raise RuntimeError(f"{cluster}: offset {record.offset} where {expected} was expected")
                        expected += 1
            offset = plan.next_offset
        elapsed, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    if expected != last + 1:
        raise RuntimeError(f"{cluster}: read {expected} records, expected {last + 1}")
    return {"records": expected, "elapsed": elapsed, "cpu_s": cpu_s, "original": original, "fetched": fetched}


def write_segments(directory: Path, segments: int, segment_bytes: int) -> Any:
    """``segments`` rotated segments of about ``segment_bytes`` plus an active one, each batch built
    afresh (``bench_agent.batch``), so no two batches repeat (a repeated batch would let zstd's window
    compress far better than real data does)."""
    from bench_agent import batch  # noqa: E402

    from tiered_kafka_dev.kafka_log.log_config import LogConfig
    from tiered_kafka_dev.kafka_log.log_writer import PartitionLog

    plog = PartitionLog.create(directory, LogConfig(segment_bytes=segment_bytes, retention_ms=-1))
    while len(plog.segment_base_offsets()) <= segments:
        plog.append(batch(RECORDS_PER_BATCH, int(time.time() * 1000), VALUE_BYTES))
    return plog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk-mib", type=int, default=4, help="the RSM's chunk.size, in MiB of original bytes")
    parser.add_argument("--max-mib", type=int, default=8, help="max_bytes of each plan")
    parser.add_argument("--child")
    parser.add_argument("args", nargs="?")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child_read(*json.loads(args.args))))
        return

    import redis
    from bench_agent import agent_upload, settings_for  # noqa: E402

    from tests.support.gateway_process import GatewayProcess
    from tests.support.rsm_writer import random_uuid, write_rsm_segment
    from tiered_kafka.registry import Registry
    from tiered_kafka_dev.services import RedisServer, S3Server
    from tiered_kafka_gateway.config import load_settings

    with tempfile.TemporaryDirectory(prefix="bench-rsm-") as tmp, S3Server() as s3, RedisServer() as redis_server:
        agent_bucket, rsm_bucket = s3.create_bucket("bench-agent"), s3.create_bucket("bench-rsm")
        log_dir = Path(tmp) / "logs"
        print(f"writing {args.segments} segments of ~{args.segment_mib} MiB; the agent uploads them, the RSM writer lays them out ...", file=sys.stderr, flush=True)
        plog = write_segments(log_dir / f"{TOPIC}-0", args.segments, args.segment_mib * MIB)
        plog.close()
        from tiered_kafka_dev.kafka_log.high_watermarks import checkpoint_high_watermarks

        checkpoint_high_watermarks(log_dir)  # as a broker would: the agent uploads only up to the high watermark
        cluster = f"bench-{uuid.uuid4().hex[:8]}"
        registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
        agent_upload(settings_for(log_dir, redis_server.url, s3, agent_bucket, cluster, 2), registry, args.segments)
        info = registry.partition_info(TOPIC, 0)
        entries = registry.segments(TOPIC, 0)
        if info is None or info.segment_count != args.segments or not all("batchindex" in e.files for e in entries):
            raise SystemExit("the agent did not register every segment with its batch index")
        last, size = info.latest_offset, info.total_bytes
        client, topic_id, stored = s3.client(), random_uuid(), 0
        for entry in entries:
            key = write_rsm_segment(client, rsm_bucket, prefix="rsm/", topic=TOPIC, topic_id=topic_id, partition=0,
                                    segment_dir_or_files=log_dir / f"{TOPIC}-0" / f"{entry.base_offset:020d}.log",
                                    chunk_size=args.chunk_mib * MIB, compression=True)
            stored += client.head_object(Bucket=rsm_bucket, Key=key.object_key("log"))["ContentLength"]
        s3_keys = {"endpoint_url": s3.endpoint_url, "region": s3.region, "access_key_id": s3.access_key, "secret_access_key": s3.secret_key}
        settings = load_settings(clusters={
            cluster: {"redis_url": redis_server.url, "s3": {"bucket": agent_bucket, "prefix": "", "entropy_bits": 0, **s3_keys}},
            "rsm": {"kind": "kip405", "rsm": {"bucket": rsm_bucket, "key_prefix": "rsm/", **s3_keys}},
        }, max_bytes_limit=64 * MIB, range_bytes=args.max_mib * MIB)
        gateway = GatewayProcess(settings)
        try:
            gateway.wait_ready()
            best: dict[str, dict[str, Any]] = {}
            for round_ in range(args.rounds + 1):  # round 0 warms the caches of both (registry, plans, headers, chunk indexes)
                for name in (("agent", "rsm") if round_ % 2 else ("rsm", "agent")):
                    gateway_cpu = process_cpu_s(gateway.pid)
                    result = run_script_child(__file__, name, gateway.url, cluster if name == "agent" else "rsm", last, args.max_mib * MIB)
                    result["gateway_cpu_s"] = process_cpu_s(gateway.pid) - gateway_cpu
                    if round_ and (name not in best or result["elapsed"] < best[name]["elapsed"]):
                        best[name] = result
        finally:
            gateway.stop()

    print(f"bench_rsm: {args.segments} segment(s), {size / MIB:.2f} MiB, {last + 1} records ({RECORDS_PER_BATCH} x {VALUE_BYTES} B per batch); "
          f"rsm .log objects {stored / MIB:.2f} MiB (zstd, {args.chunk_mib} MiB chunks); plans of {args.max_mib} MiB; best of {args.rounds} rounds")
    print(f"{'reader':<6} {'MB/s':>8} {'wall s':>8} {'CPU s':>8} {'gateway CPU s':>14} {'fetched MiB':>12}")
    for name in ("agent", "rsm"):
        r = best[name]
        print(f"{name:<6} {r['original'] / 1e6 / r['elapsed']:>8.1f} {r['elapsed']:>8.3f} {r['cpu_s']:>8.3f} {r['gateway_cpu_s']:>14.3f} {r['fetched'] / MIB:>12.2f}")
    ratio = (best["rsm"]["original"] / best["rsm"]["elapsed"]) / (best["agent"]["original"] / best["agent"]["elapsed"])
    print(f"ratio rsm/agent MB/s: {ratio:.2f}   reader CPU s rsm/agent: {best['rsm']['cpu_s'] / best['agent']['cpu_s']:.2f}")


if __name__ == "__main__":
    main()
