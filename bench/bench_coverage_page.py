"""Coverage page benchmark: the paged cluster overview on 10,000 partitions, beside the JSON API for the same data.

    .venv/bin/python bench/bench_coverage_page.py [--topics 50] [--partitions 200] [--segments 3] [--rounds 5]

It starts Redis and SeaweedFS (the tests' launchers), registers ``--topics`` x ``--partitions``
partitions (default 10,000) of ``--segments`` segments each straight into the registry (the
agent's write; no segment bytes are needed to draw coverage), a recorded gap in every 25th
partition and a coverage start in each, then serves the gateway with uvicorn in this process
(a thread: CPU-seconds below are this process's, gateway and client together). No Kafka: with
``bootstrap_servers`` each partition shown adds one ListOffsets round trip through the gateway's
Kafka pool (``ui.data``), bounded by the page size as the registry reads are.

Measured, one keep-alive HTTP/1.1 connection, each the median of ``--rounds``:

1. **overview page 0** (``/ui/clusters/C``: the first ``OVERVIEW_PAGE_PARTITIONS`` partitions) beside
   its reference, the JSON a script would fetch for the same partitions: ``getPartition`` for each;
2. **topic page 0** (``/ui/clusters/C/topics/T``: ``TOPIC_PAGE_PARTITIONS`` bars) beside
   ``getPartition`` for the same partitions;
3. **every overview page** (the whole cluster, once) beside ``getPartition`` for every partition
   (once), and ``listTopics`` (the listing every page starts with).

Goal: a page in under 1 s at 10,000 partitions. The ratio page / JSON says what the page costs
beyond the registry reads the API makes anyway (it reads each partition's segments as well, and
renders); the last column says what bounds it (this process's CPU, or Redis's).
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1
GOAL_S = 1.0


def process_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def populate(registry: Any, topics: list[str], partitions: int, segments: int) -> int:
    """Every partition's segments, a gap in every 25th partition (after its segments), a coverage start."""
    from tiered_kafka.registry import SegmentEntry

    def one(topic: str, p: int) -> int:
        for i in range(segments):
            base = i * 1000
            registry.register(
                SegmentEntry(
                    topic=topic, partition=p, base_offset=base, last_offset=base + 999, object_key=f"bench/{topic}-{p}/{base:020d}.log",
                    size=1 << 20, record_count=1000, min_timestamp=1_700_000_000_000 + base, max_timestamp=1_700_000_000_999 + base,
                    checksum=f"crc32c:{i:08x}", leader_epoch=1, upload_time_ms=1_700_000_100_000, files=("log", "index", "timeindex"),
                )
            )  # fmt: skip
        registry.set_coverage_start(topic, p, 0)
        if p % 25 == 0:
            registry.record_gap(topic, p, segments * 1000, segments * 1000 + 499, "bench: segment deleted before upload")
        return segments

    with ThreadPoolExecutor(4) as pool:
        return sum(pool.map(lambda tp: one(*tp), [(t, p) for t in topics for p in range(partitions)]))


class Client:
    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path)
        response = self.conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"GET {path}: {response.status} {body[:300]!r}")
        return body


@dataclass
class Sample:
    """One measured call: median wall seconds, and CPU-seconds per call of this process, of Redis and
    SeaweedFS, and of every process of the machine (ours included)."""

    wall: float
    cpu: float
    redis_cpu: float
    s3_cpu: float
    machine_cpu: float

    @property
    def others_cpu(self) -> float:
        return max(0.0, self.machine_cpu - self.cpu - self.redis_cpu - self.s3_cpu)


