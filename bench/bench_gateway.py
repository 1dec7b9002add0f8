"""Gateway benchmark: locate req/s and latency beside a no-op route, and S3 GETs per GB read.

    .venv/bin/python bench/bench_gateway.py [--segments 2] [--segment-mib 32] [--seconds 10] [--connections 4]

It starts Redis and SeaweedFS (the same launchers as the tests), writes a partition with the
format core's log.dir writer (16-record batches of 1 KiB records, as ``bench_agent.py``), has the
agent (in-process, static leadership) upload and register its rotated segments, then runs the
gateway with uvicorn in a subprocess (``--workers``, default 1, config through
$TIERED_KAFKA_GATEWAY_CONFIG). The app served is ``create_app`` plus a ``GET /noop`` route added
here only (``gateway_with_noop``), so both routes run in the same process, through the same
middleware and, both being sync routes, the same thread pool. Then, in one run:

1. **S3 GETs per GB read through plans** (cold caches): plan through the whole partition in
   order (``next_offset``) with ``max_bytes`` = 8 MiB and fetch every range through its presigned
   URL. GETs = the gateway's own S3 GETs (``tiered_kafka_gateway_s3_gets_total`` at /metrics, before and
   after: ``.index`` objects, batch-header windows) + the client's range GETs. The bytes fetched
   are checked to be exactly the registered segments' bytes.
2. **locate req/s and latency** beside **no-op req/s**: ``--connections`` client processes (one
   keep-alive HTTP/1.1 connection each) send requests back to back: ``/plan`` at uniformly random
   offsets over the registered range (default max_bytes), or ``/noop``. After a warm-up (plans
   every ~48 KiB of the partition, so that the gateway reads every 64 KiB batch-header window once,
   then ``--warmup`` seconds of both routes), the two alternate in
   ``--rounds`` rounds, ``--seconds`` in total each. Latency is measured by the client, per request.
   Goals: ratio locate/noop >= 0.5, locate p99 < 5 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
TOPIC = "bench"
HERE = Path(__file__).resolve().parent


def gateway_with_noop() -> Any:
    """uvicorn factory (``--factory bench_gateway:gateway_with_noop``): the gateway plus ``/noop``."""
    from tiered_kafka_gateway.app import create_app
    from tiered_kafka_gateway.config import cached_settings

    app = create_app(cached_settings())

    @app.get("/noop", include_in_schema=False)
    def noop() -> dict[str, str]:  # sync, like the product routes: runs in the same thread pool
        return {"status": "ok"}

    return app


# -- client processes ---------------------------------------------------------------------------
def _client(port: int, path: str, low: int, high: int, seconds: float, seed: int, out: Any) -> None:
    """Requests back to back on one keep-alive connection; sends (latencies, errors) to ``out``."""
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    while True:
        url = path.format(offset=rng.randint(low, high)) if "{offset}" in path else path
        start = time.perf_counter()
        if start >= deadline:
            break
        conn.request("GET", url)
        response = conn.getresponse()
        response.read()
        latencies.append(time.perf_counter() - start)
        errors += response.status != 200
    conn.close()
    out.send((latencies, errors))
    out.close()


def _sweep(port: int, base: str, offsets: list[int], out: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    errors = 0
    for offset in offsets:
        conn.request("GET", f"{base}/plan?offset={offset}&max_bytes=1")
        response = conn.getresponse()
        response.read()
        errors += response.status != 200
    conn.close()
    out.send(errors)
    out.close()


def warm_headers(port: int, base: str, earliest: int, latest: int, stride: int, connections: int) -> int:
    """Plans at every ``stride``-th offset (contiguous chunks per connection), so that the
    gateway reads every batch-header window once; returns the failed requests."""
    offsets = list(range(earliest, latest + 1, stride))
    chunk = -(-len(offsets) // connections)
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for i in range(connections):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_sweep, args=(port, base, offsets[i * chunk : (i + 1) * chunk], send))
        proc.start()
        pipes.append(receive)
        procs.append(proc)
    errors = sum(receive.recv() for receive in pipes)
    for proc in procs:
        proc.join()
    return errors


def load(port: int, path: str, low: int, high: int, seconds: float, connections: int, seed: int) -> tuple[list[float], int, float]:
    """(latencies, errors, wall seconds) of ``connections`` clients for ``seconds``."""
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for i in range(connections):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client, args=(port, path, low, high, seconds, seed * 1000 + i, send))
        proc.start()
        pipes.append(receive)
        procs.append(proc)
    start = time.perf_counter()
    latencies: list[float] = []
    errors = 0
    for receive in pipes:
        got, err = receive.recv()
        latencies += got
        errors += err
    wall = time.perf_counter() - start
    for proc in procs:
        proc.join()
    return latencies, errors, wall


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the gateway --------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def gateway(config: Path, workers: int) -> Any:
    port = free_port()
    env = {**os.environ, "TIERED_KAFKA_GATEWAY_CONFIG": str(config)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "bench_gateway:gateway_with_noop", "--factory", "--app-dir", str(HERE),
         "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--log-level", "warning", "--no-access-log"],
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the gateway did not start") from None
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def gateway_cluster(redis_url: str, s3: Any, bucket: str, agent: Any) -> dict[str, Any]:
    """The gateway's configuration of a cluster the agent (``bench_agent.settings_for``) uploaded to: its Redis,
    and its bucket, key prefix and entropy bits on SeaweedFS (``S3Server``: endpoint, region, keys)."""
    return {
        "redis_url": redis_url,
        "s3": {
            "bucket": bucket, "prefix": agent.s3.prefix, "entropy_bits": agent.s3.entropy_bits,
            "endpoint_url": s3.endpoint_url, "region": s3.region,
            "access_key_id": s3.access_key, "secret_access_key": s3.secret_key,
        },
    }  # fmt: skip


def write_gateway_config(path: Path, cluster: str, redis_url: str, s3: Any, bucket: str, agent: Any) -> Path:
    """``path`` holding the gateway's JSON configuration of that one cluster (:func:`gateway_cluster`), for :func:`gateway`."""
    path.write_text(json.dumps({"clusters": {cluster: gateway_cluster(redis_url, s3, bucket, agent)}}))
    return path


