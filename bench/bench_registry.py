"""Registry benchmark: register and lookup ops/s on a Redis Cluster ÷ on a single Redis, same client code.

    .venv/bin/python bench/bench_registry.py [--threads 4] [--partitions 24] [--segments 100] [--rounds 3]

It starts a single Redis (``RedisServer``) and a Redis Cluster (``RedisClusterServer``: three masters,
one replica each, all on this machine), and runs the same client code against both: a
``tiered_kafka.registry.Registry`` over ``tiered_kafka.registry.connect(url)``, where only the URL
differs (``redis://`` or ``redis+cluster://``). ``--threads`` client threads share one client (as the
agent's uploaders and the gateway's request threads do), each on its own partitions.

- **register**: ``--partitions`` x ``--segments`` new segments (a fresh cluster name per round, so
  every call adds one), the agent's write. On the cluster each registration also waits for a replica's
  acknowledgement (``WAIT 1``, ``tiered_kafka.registry._replicated``: no loss on failover); the row
  ``register, no replica ack`` (``replica_wait_ms=0``) shows what that costs.
- **lookup**: ``Registry.find`` at random offsets of the registered segments, the gateway's read
  (two round trips: the ZSET, then the segment's hash).

Rounds alternate single / cluster; the best round of each counts. Printed per op: ops/s on each,
the ratio cluster ÷ single, the client's CPU-seconds (``time.process_time``: all its threads)
beside its wall time, and the Redis servers' CPU-seconds (``/proc/<pid>/stat``, every server
process of that deployment) and every other process of the machine (``/proc/stat``) over the same
round. The machine has 2 CPUs for the client and all the servers (and whatever else runs): the last
column says what bounds each figure — the client (one Python process: with the GIL it can use at
most one CPU, so client CPU >= 0.8 x wall means the client is the limit), both CPUs (the machine
busy >= 0.85 x 2 x wall, naming what other processes took), or neither (round-trip latency).
"""

from __future__ import annotations

import argparse
import os
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
TOPIC = "bench"
CPUS = os.cpu_count() or 1


def process_cpu(pids: list[int]) -> float:
    """utime + stime of live processes, in seconds (/proc/<pid>/stat fields 14 and 15)."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def machine_cpu() -> float:
    """CPU-seconds every process of the machine has used (/proc/stat, all but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / TICK


def entry(partition: int, index: int) -> Any:
    from tiered_kafka.registry import SegmentEntry

    base = index * 1000
    return SegmentEntry(
        topic=TOPIC, partition=partition, base_offset=base, last_offset=base + 999, object_key=f"bench/c/{TOPIC}-{partition}/{base:020d}.log",
        size=1 << 30, record_count=1000, min_timestamp=1_700_000_000_000 + base, max_timestamp=1_700_000_000_000 + base + 999,
        checksum=f"crc32c:{index:08x}", leader_epoch=1, upload_time_ms=1_700_000_000_000, files=("log", "index", "timeindex"),
    )  # fmt: skip


@dataclass
class Round:
    ops: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    machine_cpu_s: float  # every process of the machine, ours included

    @property
    def others_cpu_s(self) -> float:
        return max(0.0, self.machine_cpu_s - self.client_cpu_s - self.server_cpu_s)

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.wall_s


def timed(work: list[list[Any]], call: Any, threads: int, server_pids: list[int]) -> Round:
    """Each thread runs ``call(item)`` over its own list of items; wall, client CPU, servers' CPU."""
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda items: None, [[]] * threads))  # threads started before the clock
        machine, servers, cpu, start = machine_cpu(), process_cpu(server_pids), time.process_time(), time.perf_counter()
        for future in [pool.submit(lambda items=items: [call(i) for i in items]) for items in work]:
            future.result()
        wall, cpu, servers, machine = time.perf_counter() - start, time.process_time() - cpu, process_cpu(server_pids) - servers, machine_cpu() - machine
    return Round(sum(len(items) for items in work), wall, cpu, servers, machine)


def register_round(url: str, server_pids: list[int], args: argparse.Namespace, replica_wait_ms: int | None = None) -> tuple[Round, Any]:
    from tiered_kafka.registry import Registry, connect

    options = {} if replica_wait_ms is None else {"replica_wait_ms": replica_wait_ms}
    registry = Registry(connect(url, max_connections=64), f"bench-{uuid.uuid4().hex[:10]}", **options)
    registry.register(entry(args.partitions, 0))  # scripts loaded, connections opened before timing
    work = [[entry(p, i) for p in range(t, args.partitions, args.threads) for i in range(args.segments)] for t in range(args.threads)]
    result = timed(work, registry.register, args.threads, server_pids)
    assert all(len(registry.segments(TOPIC, p)) == args.segments for p in range(args.partitions)), "a registration is missing"
    return result, registry