def machine_cpu() -> float:
    """CPU-seconds every process of the machine has used (/proc/stat, all but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / TICK


def timed(call: Callable[[], Any], rounds: int, redis_pid: int, s3_pid: int) -> Sample:
    """The median wall seconds of ``rounds`` calls; CPU-seconds per call."""
    walls = []
    cpu, redis_cpu, s3_cpu, machine = time.process_time(), process_cpu(redis_pid), process_cpu(s3_pid), machine_cpu()
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
    return Sample(
        statistics.median(walls),
        (time.process_time() - cpu) / rounds,
        (process_cpu(redis_pid) - redis_cpu) / rounds,
        (process_cpu(s3_pid) - s3_cpu) / rounds,
        (machine_cpu() - machine) / rounds,
    )


def bound(s: Sample) -> str:
    """What bounds a figure on this machine (2 CPUs shared with whatever else runs)."""
    if s.cpu >= 0.8 * s.wall:
        return "this process's CPU (gateway + client, one GIL)"
    if s.machine_cpu >= 0.85 * CPUS * s.wall:
        return f"the {CPUS} CPUs, other processes taking {s.others_cpu:.2f} s of them"
    if s.redis_cpu >= 0.8 * s.wall:
        return "Redis's CPU"
    return "round trips (no CPU busy)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=200, help="partitions per topic")
    parser.add_argument("--segments", type=int, default=3, help="segments per partition")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import redis

    from tiered_kafka.registry import Registry
    from tiered_kafka_dev.services import RedisServer, S3Server
    from tiered_kafka_dev.services._process import free_ports
    from tiered_kafka_dev.stack import GatewayServer
    from tiered_kafka_gateway.config import load_settings
    from tiered_kafka_gateway.ui import data

    cluster = f"bench-{uuid.uuid4().hex[:6]}"
    topics = [f"topic-{i:03d}" for i in range(args.topics)]
    total = args.topics * args.partitions
    print(f"starting Redis and SeaweedFS on {os.cpu_count()} CPUs ...", flush=True)
    with RedisServer() as redis_server, S3Server() as s3:
        bucket = s3.create_bucket(f"bench-coverage-{uuid.uuid4().hex[:8]}")
        client = redis.Redis.from_url(redis_server.url)
        start = time.perf_counter()
        registered = populate(Registry(client, cluster), topics, args.partitions, args.segments)
        print(f"registered {total:,} partitions ({registered:,} segments) in {time.perf_counter() - start:.1f} s", flush=True)
        settings = load_settings(
            clusters={
                cluster: {
                    "redis_url": redis_server.url,
                    "s3": {"bucket": bucket, "prefix": "tiered", "endpoint_url": s3.endpoint_url, "access_key_id": s3.access_key, "secret_access_key": s3.secret_key, "region": s3.region},
                }
            }
        )
        gateway = GatewayServer(settings, free_ports(1)[0])
        try:
            http_client = Client(gateway.url)
            base = f"/v1/clusters/{cluster}/topics"
            first = [(t, p) for t in topics for p in range(args.partitions)]
            overview = lambda n=0: http_client.get(f"/ui/clusters/{cluster}?page={n}")  # noqa: E731
            json_of = lambda tps: [http_client.get(f"{base}/{t}/partitions/{p}") for t, p in tps]  # noqa: E731
            overview()  # warm: the S3 listing (cached for listing_ttl_s), connections
            http_client.get(f"/ui/clusters/{cluster}/topics/{topics[0]}")  # warm: the SDK's handoff module, imported on the first replay
            shown = min(data.OVERVIEW_PAGE_PARTITIONS, total)
            pids = (redis_server.pid, s3.pid)
            rows = [
                ("overview page 0", timed(overview, args.rounds, *pids), f"getPartition x {shown}", timed(lambda: json_of(first[:shown]), args.rounds, *pids)),
                (
                    "topic page 0",
                    timed(lambda: http_client.get(f"/ui/clusters/{cluster}/topics/{topics[0]}"), args.rounds, *pids),
                    f"getPartition x {min(data.TOPIC_PAGE_PARTITIONS, args.partitions)}",
                    timed(lambda: json_of(first[: min(data.TOPIC_PAGE_PARTITIONS, args.partitions)]), args.rounds, *pids),
                ),
            ]
            pages = -(-total // data.OVERVIEW_PAGE_PARTITIONS)
            rows.append(
                (f"all {pages} overview pages", timed(lambda: [overview(n) for n in range(pages)], 1, *pids), f"getPartition x {total:,}", timed(lambda: json_of(first), 1, *pids))
            )
            listing = timed(lambda: http_client.get(f"{base}"), args.rounds, *pids)
            size = len(overview())
        finally:
            gateway.stop()
            client.close()

    print(f"\n{total:,} partitions ({args.topics} topics x {args.partitions}), {args.segments} segments each; medians of {args.rounds} rounds (the whole-cluster walk: 1)")
    print("CPU-seconds per call: this process (gateway + client), Redis, SeaweedFS, other processes of the machine")
    print(f"{'page':<24}{'wall s':>8}{'cpu':>7}{'redis':>7}{'s3':>6}{'other':>7}   {'reference (JSON API)':<23}{'wall s':>8}{'cpu':>7}{'redis':>7}{'ratio':>7}   bound of the page")
    for name, page, ref_name, ref in rows:
        print(
            f"{name:<24}{page.wall:>8.3f}{page.cpu:>7.3f}{page.redis_cpu:>7.3f}{page.s3_cpu:>6.2f}{page.others_cpu:>7.2f}   "
            f"{ref_name:<23}{ref.wall:>8.3f}{ref.cpu:>7.3f}{ref.redis_cpu:>7.3f}{page.wall / ref.wall:>7.2f}   {bound(page)}"
        )
    print(f"{'listTopics (JSON)':<24}{listing.wall:>8.3f}{listing.cpu:>7.3f}{listing.redis_cpu:>7.3f}{listing.s3_cpu:>6.2f}{listing.others_cpu:>7.2f}")
    first_page = rows[0][1]
    verdict = "met" if first_page.wall < GOAL_S else f"MISSED (bound: {bound(first_page)})"
    print(
        f"\noverview page 0: {first_page.wall * 1000:.0f} ms for {min(data.OVERVIEW_PAGE_PARTITIONS, total)} of {total:,} partitions ({size / 1024:.0f} KiB of HTML), "
        f"{first_page.cpu * 1000:.0f} ms of CPU in the gateway; goal < {GOAL_S:.0f} s: {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]
    sys.exit(main())