def add_load_arguments(parser: argparse.ArgumentParser, *, segment_mib: int, rounds: int, per: str) -> None:
    """The options of a load run over one uploaded partition (this benchmark's and ``bench_gateway_lb.py``'s):
    its size, then the measuring time per ``per`` (a route, a setting), rounds, warm-up and client connections."""
    parser.add_argument("--segments", type=int, default=2)
    parser.add_argument("--segment-mib", type=int, default=segment_mib)
    parser.add_argument("--seconds", type=float, default=10.0, help=f"measuring time per {per} (split over --rounds)")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=4)


def gateway_s3_gets(port: int, cluster: str) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    match = re.search(rf'^tiered_kafka_gateway_s3_gets_total\{{cluster="{re.escape(cluster)}"\}} (\S+)$', text, re.M)
    if match is None:
        raise RuntimeError("tiered_kafka_gateway_s3_gets_total not found in /metrics")
    return int(float(match.group(1)))


def read_through_plans(port: int, base: str, earliest: int, latest: int, max_bytes: int) -> tuple[int, int, int]:
    """(plans, client range GETs, bytes) reading the partition in order through presigned URLs."""
    plans = gets = total = 0
    offset = earliest
    with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=30)) as conn:
        while offset <= latest:
            conn.request("GET", f"{base}/plan?offset={offset}&max_bytes={max_bytes}")
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"plan at {offset}: {response.status} {body[:300]!r}")
            plan = json.loads(body)
            plans += 1
            for r in plan["ranges"]:
                data = urllib.request.urlopen(urllib.request.Request(r["url"], headers={"Range": r["range_header"]}), timeout=30).read()
                if len(data) != r["size"]:
                    raise RuntimeError(f"range {r['range_header']} of {plan['segment']['object_key']}: {len(data)} bytes, expected {r['size']}")
                gets += 1
                total += len(data)
            offset = plan["next_offset"]
    return plans, gets, total


