"""Registry at scale (issue 34): a million segments, 100,000 partitions; each figure beside its goal and a reference.

    .venv/bin/python bench/bench_registry_scale.py [--scale 1.0] [--rounds 20]

It starts Redis and SeaweedFS (the tests' launchers) and registers, through ``Registry.register_many``
(the agent's fields, a 1 GiB segment of 1 KiB records each, with the ~8 KiB sparse index the agent
computes: the registry does not store it), a cluster "large":

- topic ``long``: 100 partitions x 2,000 segments (200,000 segments);
- topic ``mid``: 800 partitions x 1,000 segments (800,000);
- topic ``one``: 99,100 partitions x 1 segment (100,000 partitions in all, 1.1 M segments);

and a cluster "small": topic ``small``, 1,000 partitions x 1 segment (the reference of the page and
listing figures). ``--scale`` multiplies every count (0.1 for a quick run). Measured:

1. **bytes per segment**: Redis ``used_memory`` grown by registering topic ``long`` ÷ its segments,
   beside the layout before (the reference: 5 partitions of 2,000 segments written with that layout's
   own commands, the base64 sparse index in every segment hash, once Redis holds the large cluster),
   then that reference migrated in place (``Registry.migrate``) and measured again. Goal <= 1,024,
   both for segments registered by layout 2 and for migrated ones.
2. **registration rate**: ``register_many`` over everything, beside ``register`` one at a time (the
   rate before: two round trips a segment) on 5,000 segments. Goal >= 10,000 segments/s.
3. **lookup p50/p99** (``Registry.find``, the registry part of every plan) on a 2,000-segment partition
   of the large cluster beside a 1-segment partition of the small one. The plan itself adds a presign
   and, for a segment's first plan, one GET of its batch index (the registry keeps no sparse index):
   not measured here (no segment bytes), see bench_plans.py.
4. **coverage pages and the listing** through the gateway app (in process: a TestClient; CPU below is
   this process's): overview page 0, the topic page of ``long`` (2,000 segments a partition) and of
   ``one``, a 2,000-segment partition's page, ``listTopics`` page 0 — large beside small. Goal < 1 s,
   the same at both sizes.
5. **time lookups**: ``Registry.segment_at_time`` (offsets-for-timestamp's segment) and
   ``/time-ranges`` on a 2,000-segment partition, a time near the end and one in the middle, beside the
   scan the gateway did before (every segment read, then filtered). Goal < 10 ms.
7. **rebuild-registry** (printed last): 5 x 1,000 and 5,000 x 1 ``.log`` objects with the agent's
   metadata, rebuilt from S3 alone, beside ``register_many`` of the same entries; its bound (CPU per
   segment of the HEADs, Redis, the S3 server). Goal >= 10,000 segments/s.
6. **remote retention, nothing to expire**: one pass over every partition of the large cluster
   (``partitions`` None: all 100,000), its reads counted, beside the same pass on the small cluster.
   Goal: cost proportional to partitions, not segments.

Each time figure is a median (p50) or p99 of ``--rounds`` calls, with this process's CPU-seconds
(``time.process_time``) and Redis's (``/proc/<pid>/stat``) per call.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
OLD_PARTITIONS = 5
"""Partitions of 2,000 segments written with the layout before (the reference of the bytes figure)."""
PREFIX = "tiered"
GIB = 1 << 30


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def entries(keyspace: Any, topic: str, partitions: range, segments: int, sparse: bytes | None) -> Iterator[Any]:
    """The agent's entries: 1 GiB segments of 1 KiB records (1,048,576 records each), timestamps 1 ms apart a record."""
    from tiered_kafka.format.segment_names import FileKind
    from tiered_kafka.registry import SegmentEntry

    per = GIB // 1024
    for p in partitions:
        for i in range(segments):
            base = i * per
            yield SegmentEntry(
                topic=topic, partition=p, base_offset=base, last_offset=base + per - 1,
                object_key=keyspace.segment_key(topic, p, base, FileKind.LOG), size=GIB, record_count=per,
                min_timestamp=1_700_000_000_000 + base, max_timestamp=1_700_000_000_000 + base + per - 1, checksum=f"crc32c:{i & 0xFFFFFFFF:08x}",
                leader_epoch=7, upload_time_ms=1_700_000_000_000 + base + per, files=("log", "index", "timeindex", "snapshot", "batchindex"),
                aborted_txns=0, control_records=0, open_txn_first_offset=-1, sparse_index=sparse, min_timestamp_exact=True,
            )  # fmt: skip


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def timed(call: Callable[[], Any], rounds: int, redis_pid: int) -> dict[str, float]:
    walls, cpus, rcpu = [], [], []
    for _ in range(rounds):
        c0, r0, w0 = time.process_time(), process_cpu(redis_pid), time.perf_counter()
        call()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        rcpu.append(process_cpu(redis_pid) - r0)
    walls.sort()
    return {"p50": statistics.median(walls), "p99": walls[min(len(walls) - 1, int(0.99 * len(walls)))], "cpu": statistics.median(cpus), "redis": statistics.median(rcpu)}


