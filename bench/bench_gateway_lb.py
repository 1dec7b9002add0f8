"""Gateway replicas behind HAProxy: locate req/s with 2 replicas ÷ with 1 replica (issue 17).

    .venv/bin/python bench/bench_gateway_lb.py [--segments 2] [--segment-mib 16] [--seconds 10] [--connections 4]

Set-up as ``bench_gateway.py`` (whose helpers it uses: the partition writer and agent of
``bench_agent.py``, ``gateway``, ``warm_headers``, ``load``, ``percentile``): Redis and SeaweedFS,
one partition written with the format core and uploaded by the agent, then **two** gateway
processes (uvicorn, one worker each) behind **one** HAProxy (``HAProxyServer``: round robin per
request, health checks). Each gateway's caches are warmed directly (every batch-header window
read once), then the same load generator (``--connections`` client processes, one keep-alive
connection each to HAProxy, ``/plan`` at uniformly random offsets) runs against the same HAProxy
with server ``gw1`` disabled (1 replica) and enabled (2 replicas), alternating over ``--rounds``,
``--seconds`` in total per setting.

Printed per setting: req/s, latency, wall seconds and the CPU-seconds over it of the load
generator (its client processes), the gateways, HAProxy, Redis and SeaweedFS (``services``), and
everything else on the machine (``others``, from /proc/stat: processes not of this benchmark
sharing the CPUs). Then the ratio, and what bounds it: on a 2-CPU machine the load generator,
HAProxy and the gateways share the two CPUs, so 2 replicas cannot reach 2x one replica's rate.
The ceiling printed is the CPUs left by the others / (this benchmark's CPU-seconds per request in
the 2-replica run) ÷ the 1-replica rate.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_agent import upload_partition  # noqa: E402
from bench_gateway import TOPIC, add_load_arguments, gateway, load, percentile, warm_headers, write_gateway_config  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """utime + stime of a live process, in seconds (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_cpu() -> float:
    """CPU-seconds every process of the machine has used (/proc/stat, all but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / TICK


def child_with_port(port: int) -> int:
    """The pid of this process's child serving ``port`` (``bench_gateway.gateway``'s uvicorn)."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
                if ppid == me and f"--port\0{port}\0".encode() in (entry / "cmdline").read_bytes():
                    return int(entry.name)
    raise RuntimeError(f"no child process serving port {port}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_arguments(parser, segment_mib=16, rounds=4, per="setting")
    args = parser.parse_args()

    from tiered_kafka_dev.services import HAProxyServer

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        up = upload_partition(stack, Path(tmp), args.segments, args.segment_mib)
        cluster, redis_server, s3 = up.cluster, up.redis, up.s3
        info = up.registry.partition_info(TOPIC, 0)
        assert info is not None
        segment_bytes = sum(e.size for e in up.registry.segments(TOPIC, 0))
        config = write_gateway_config(Path(tmp) / "gateway.json", cluster, redis_server.url, s3, up.bucket, up.agent)

        print("starting 2 gateways (uvicorn, 1 worker each) behind HAProxy ...", file=sys.stderr, flush=True)
        ports = [stack.enter_context(gateway(config, 1)) for _ in range(2)]
        pids = [child_with_port(port) for port in ports]
        lb = stack.enter_context(HAProxyServer(ports))
        lb.wait_servers(up=2)
        assert lb.pid is not None
        base = f"/v1/clusters/{cluster}/topics/{TOPIC}/partitions/0"
        stride = max(1, int((info.latest_offset - info.earliest_offset + 1) / segment_bytes * 48 * 1024))
        print("warming each gateway's caches ...", file=sys.stderr, flush=True)
        for port in ports:
            if warm_headers(port, base, info.earliest_offset, info.latest_offset, stride, args.connections):
                raise SystemExit("warm-up plans failed")
        route = base + "/plan?offset={offset}"
        load(lb.port, route, info.earliest_offset, info.latest_offset, args.warmup, args.connections, seed=0)

        settings = {1: "gw1 disabled", 2: "both"}
        totals = {n: {"lat": [], "errors": 0, "wall": 0.0, "loadgen": 0.0, "gateways": 0.0, "haproxy": 0.0, "services": 0.0, "machine": 0.0} for n in settings}
        services = [pid for pid in (redis_server.pid, s3.pid) if pid is not None]
        served = {"gw0": 0, "gw1": 0}
        print(f"measuring: 1 and 2 replicas alternately, {args.rounds} rounds, {args.seconds:.0f} s each ...", file=sys.stderr, flush=True)
        for round_ in range(args.rounds):
            for replicas in ((1, 2) if round_ % 2 == 0 else (2, 1)):
                lb.set_enabled("gw1", replicas == 2)
                lb.wait_servers(up=replicas)
                requests_before = lb.server_requests()
                children_before, machine_before = os.times(), machine_cpu()
                gateways_before, haproxy_before = sum(process_cpu(p) for p in pids), process_cpu(lb.pid)
                services_before = sum(process_cpu(p) for p in services)
                lat, errors, wall = load(lb.port, route, info.earliest_offset, info.latest_offset, args.seconds / args.rounds, args.connections, seed=round_ + 1)
                children_after = os.times()
                t = totals[replicas]
                t["lat"] += lat  # type: ignore[operator]
                t["errors"] += errors
                t["wall"] += wall
                t["loadgen"] += (children_after.children_user + children_after.children_system) - (children_before.children_user + children_before.children_system)
                t["gateways"] += sum(process_cpu(p) for p in pids) - gateways_before
                t["haproxy"] += process_cpu(lb.pid) - haproxy_before
                t["services"] += sum(process_cpu(p) for p in services) - services_before
                t["machine"] += machine_cpu() - machine_before
                if replicas == 2:
                    for name, count in lb.server_requests().items():
                        served[name] += count - requests_before[name]
        lb.set_enabled("gw1", True)

    cpus = os.cpu_count() or 1
    print(f"gateway replicas behind HAProxy: locate (/plan, random offsets {info.earliest_offset}..{info.latest_offset} of {args.segments} segments, "
          f"{segment_bytes / 1e6:.0f} MB), {args.connections} client connections (the load generator: {args.connections} processes), "
          f"{args.rounds} rounds, {cpus} CPUs")
    print(f"{'replicas':10}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'requests':>10}{'errors':>7}{'wall s':>8}   CPU-seconds: {'load gen':>9}{'gateways':>9}{'HAProxy':>8}{'services':>9}{'others':>8}")
    rate = {}
    for n, t in totals.items():
        lat = t["lat"]
        rate[n] = len(lat) / t["wall"]  # type: ignore[arg-type]
        others = t["machine"] - t["loadgen"] - t["gateways"] - t["haproxy"] - t["services"]
        print(f"{n:<10}{rate[n]:>8.0f}{statistics.median(lat) * 1000:>8.2f}{percentile(lat, 0.99) * 1000:>8.2f}{len(lat):>10}{t['errors']:>7}{t['wall']:>8.1f}"  # type: ignore[arg-type]
              f"                {t['loadgen']:>9.1f}{t['gateways']:>9.1f}{t['haproxy']:>8.1f}{t['services']:>9.1f}{others:>8.1f}")
    print(f"2-replica requests per server: gw0 {served['gw0']}, gw1 {served['gw1']}")
    ratio = rate[2] / rate[1]
    print(f"ratio req/s 2 replicas / 1 replica: {ratio:.2f}")
    one, two = totals[1], totals[2]
    busy2 = two["machine"] / two["wall"]
    ours2 = two["loadgen"] + two["gateways"] + two["haproxy"] + two["services"]
    others2 = (two["machine"] - ours2) / two["wall"]
    per_request = ours2 / len(two["lat"])  # type: ignore[arg-type]
    ceiling = (cpus - others2) / per_request / rate[1]
    print(f"bound on {cpus} CPUs: with 1 replica its gateway process used {one['gateways'] / one['wall']:.2f} CPU (one Python process: near 1 means it is the "
          f"bottleneck) and the load generator {one['loadgen'] / one['wall']:.2f}; with 2 replicas the machine was {busy2:.2f} of {cpus} CPUs busy "
          f"(load generator {two['loadgen'] / two['wall']:.2f}, gateways {two['gateways'] / two['wall']:.2f}, HAProxy {two['haproxy'] / two['wall']:.2f}, "
          f"Redis+SeaweedFS {two['services'] / two['wall']:.2f}, others {others2:.2f}): "
          + ("the CPUs are saturated, so the figure is bound by the machine, not by the replicas; " if busy2 >= 0.9 * cpus else "the CPUs are not saturated; ")
          + f"at {per_request * 1000:.2f} CPU-ms per request (this benchmark's processes) the {cpus - others2:.2f} CPUs the others left allow at most "
          f"{ceiling:.2f}x the 1-replica rate")
    if one["errors"] or two["errors"]:
        raise SystemExit("some requests failed")


if __name__ == "__main__":
    main()