# -- setup --------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_arguments(parser, segment_mib=32, rounds=2, per="route")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--plan-mib", type=int, default=8, help="max_bytes of the sequential read's plans")
    args = parser.parse_args()

    sys.path.insert(0, str(HERE))
    from bench_agent import upload_partition  # noqa: E402  (the same partition writer and agent set-up)

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:  # services stop before their directory goes
        up = upload_partition(stack, Path(tmp), args.segments, args.segment_mib)
        cluster = up.cluster
        entries = up.registry.segments(TOPIC, 0)
        info = up.registry.partition_info(TOPIC, 0)
        assert info is not None and len(entries) == args.segments, (info, len(entries))
        segment_bytes = sum(e.size for e in entries)

        config = write_gateway_config(Path(tmp) / "gateway.json", cluster, up.redis.url, up.s3, up.bucket, up.agent)
        print(f"starting the gateway (uvicorn, {args.workers} worker) ...", file=sys.stderr, flush=True)
        port = stack.enter_context(gateway(config, args.workers))
        base = f"/v1/clusters/{cluster}/topics/{TOPIC}/partitions/0"

        # 1. S3 GETs per GB (cold caches)
        print("reading the partition through plans ...", file=sys.stderr, flush=True)
        before = gateway_s3_gets(port, cluster)
        started = time.perf_counter()
        plans, client_gets, read_bytes = read_through_plans(port, base, info.earliest_offset, info.latest_offset, args.plan_mib * MIB)
        read_s = time.perf_counter() - started
        own_gets = gateway_s3_gets(port, cluster) - before
        if read_bytes != segment_bytes:
            raise SystemExit(f"read {read_bytes} bytes through plans, but the registered segments hold {segment_bytes}")

        # 2. locate beside no-op. The header cache fills by 64 KiB windows, on demand: random plans
        # over a cold cache cost about one S3 GET each, so every window is read once first.
        stride = max(1, int((info.latest_offset - info.earliest_offset + 1) / segment_bytes * 48 * 1024))
        print(f"warming the gateway's caches (a plan every {stride} offsets) ...", file=sys.stderr, flush=True)
        before = gateway_s3_gets(port, cluster)
        started = time.perf_counter()
        warm_errors = warm_headers(port, base, info.earliest_offset, info.latest_offset, stride, args.connections)
        warm_s, warm_gets = time.perf_counter() - started, gateway_s3_gets(port, cluster) - before
        if warm_errors:
            raise SystemExit(f"{warm_errors} warm-up plans failed")
        print(f"measuring: warm-up {args.warmup:.0f} s, then /plan and /noop alternately, {args.seconds:.0f} s each ...", file=sys.stderr, flush=True)
        routes = {"locate": base + "/plan?offset={offset}", "noop": "/noop"}
        for path in routes.values():
            load(port, path, info.earliest_offset, info.latest_offset, args.warmup / 2, args.connections, seed=0)
        results: dict[str, tuple[list[float], int, float]] = {name: ([], 0, 0.0) for name in routes}
        gets_before_load = gateway_s3_gets(port, cluster)
        for round_ in range(args.rounds):
            order = list(routes) if round_ % 2 == 0 else list(reversed(routes))
            for name in order:
                lat, err, wall = load(port, routes[name], info.earliest_offset, info.latest_offset, args.seconds / args.rounds, args.connections, seed=round_ + 1)
                prev = results[name]
                results[name] = (prev[0] + lat, prev[1] + err, prev[2] + wall)
        # latency without queueing: one connection, one request at a time
        single: dict[str, list[float]] = {}
        for name in routes:
            single[name], _, _ = load(port, routes[name], info.earliest_offset, info.latest_offset, args.seconds / 2, 1, seed=99)
        load_gets = gateway_s3_gets(port, cluster) - gets_before_load

    gb = read_bytes / 1e9
    print(f"gateway benchmark: {args.segments} segments of ~{args.segment_mib} MiB ({segment_bytes / 1e6:.0f} MB, offsets "
          f"{info.earliest_offset}..{info.latest_offset}), uvicorn {args.workers} worker, {args.connections} client connections, {os.cpu_count()} CPUs")
    print(f"{'':10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'requests':>10}{'errors':>8}")
    rates = {}
    for name, (lat, err, wall) in results.items():
        rates[name] = len(lat) / wall
        print(f"{name:10}{rates[name]:>10.0f}{statistics.median(lat) * 1000:>10.2f}{percentile(lat, 0.99) * 1000:>10.2f}{len(lat):>10}{err:>8}")
    print("one connection (latency without queueing):")
    for name, lat in single.items():
        print(f"{name:10}{len(lat) / (args.seconds / 2):>10.0f}{statistics.median(lat) * 1000:>10.2f}{percentile(lat, 0.99) * 1000:>10.2f}{len(lat):>10}")
    ratio = rates["locate"] / rates["noop"]
    p99 = percentile(single["locate"], 0.99) * 1000
    print(f"cache warm-up: {warm_gets} gateway S3 GETs in {warm_s:.1f} s; gateway S3 GETs while measuring (0 when warm): {load_gets}")
    print(f"ratio locate/noop: {ratio:.2f}   goal >= 0.5: {'met' if ratio >= 0.5 else 'NOT met'}")
    print(f"locate p99 (one connection): {p99:.2f} ms   goal < 5 ms: {'met' if p99 < 5 else 'NOT met'}   "
          f"(with {args.connections} connections queueing adds: p99 {percentile(results['locate'][0], 0.99) * 1000:.2f} ms)")
    print(f"S3 GETs per GB read through plans (max_bytes {args.plan_mib} MiB, cold caches): {(own_gets + client_gets) / gb:.1f} "
          f"= gateway {own_gets / gb:.1f} ({own_gets} GETs: indexes, batch headers) + client ranges {client_gets / gb:.1f} ({client_gets} GETs); "
          f"{plans} plans, {read_bytes / 1e6:.0f} MB in {read_s:.1f} s")
    if any(err for _, err, _ in results.values()):
        raise SystemExit("some requests failed")


if __name__ == "__main__":
    main()