def write_old_layout(client: Any, registry: Any, e: Any) -> None:
    """What the layout before 2 wrote per registration (its script's effect, command by command)."""
    keys = registry.keys(e.topic, e.partition)
    pipe = client.pipeline(transaction=False)
    pipe.zadd(keys.segments, {e.member: e.first})
    pipe.hset(keys.segment(e.first), mapping=e.to_fields())  # sparse_index as base64, as that layout stored it
    pipe.hset(keys.info, mapping={"earliest_offset": 0, "latest_offset": e.last_offset, "segment_count": 1, "updated_ms": 1})
    pipe.hincrby(keys.info, "total_bytes", e.size)
    pipe.sadd(registry.partitions_key, f"{e.topic}-{e.partition}")
    pipe.execute()


def rebuild_figures(s3: Any, bucket: str, client: Any, long_partitions: int, one_partitions: int, redis_pid: int) -> str:
    """``rebuild-registry`` (``tiered_kafka_agent.rebuild``) over ``long_partitions`` x 1,000 and
    ``one_partitions`` x 1 ``.log`` objects carrying the agent's ``tk-*`` metadata (1 KiB each: the
    rebuild reads metadata, never bytes), beside ``register_many`` of the same entries: segments/s, and
    the CPU per segment of this process (its HEADs), Redis and the S3 server."""
    from concurrent.futures import ThreadPoolExecutor

    from tiered_kafka.keyspace import Keyspace
    from tiered_kafka.registry import Registry
    from tiered_kafka.retry import RetryPolicy
    from tiered_kafka_agent.object_metadata import entry_metadata
    from tiered_kafka_agent.rebuild import rebuild_registry
    from tiered_kafka_agent.remote_store import RemoteStore, transfer_config

    cluster = f"rebuild-{uuid.uuid4().hex[:6]}"
    keyspace = Keyspace(PREFIX, cluster, 0)
    made = [e for topic, parts, segs in (("long", range(long_partitions), 1000), ("one", range(one_partitions), 1))
            for e in entries(keyspace, topic, parts, segs, None)]
    made = [dataclasses.replace(e, files=("log",)) for e in made]
    s3_client = s3.client()
    body = b"\0" * 1024
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda e: s3_client.put_object(Bucket=bucket, Key=e.object_key, Body=body,
                                                     Metadata={k.removeprefix("x-amz-meta-"): v for k, v in entry_metadata(e).items()}), made))
    store = RemoteStore(s3_client, bucket, keyspace, transfer_config(64 << 20, 8 << 20, 2), RetryPolicy(attempts=3))
    registry = Registry(client, cluster)
    s3_pid = s3.pid
    t0, c0, r0, s0 = time.perf_counter(), time.process_time(), process_cpu(redis_pid), process_cpu(s3_pid)
    report = rebuild_registry(store, registry)
    wall, cpu, rcpu, scpu = time.perf_counter() - t0, time.process_time() - c0, process_cpu(redis_pid) - r0, process_cpu(s3_pid) - s0
    assert report.segments == len(made), report
    reference = Registry(client, f"ref-{cluster}")
    t1 = time.perf_counter()
    reference.register_many([dataclasses.replace(e) for e in made])
    ref_rate = len(made) / (time.perf_counter() - t1)
    rate = len(made) / wall
    per = lambda x: x / len(made) * 1e6  # noqa: E731
    return (f"{'rebuild-registry, segments/s':<46}{rate:>14,.0f}{ref_rate:>14,.0f}{rate / ref_rate:>8.2f}   >= 10,000: {'met' if rate >= 10_000 else 'MISSED'} "
            f"(reference: register_many of the same; {len(made):,} segments in {long_partitions + one_partitions:,} partitions)\n"
            f"  bound: CPU per segment, us: this process (HEADs) {per(cpu):.0f}, Redis {per(rcpu):.0f}, S3 server {per(scpu):.0f}: "
            f"{1 / max(cpu, scpu) * len(made):,.0f} segments/s on a CPU each")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    import redis
    from fastapi.testclient import TestClient

    from tiered_kafka.format.sparse_index import SparseIndex
    from tiered_kafka.keyspace import Keyspace
    from tiered_kafka.registry import Registry
    from tiered_kafka.retry import RetryPolicy
    from tiered_kafka_agent.config import RemoteRetentionSettings
    from tiered_kafka_agent.retention import RemoteRetention
    from tiered_kafka_dev.services import RedisServer, S3Server
    from tiered_kafka_gateway.app import create_app
    from tiered_kafka_gateway.config import load_settings

    n = lambda count: max(int(count * args.scale), 1)  # noqa: E731
    long_p, long_s, mid_p, mid_s, one_p, small_p = n(100), 2000, n(800), 1000, n(99_100), 1000
    # a realistic sparse index: what the agent computes for a 1 GiB segment (one entry per MiB)
    sparse = b"\x01" + b"\x00" * 8 + os.urandom(8 * 1024)
    assert len(base64.b64encode(sparse)) > 10_000
    del SparseIndex
    large, small, old = f"large-{uuid.uuid4().hex[:6]}", f"small-{uuid.uuid4().hex[:6]}", f"old-{uuid.uuid4().hex[:6]}"
    print(f"starting Redis and SeaweedFS on {os.cpu_count()} CPUs ...", flush=True)
    with RedisServer() as redis_server, S3Server() as s3:
        bucket = s3.create_bucket(f"bench-scale-{uuid.uuid4().hex[:8]}")
        client = redis.Redis.from_url(redis_server.url)
        pid = redis_server.pid
        out: list[str] = []

        def say(line: str) -> None:
            print(line, flush=True)
            out.append(line)

        # 1 and 2: the large cluster through register_many, then the layout before (reference)
        reg = Registry(client, large)
        ks = Keyspace(PREFIX, large, 0)
        one_by_one = Registry(client, f"ref-{uuid.uuid4().hex[:6]}")
        t0 = time.perf_counter()
        for e in entries(Keyspace(PREFIX, one_by_one.cluster, 0), "ref", range(5), 1000, sparse):
            one_by_one.register(e)
        single_rate = 5000 / (time.perf_counter() - t0)

        m0 = used_memory(client)
        t0, c0, r0 = time.perf_counter(), time.process_time(), process_cpu(pid)
        done = reg.register_many(entries(ks, "long", range(long_p), long_s, sparse), batch=1000)
        long_wall = time.perf_counter() - t0
        new_bytes = (used_memory(client) - m0) / len(done)
        total = len(done)
        for topic, parts, segs in (("mid", mid_p, mid_s), ("one", one_p, 1)):
            total += len(reg.register_many(entries(ks, topic, range(parts), segs, sparse), batch=1000))
            print(f"  registered {topic}: {total:,} segments so far", flush=True)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        redis_cpu = process_cpu(pid) - r0
        rate = total / wall
        small_reg = Registry(client, small)
        small_reg.register_many(entries(Keyspace(PREFIX, small, 0), "small", range(small_p), 1, sparse))
        # the reference: the layout before, written with its own commands once Redis holds the large cluster
        # (its keyspace table sized already, as for the figure it is compared with), then migrated in place
        reg_old = Registry(client, old)
        ks_old = Keyspace(PREFIX, old, 0)
        old_count = OLD_PARTITIONS * 2000
        m0 = used_memory(client)
        for e in entries(ks_old, "long", range(OLD_PARTITIONS), 2000, sparse):
            write_old_layout(client, reg_old, e)
        old_bytes = (used_memory(client) - m0) / old_count
        t0 = time.perf_counter()
        reg_old.migrate()
        migrate_rate = old_count / (time.perf_counter() - t0)
        client.memory_purge()
        migrated_bytes = (used_memory(client) - m0) / old_count
        partitions = long_p + mid_p + one_p
        say(f"\nregistry at scale: {total:,} segments in {partitions:,} partitions (cluster large), {small_p:,} one-segment partitions (small); scale {args.scale}")
        say(f"{'figure':<46}{'measured':>14}{'reference':>14}{'ratio':>8}   goal")
        say(f"{'Redis bytes per segment (topic long)':<46}{new_bytes:>14,.0f}{old_bytes:>14,.0f}{new_bytes / old_bytes:>8.3f}   <= 1,024: {'met' if new_bytes <= 1024 else 'MISSED'} (reference: layout before)")
        say(f"{'  the reference after migrate-registry':<46}{migrated_bytes:>14,.0f}{old_bytes:>14,.0f}{migrated_bytes / old_bytes:>8.3f}   "
            f"<= 1,024: {'met' if migrated_bytes <= 1024 else 'MISSED'}; migrated at {migrate_rate:,.0f} segments/s")
        say(f"{'registration, segments/s (register_many)':<46}{rate:>14,.0f}{single_rate:>14,.0f}{rate / single_rate:>8.1f}   >= 10,000: {'met' if rate >= 10_000 else 'MISSED'} (reference: register one at a time)")
        say(f"{'  of which topic long alone, segments/s':<46}{long_p * long_s / long_wall:>14,.0f}{'':>14}{'':>8}   Redis holds {used_memory(client) / 2**20:,.0f} MiB")
        say(f"{'  CPU per segment, us: this client / Redis':<46}{cpu / total * 1e6:>14.1f}{redis_cpu / total * 1e6:>14.1f}{'':>8}   "
            f"{wall:.0f} s wall; a CPU each: {1 / max(cpu / total, redis_cpu / total):,.0f} segments/s (machine load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")

        # 3: lookups
        import random

        rng = random.Random(34)
        per = GIB // 1024
        find_large = timed(lambda: reg.find("long", rng.randrange(long_p), rng.randrange(long_s * per)), args.rounds * 10, pid)
        find_small = timed(lambda: small_reg.find("small", rng.randrange(small_p), rng.randrange(per)), args.rounds * 10, pid)
        for q in ("p50", "p99"):
            say(f"{'Registry.find ' + q + ', ms (2,000 vs 1 segment)':<46}{find_large[q] * 1000:>14.2f}{find_small[q] * 1000:>14.2f}{find_large[q] / find_small[q]:>8.2f}   unchanged (ratio ~1)")

        # 4: pages and listing through the gateway app
        def settings_for(name: str) -> Any:
            return {"redis_url": redis_server.url, "s3": {"bucket": bucket, "prefix": PREFIX, "endpoint_url": s3.endpoint_url, "access_key_id": s3.access_key,
                                                          "secret_access_key": s3.secret_key, "region": s3.region}}

        app = create_app(load_settings(clusters={large: settings_for(large), small: settings_for(small)}))
        with TestClient(app, base_url="http://localhost") as http:
            def get(path: str) -> None:
                response = http.get(path)
                assert response.status_code == 200, (path, response.status_code, response.text[:300])

            pages = [
                ("overview page 0", f"/ui/clusters/{large}", f"/ui/clusters/{small}"),
                ("topic page, 2,000 segments a partition", f"/ui/clusters/{large}/topics/long", f"/ui/clusters/{small}/topics/small"),
                ("topic page, 1 segment a partition", f"/ui/clusters/{large}/topics/one", f"/ui/clusters/{small}/topics/small"),
                ("topic page, time axis (2,000 segments)", f"/ui/clusters/{large}/topics/long?axis=time", f"/ui/clusters/{small}/topics/small?axis=time"),
                ("partition page (2,000 segments)", f"/ui/clusters/{large}/topics/long/partitions/0", f"/ui/clusters/{small}/topics/small/partitions/0"),
                ("partition page 19 of its segments", f"/ui/clusters/{large}/topics/long/partitions/0?page=19", f"/ui/clusters/{small}/topics/small/partitions/0"),
                ("listTopics page 0 (1,000 partitions)", f"/v1/clusters/{large}/topics", f"/v1/clusters/{small}/topics"),
                ("listTopics page 90 (cursor)", f"/v1/clusters/{large}/topics?after=one/{min(90_000, one_p - 1)}", f"/v1/clusters/{small}/topics"),
            ]
            for _, a, b in pages:  # warm: the S3 listing (once per gateway), imports
                get(a)
                get(b)
            floor = 0.0  # the in-process app's own cost of a request: listTopics of the small cluster, one page
            for name, a, b in pages:
                big, ref = timed(lambda a=a: get(a), args.rounds, pid), timed(lambda b=b: get(b), args.rounds, pid)
                if name.startswith("listTopics page 0"):
                    floor = ref["p50"]
                say(f"{name + ', s p50':<46}{big['p50']:>14.3f}{ref['p50']:>14.3f}{big['p50'] / ref['p50']:>8.2f}   < 1 s, same at both: {'met' if big['p50'] < 1 else 'MISSED'} "
                    f"(cpu {big['cpu']:.3f} s, redis {big['redis']:.3f} s)")

            # 5: time lookups on a 2,000-segment partition
            end_ts = 1_700_000_000_000 + (long_s - 3) * per
            mid_ts = 1_700_000_000_000 + (long_s // 2) * per
            for label, ts in (("near the end", end_ts), ("in the middle", mid_ts)):
                index = timed(lambda ts=ts: reg.segment_at_time("long", 0, ts), args.rounds, pid)
                scan = timed(lambda ts=ts: next(e for e in reg.segments("long", 0) if e.max_timestamp >= ts), max(args.rounds // 4, 3), pid)
                say(f"{'segment at time ' + label + ', ms':<46}{index['p50'] * 1000:>14.2f}{scan['p50'] * 1000:>14.2f}{index['p50'] / scan['p50']:>8.3f}   < 10 ms: "
                    f"{'met' if index['p50'] < 0.010 else 'MISSED'} (reference: every segment read)")
                ranges = timed(lambda ts=ts: get(f"/v1/clusters/{large}/topics/long/partitions/0/time-ranges?from_timestamp={ts}&to_timestamp={ts + per}"), args.rounds, pid)
                say(f"{'/time-ranges from ' + label + ', ms':<46}{ranges['p50'] * 1000:>14.2f}{scan['p50'] * 1000:>14.2f}{ranges['p50'] / scan['p50']:>8.3f}   < 10 ms: "
                    f"{'met' if ranges['p50'] < 0.010 else 'MISSED'} (HTTP in process, whose floor is {floor * 1000:.1f} ms: listTopics of "
                    f"{small_p:,} partitions; reference: the registry scan alone)")

        # 7 (printed last): rebuild-registry from S3 alone
        rebuild = rebuild_figures(s3, bucket, client, n(5), n(5000), pid)

        # 6: retention with nothing to expire
        settings = RemoteRetentionSettings(ms=10 * 365 * 86_400_000, bytes=-1)
        results = []
        for registry in (reg, small_reg):
            retention = RemoteRetention(registry, None, settings, RetryPolicy(attempts=1))  # type: ignore[arg-type]  # nothing expires: no store call
            sample = timed(lambda retention=retention: retention.run_once(now_ms=1_700_000_000_000 + 10**9), 3, pid)
            results.append((sample, retention.summaries_read // 3, retention.segments_read // 3))
        (big, big_parts, big_segs), (ref, ref_parts, _) = results
        say(f"{'retention pass, nothing to expire, s':<46}{big['p50']:>14.3f}{ref['p50']:>14.3f}{big['p50'] / ref['p50']:>8.1f}   partitions x{big_parts / ref_parts:.0f}, "
            f"segments x{total / small_p:.0f}: reads {big_parts:,} summaries and {big_segs} segments a pass")
        say(rebuild)
        client.close()
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]
    sys.exit(main())