def lookup_round(registry: Any, server_pids: list[int], args: argparse.Namespace, seed: int) -> Round:
    rng = random.Random(seed)
    per_thread = args.lookups // args.threads
    work = [[(rng.randrange(t, args.partitions, args.threads), rng.randrange(args.segments * 1000)) for _ in range(per_thread)] for t in range(args.threads)]

    def find(item: tuple[int, int]) -> None:
        partition, offset = item
        found = registry.find(TOPIC, partition, offset)
        if found is None or not found.base_offset <= offset <= found.last_offset:
            raise AssertionError(f"lookup of {TOPIC}-{partition} offset {offset} found {found}")

    return timed(work, find, args.threads, server_pids)


def bound(r: Round) -> str:
    if r.client_cpu_s >= 0.8 * r.wall_s:  # the rest of its wall time is the kernel's loopback and scheduling
        return "the client (1 CPU: GIL)"
    if r.machine_cpu_s >= 0.85 * CPUS * r.wall_s:
        return f"the {CPUS} CPUs" + (f" (other processes {r.others_cpu_s:.2f} s)" if r.others_cpu_s >= 0.1 * r.machine_cpu_s else "")
    return "round trips (CPUs partly idle)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=24)
    parser.add_argument("--segments", type=int, default=100, help="segments registered per partition per round")
    parser.add_argument("--lookups", type=int, default=12_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from tiered_kafka_dev.services import RedisClusterServer, RedisServer

    print(f"starting a single Redis and a Redis Cluster (3 masters + 3 replicas) on {CPUS} CPUs ...", flush=True)
    with RedisServer() as single, RedisClusterServer() as cluster:
        deployments = {"single": (single.url, [single.pid]), "cluster": (cluster.url, cluster.pids)}
        best: dict[tuple[str, str], Round] = {}

        def keep(op: str, name: str, r: Round) -> None:
            if (op, name) not in best or r.ops_per_s > best[(op, name)].ops_per_s:
                best[(op, name)] = r

        for n in range(args.rounds):
            for name in (("single", "cluster") if n % 2 == 0 else ("cluster", "single")):
                url, pids = deployments[name]
                registered, registry = register_round(url, pids, args)
                keep("register", name, registered)
                keep("lookup", name, lookup_round(registry, pids, args, seed=n))
                keep("register, no replica ack", name, register_round(url, pids, args, replica_wait_ms=0)[0])
                registry.client.close()
            print(f"round {n + 1} of {args.rounds} done", flush=True)

    ops = args.partitions * args.segments
    print(
        f"\nregistry ops/s: Redis Cluster (3 masters, 1 replica each) ÷ single Redis, the same client code "
        f"(Registry over connect(url)); {args.threads} client threads, {args.partitions} partitions; "
        f"register {ops} segments, lookup {args.lookups // args.threads * args.threads} offsets per round; best of {args.rounds} rounds"
    )
    header = f"{'op':<26}{'single ops/s':>13}{'cluster ops/s':>15}{'ratio':>7}   {'client CPU-s / wall-s':>34}   {'servers CPU-s':>17}   {'others CPU-s':>17}   bound by (single | cluster)"
    print(header)
    print(f"{'':<26}{'':>13}{'':>15}{'':>7}   {'single':>16}  {'cluster':>16}   {'single':>8} {'cluster':>8}   {'single':>8} {'cluster':>8}")
    for op in ("register", "register, no replica ack", "lookup"):
        s, c = best[(op, "single")], best[(op, "cluster")]
        print(
            f"{op:<26}{s.ops_per_s:>13,.0f}{c.ops_per_s:>15,.0f}{c.ops_per_s / s.ops_per_s:>7.2f}   "
            f"{s.client_cpu_s:>7.2f} / {s.wall_s:>6.2f}  {c.client_cpu_s:>7.2f} / {c.wall_s:>6.2f}   "
            f"{s.server_cpu_s:>8.2f} {c.server_cpu_s:>8.2f}   {s.others_cpu_s:>8.2f} {c.others_cpu_s:>8.2f}   {bound(s)} | {bound(c)}"
        )
    print(
        f"\nOne client process on {CPUS} CPUs shared with every server: the ratio measures the client's cost per op on each "
        "deployment (the cluster client routes each command by slot; a registration is the script plus WAIT for a replica and "
        "an SADD on the node of the cluster's partition set), not the servers' capacity. A cluster's capacity grows with its "
        "masters, on machines of their own; on 2 shared CPUs no deployment here can show that."
    )


if __name__ == "__main__":
    main()
