"""Plans from memory: S3 GETs per GB and cold/warm plan latency, with the batch and sparse indexes beside today's path.

    .venv/bin/python bench/bench_plans.py [--segments 4] [--segment-mib 32] [--trials 40]

It starts Redis and SeaweedFS (the tests' launchers), writes a partition with the format core's
log.dir writer (16-record batches of 1 KiB records, as ``bench_agent.py``), has the agent upload
it (a batch index per segment, whose sparse digest the gateway derives and caches), and plans through the
gateway's ``ClusterReader`` in this process. The reference is the same reader with both indexes
ignored (``HeaderPath``: the ``.index`` and 64 KiB batch-header windows, as for old uploads). In one run:

1. **S3 GETs per GB read sequentially through plans, cold caches**, gateway plus client: plan
   through the whole partition (``next_offset`` = the last range's last offset + 1) and fetch
   the ranges through their presigned URLs (urllib, as a client anywhere). Plans are asked as
   ``GatewayClient.plan`` asks them (``range_bytes`` = ``max_bytes``: the fewest ranges the
   batches allow) and their ranges merged as the SDK does (``gateway_client.coalesce_ranges``).
   Gateway GETs come from the reader's own counters (``s3_gets``, by kind in ``s3_gets_by_kind``,
   background loads included), client GETs are the merged ranges fetched; the bytes fetched must
   equal the registered segments' bytes. Rows: the SDK's default plan size
   (``tiered_kafka.consumer.prefetch.default_plan_bytes``: sized by the default prefetch budget),
   8 MiB plans, and 64 MiB plans (the gateway's default ``max_bytes_limit``, the largest budget-sized
   plan). Wall and CPU seconds of this process (gateway and client both run in it) beside each.
2. **Cold ÷ warm plan latency**, p50 and p99, per trial with a fresh reader holding the
   partition's registry entries as a running gateway would (the registry lookup is the same for
   cold and warm plans) and its connections open: the first plan of a segment (cold) and, once
   any background load has landed, a second plan at another offset of it (warm). Beside them the
   fully cold figure: a fresh reader (connections open, nothing cached), its first plan
   including the registry read.
3. **Index sizes ÷ segment size** for these 1 KiB records: the batch index object, and the
   sparse plan index derived from it (bytes, and per GiB of segment).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
TOPIC = "bench"
HERE = Path(__file__).resolve().parent
SDK_CONFIG = {"bootstrap.servers": "unused:9092", "group.id": "bench", "tiered.gateway.url": "http://unused", "tiered.cluster": "bench"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def read_through_plans(reader: Any, earliest: int, latest: int, max_bytes: int) -> tuple[int, int, int]:
    """(plans, client range GETs after coalescing, bytes) reading the partition in order through presigned URLs."""
    from tiered_kafka.client.gateway import PlannedRange, coalesce_ranges

    plans = gets = total = 0
    offset = earliest
    while offset <= latest:
        plan = reader.plan(TOPIC, 0, offset, max_bytes, range_bytes=max_bytes)  # as GatewayClient.plan asks by default
        plans += 1
        planned = [PlannedRange(r.start, r.end, r.first_offset, r.last_offset, url, r.http_range) for r, url in zip(plan.ranges, plan.urls, strict=True)]
        for r in coalesce_ranges(planned, max_bytes):
            data = urllib.request.urlopen(urllib.request.Request(r.url, headers={"Range": r.range_header}), timeout=30).read()
            if len(data) != r.end - r.start:
                raise RuntimeError(f"range {r.range_header} of {plan.segment.object_key}: {len(data)} bytes, expected {r.end - r.start}")
            gets += 1
            total += len(data)
        offset = plan.ranges[-1].last_offset + 1
    reader.wait_for_background_loads()
    return plans, gets, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()

    sys.path.insert(0, str(HERE))
    from bench_agent import upload_partition  # noqa: E402  (the same partition writer and agent set-up)
    from bench_gateway import gateway_cluster  # noqa: E402  (the same gateway configuration)

    from tiered_kafka.consumer.prefetch import default_plan_bytes
    from tiered_kafka.format.batch_index import BatchIndex
    from tiered_kafka.format.segment_names import FileKind
    from tiered_kafka.format.sparse_index import SparseIndex
    from tiered_kafka_gateway.config import load_settings
    from tiered_kafka_gateway.remote import ClusterReader

    class HeaderPath(ClusterReader):
        """The reference: the path of old uploads (batch and sparse indexes ignored)."""

        def batch_index(self, segment: Any) -> None:
            return None

        def sparse_index(self, segment: Any) -> None:
            return None

    sdk_plan_bytes = default_plan_bytes(SDK_CONFIG)
    sizes = {"SDK default": sdk_plan_bytes, "8 MiB plans": 8 * MIB, "64 MiB plans": 64 * MIB}

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:  # services stop before their directory goes
        up = upload_partition(stack, Path(tmp), args.segments, args.segment_mib)
        cluster, s3, bucket = up.cluster, up.s3, up.bucket
        entries = up.registry.segments(TOPIC, 0)
        info = up.registry.partition_info(TOPIC, 0)
        assert info is not None and len(entries) == args.segments, (info, len(entries))
        assert all(FileKind.BATCHINDEX.value in e.files for e in entries), "the agent uploaded no batch index"
        segment_bytes = sum(e.size for e in entries)
        client = s3.client()
        batch_indexes = [client.get_object(Bucket=bucket, Key=e.object_key[: -len("log")] + "batchindex")["Body"].read() for e in entries]
        index_bytes = sum(len(b) for b in batch_indexes)
        # the sparse digest the gateway derives from each batch index and caches (registry layout 2 stores none)
        sparse_bytes = sum(len(SparseIndex.from_batch_index(BatchIndex.from_bytes(b)).to_bytes()) for b in batch_indexes)
        gateway = load_settings(clusters={cluster: gateway_cluster(up.redis.url, s3, bucket, up.agent)})
        cluster_settings = gateway.clusters[cluster]
        readers = {"batch index": ClusterReader, "headers (reference)": HeaderPath}

        # 1. GETs per GB, cold caches
        gets: dict[tuple[str, int], tuple[int, int, int, int, float, float, dict[str, int]]] = {}
        for plan_bytes in sizes.values():
            for name, kind in readers.items():
                print(f"reading through {plan_bytes / MIB:.1f} MiB plans, {name} ...", file=sys.stderr, flush=True)
                reader = kind.connect(cluster, cluster_settings, gateway)
                wall, cpu = time.perf_counter(), time.process_time()
                plans, client_gets, read_bytes = read_through_plans(reader, info.earliest_offset, info.latest_offset, plan_bytes)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if read_bytes != segment_bytes:
                    raise SystemExit(f"read {read_bytes} bytes through plans, but the registered segments hold {segment_bytes}")
                gets[(name, plan_bytes)] = (reader.s3_gets, client_gets, plans, read_bytes, wall, cpu, dict(reader.s3_gets_by_kind))

        # 2. cold and warm plan latency
        latency: dict[str, tuple[list[float], list[float], list[float]]] = {}
        rng = random.Random(7)
        for name, kind in readers.items():
            print(f"cold and warm plans, {name} ...", file=sys.stderr, flush=True)
            cold, warm, fully_cold = [], [], []
            for trial in range(args.trials):
                target = entries[trial % len(entries)]
                fresh = kind.connect(cluster, cluster_settings, gateway)
                fresh.redis.ping(), fresh.s3.head_bucket(Bucket=bucket)  # connections open, nothing cached
                offset = rng.randint(target.base_offset, target.last_offset)
                started = time.perf_counter()
                fresh.plan(TOPIC, 0, offset, sdk_plan_bytes, range_bytes=sdk_plan_bytes)
                fully_cold.append(time.perf_counter() - started)
                fresh.wait_for_background_loads()

                reader = kind.connect(cluster, cluster_settings, gateway)
                reader.redis.ping(), reader.s3.head_bucket(Bucket=bucket)
                for e in entries:  # the partition's registry entries, held as a running gateway holds them
                    reader.segment_for(TOPIC, 0, e.base_offset)
                for measured in (cold, warm):
                    offset = rng.randint(target.base_offset, target.last_offset)
                    started = time.perf_counter()
                    reader.plan(TOPIC, 0, offset, sdk_plan_bytes, range_bytes=sdk_plan_bytes)
                    measured.append(time.perf_counter() - started)
                    reader.wait_for_background_loads()
            latency[name] = (cold, warm, fully_cold)

    print(f"plan benchmark: {args.segments} segments of ~{args.segment_mib} MiB ({segment_bytes / 1e6:.0f} MB, offsets "
          f"{info.earliest_offset}..{info.latest_offset}), 16-record batches of 1 KiB records, gateway and client in one process")
    print("1. S3 GETs per GB read sequentially through plans, cold caches (gateway + client GETs after coalesce_ranges)")
    for label, plan_bytes in sizes.items():
        rows = {name: gets[(name, plan_bytes)] for name in readers}
        for name, (own, client_gets, plans, read_bytes, wall, cpu, kinds) in rows.items():
            gb = read_bytes / 1e9
            print(f"   {label} ({plan_bytes / MIB:.1f} MiB), {name:20}: {(own + client_gets) / gb:7.1f} GETs/GB = gateway {own / gb:6.1f} "
                  f"({own} GETs: {kinds}) + client {client_gets / gb:6.1f} ({client_gets}); {plans} plans; wall {wall:.2f} s, CPU {cpu:.2f} s")
        new, old = rows["batch index"], rows["headers (reference)"]
        ratio = (new[0] + new[1]) / (old[0] + old[1])
        print(f"   {label}: indexed / reference GETs = {ratio:.3f}   (goal <= 130 GETs/GB: "
              f"{'met' if (new[0] + new[1]) / (new[3] / 1e9) <= 130 else 'NOT met'}); CPU {new[5]:.2f} s vs {old[5]:.2f} s")
    print(f"   (SDK default plan size: tiered_kafka.consumer.prefetch.default_plan_bytes = {sdk_plan_bytes} bytes, from the default prefetch budget)")
    print(f"2. plan latency ({args.trials} trials, max_bytes {sdk_plan_bytes / MIB:.1f} MiB; cold = first plan of a segment, registry entries held)")
    for name, (cold, warm, fully_cold) in latency.items():
        c50, c99, w50, w99 = statistics.median(cold), percentile(cold, 0.99), statistics.median(warm), percentile(warm, 0.99)
        f50, f99 = statistics.median(fully_cold), percentile(fully_cold, 0.99)
        print(f"   {name:20}: cold p50 {c50 * 1000:.2f} ms p99 {c99 * 1000:.2f} ms; warm p50 {w50 * 1000:.2f} ms p99 {w99 * 1000:.2f} ms; "
              f"cold/warm p50 {c50 / w50:.2f}, p99 {c99 / w99:.2f}   (goal <= 2: {'met' if c50 / w50 <= 2 and c99 / w99 <= 2 else 'NOT met'})")
        print(f"   {'':20}  fully cold (fresh reader, registry read included): p50 {f50 * 1000:.2f} ms p99 {f99 * 1000:.2f} ms; "
              f"/ warm p50 {f50 / w50:.2f}, p99 {f99 / w99:.2f}")
    print(f"3. batch-index size / segment size: {index_bytes} / {segment_bytes} = {index_bytes / segment_bytes:.4%}   "
          f"(goal < 0.5%: {'met' if index_bytes / segment_bytes < 0.005 else 'NOT met'})")
    print(f"   sparse plan index (derived from the batch index, in the gateway's cache): {sparse_bytes} bytes for {segment_bytes} bytes = "
          f"{sparse_bytes / segment_bytes:.4%}, {sparse_bytes / segment_bytes * 2**30 / 1024:.1f} KiB per GiB of segment")


if __name__ == "__main__":
    main()
