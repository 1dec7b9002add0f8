"""History catch-up (issue 25, benchmarks 1 and 4): one partition read from its first offset to its last
by what users run today and by us, in one run, on the same segments.

    .venv/bin/python bench/bench_catchup.py [--mib 1024] [--segment-mib 32] [--value-bytes 1024,100] [--rounds 2]

Set-up, once per record size (``--value-bytes``; each on a stack of its own): Redis, SeaweedFS and one
Apache Kafka 4.4 KRaft node (``KafkaServer``, 1 GiB of heap) with KIP-405 tiered storage enabled
(``_kip405.kip405_broker_config``: Kafka's ``RemoteLogManager`` and ``TopicBasedRemoteLogMetadataManager``).
**Aiven's RemoteStorageManager is not served by the Maven registry this machine reaches** (issue 24), so the
broker runs our stand-in, ``DirectoryRemoteStorageManager`` (``dev/java``): it keeps the files Kafka hands any
RSM in a directory on the local disk, so row b's broker reads them from disk, not from S3 (no S3 GET, no
S3 server CPU: a lower bound on what an S3-backed RSM costs). ``bench_sdk.produce_partition`` fills
``bench``-0 (``--mib`` MiB in ``--segment-mib`` segments, uncompressed ~16 KiB batches, records of half
random bytes) and our agent uploads the rotated segments from Kafka's log.dir. One gateway process serves
the agent's cluster and two ``kip405`` clusters (below).

Phase 1, the segments on the broker's disk, rounds alternating:
  a. confluent-kafka from Kafka (``bench_sdk.child_confluent``);
  d. ``TieredConsumer`` REMOTE_ONLY through the gateway (``bench_sdk.child_sdk``; no ``bootstrap.servers``,
     so the reader sends the broker nothing);
  e. the bulk API (``bench_bulk.child_bulk``).
Phase 2: ``remote.storage.enable`` is set on the topic with ``local.retention.ms`` 1 s: the broker copies
every rotated segment to the RSM and deletes it from its disk (waited for). The copies (Kafka's
``LogSegmentData``) are then laid out in SeaweedFS as Aiven's RSM writes them (``tests/support/rsm_writer``,
4 MiB chunks), once plain and once zstd, under the segment ids Kafka published in ``__remote_log_metadata``,
which the gateway's ``kip405`` clusters read (``bootstrap_servers`` set). Rounds alternating:
  b. confluent-kafka from Kafka, which serves the offsets through its RSM;
  d. again (the phase's own reference, same stack);
  4. ``TieredConsumer`` REMOTE_ONLY on the ``kip405`` clusters, plain and zstd.
  c. Pinterest's ts-consumer: measured when ``tiered_kafka_dev.services._pinterest`` (another helper's launcher
     for Pinterest's uploader and consumer harness) exists; otherwise the row says why not.

Every reader runs in a child process of its own; the best round of each counts. Per row: records/s, MB/s
(10^6 bytes of the segments as stored), the reader's CPU-s (``time.process_time``), the broker's, the
gateway's and SeaweedFS's CPU-s over the reader's run (``/proc``), and S3 GETs: the reader's (every
``GatewayClient.fetch``, counted in the child) + the gateway's own (``tiered_kafka_gateway_s3_gets_total``).
The broker's CPU is also printed above its idle rate (measured over ``--idle-s`` before each phase: retention
and RLM tasks, heartbeats), since a reader that never contacts the broker still sees it working.
Goals: d >= 1.0 x a, d >= 3 x b, d >= 2 x c, e >= 3 x a, 4 >= 3 x b; d, e and 4 cost the broker nothing (above
idle). Where a goal is missed, the line under it prints what bounds the row (its CPU-s, the S3 server's,
its GETs).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_sdk import MIB, TOPIC, child_confluent, child_sdk, process_cpu_s, produce_and_upload, run_script_child  # noqa: E402
from bench_spark import machine_busy  # noqa: E402  (the whole machine's busy CPU-s, /proc/stat)

from tiered_kafka.consumer.config import DEFAULT_PREFETCH_MAX_BYTES  # noqa: E402

AGENT_PREFIX = "tiered"  # ts-consumer needs a non-empty prefix (storage.service.endpoint.s3.prefix)
RSM_CHUNK = 4 * MIB  # the chunk.size Aiven's documentation suggests
KIP405_CLUSTERS = {"kip405-plain": False, "kip405-zstd": True}  # cluster -> compression
STAND_IN = "KIP-405 with DirectoryRemoteStorageManager (ours, a local directory), Aiven's RSM unavailable here"


# -- children -------------------------------------------------------------------------------------------
def _count_gets() -> Any:
    """Count every presigned GET of this process (``GatewayClient.fetch``: the one path to S3 ranges)."""
    from tiered_kafka.client.gateway import GatewayClient

    counter = itertools.count()
    fetch = GatewayClient.fetch

    def counted(self: Any, planned: Any) -> bytes:
        next(counter)
        return fetch(self, planned)

    GatewayClient.fetch = counted  # type: ignore[method-assign]
    return counter


def child(kind: str, *args: Any) -> dict[str, Any]:
    counter = _count_gets()
    if kind == "confluent":
        result = child_confluent(*args)
    elif kind == "sdk":
        result = child_sdk(*args, DEFAULT_PREFETCH_MAX_BYTES, 4)
    elif kind == "bulk":
        from bench_bulk import child_bulk

        result = child_bulk(*args, 256 * MIB)
    else:
        raise SystemExit(f"unknown reader {kind}")
    result["client_gets"] = next(counter)
    return result


# -- the stack --------------------------------------------------------------------------------------------
@dataclass
class Stack:
    gateway: Any
    agent_cluster: str
    last: int
    segment_bytes: int
    bootstrap: str
    pids: dict[str, int]  # broker, S3 server, gateway
    log_dir: Path  # the broker's
    s3: Any  # the S3Server
    bucket: str
    storage: Path  # the RSM's directory

    def gateway_gets(self, cluster: str) -> int:
        """The gateway's own S3 GETs for ``cluster`` so far (its /metrics)."""
        from bench_gateway import gateway_s3_gets

        return gateway_s3_gets(self.gateway.port, cluster)


@contextlib.contextmanager
def kip405_stack(mib: int, segment_mib: int, value_bytes: int) -> Iterator[Stack]:
    """The stack with ``bench``-0 produced and uploaded by the agent (under :data:`AGENT_PREFIX`)."""
    from tests.support.gateway_process import GatewayProcess
    from tiered_kafka_dev.services import KafkaServer, RedisServer, S3Server
    from tiered_kafka_dev.services._kafka import KAFKA_VERSION
    from tiered_kafka_dev.services._kip405 import kip405_broker_config, rsm_classpath
    from tiered_kafka_gateway.config import load_settings

    segments = max(1, mib // segment_mib)
    with tempfile.TemporaryDirectory(prefix="bench-catchup-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        print(f"starting Redis, SeaweedFS and Kafka {KAFKA_VERSION} with KIP-405 ({value_bytes} B records) ...", file=sys.stderr, flush=True)
        redis_server = stack.enter_context(RedisServer())
        s3 = stack.enter_context(S3Server())
        storage = root / "rsm"
        kafka = stack.enter_context(KafkaServer(log_dir=root / "kafka-logs", heap="1g", config=kip405_broker_config(KAFKA_VERSION, storage),
                                                extra_classpath=rsm_classpath(KAFKA_VERSION)))
        bucket = s3.create_bucket("bench-catchup")
        cluster, info = produce_and_upload(kafka, redis_server.url, s3, bucket, segments, segment_mib, value_bytes, AGENT_PREFIX)
        keys = {"endpoint_url": s3.endpoint_url, "region": s3.region, "access_key_id": s3.access_key, "secret_access_key": s3.secret_key}
        clusters: dict[str, Any] = {cluster: {"redis_url": redis_server.url, "s3": {"bucket": bucket, "prefix": AGENT_PREFIX, "entropy_bits": 0, **keys}}}
        for name in KIP405_CLUSTERS:
            clusters[name] = {"kind": "kip405", "bootstrap_servers": kafka.bootstrap_servers, "rsm": {"bucket": bucket, "key_prefix": f"{name}/", **keys}}
        gateway = GatewayProcess(load_settings(clusters=clusters))
        stack.callback(gateway.stop)
        gateway.wait_ready()
        if kafka.pid is None:
            raise RuntimeError("Kafka is not running")
        pids = {"broker": kafka.pid, "S3 server": s3._proc.pid, "gateway": gateway.pid}  # noqa: SLF001
        yield Stack(gateway, cluster, info.latest_offset, info.total_bytes, kafka.bootstrap_servers, pids, kafka.log_dir, s3, bucket, storage)


def tier_and_lay_out(stack: Stack, segments: int) -> None:
    """Phase 2's set-up: remote storage on for ``bench`` (local retention 1 s), until the broker's disk keeps only
    the active segment and the RSM holds every rotated one; then each copy laid out as Aiven's RSM writes it, per
    ``kip405`` cluster, under the segment id Kafka published."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from tests.integration.rsm.test_kip405_real import _stage  # the fileset under Kafka's log.dir names, as the writer reads it
    from tests.support.rsm_writer import layout_rsm_segment, upload_rsm_segment
    from tiered_kafka_dev.services._kip405 import TIERED_TOPIC_DEFAULTS, remote_filesets

    admin = AdminClient({"bootstrap.servers": stack.bootstrap, "log_level": 3})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in TIERED_TOPIC_DEFAULTS.items()]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=entries)]).values():
        future.result(timeout=60)
    del admin
    print("tiering: the broker copies the rotated segments to its RSM and deletes them locally ...", file=sys.stderr, flush=True)
    deadline = time.monotonic() + 900
    while len(list((stack.log_dir / f"{TOPIC}-0").glob("*.log"))) != 1 or len([f for f in remote_filesets(stack.storage) if f.topic == TOPIC]) < segments:
        if time.monotonic() > deadline:
            raise SystemExit("the broker did not tier every segment within 15 minutes")
        time.sleep(1)
    client = stack.s3.client()
    with tempfile.TemporaryDirectory(prefix="bench-catchup-stage-") as staging:
        for fileset in (f for f in remote_filesets(stack.storage) if f.topic == TOPIC):
            for name, compression in KIP405_CLUSTERS.items():
                log = _stage(fileset, Path(staging) / name / fileset.segment_id)
                upload_rsm_segment(client, stack.bucket, layout_rsm_segment(
                    prefix=f"{name}/", topic=TOPIC, topic_id=fileset.topic_id, partition=0, segment_log=log, segment_id=fileset.segment_id,
                    chunk_size=RSM_CHUNK, compression=compression, broker_id=1))


# -- measuring --------------------------------------------------------------------------------------------
def idle_rates(stack: Stack, seconds: float) -> dict[str, float]:
    """CPU-s per second of each server while nobody reads."""
    before = {k: process_cpu_s(p) for k, p in stack.pids.items()}
    time.sleep(seconds)
    return {k: (process_cpu_s(p) - before[k]) / seconds for k, p in stack.pids.items()}


def ts_consumer(stack: Stack) -> dict[str, Any]:
    """Row c: Pinterest's ts-consumer (``_pinterest.TsConsumerHarness``, records counted, not printed) reading the
    agent's objects, which are Pinterest's layout (``tiered_kafka.keyspace``): its own elapsed time (from the
    consumer's creation; the JVM's start left out), the JVM's CPU-s (its start included), its GETs not counted."""
    import resource
    import subprocess

    from tiered_kafka.keyspace import Keyspace
    from tiered_kafka_dev.services._pinterest import ts_consumer_command

    command = ts_consumer_command(stack.bootstrap, stack.s3.endpoint_url, stack.bucket, Keyspace(AGENT_PREFIX, stack.agent_cluster, 0), TOPIC, 0, 0,
                                  stack.last + 1, print_records=False, heap="1g")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": stack.s3.access_key, "AWS_SECRET_ACCESS_KEY": stack.s3.secret_key, "AWS_REGION": stack.s3.region}
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    match = re.fullmatch(r"records=(\d+) elapsed_ms=(\d+)", summary)
    if done.returncode != 0 or match is None:
        raise SystemExit(f"ts-consumer failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    return {"records": int(match[1]), "elapsed": int(match[2]) / 1000, "cpu_s": cpu, "client_gets": None}


def written_bytes(pid: int) -> int:
    """Bytes process ``pid`` has written through write calls, sockets included (``/proc/<pid>/io`` wchar)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError(f"no wchar in /proc/{pid}/io")


def measure(stack: Stack, kind: str, cluster: str | None, *args: Any) -> dict[str, Any]:
    """One reader in its own process, with the servers' CPU-s, the bytes the S3 server wrote (what it served) and
    the gateway's GETs over its run."""
    before = {k: process_cpu_s(p) for k, p in stack.pids.items()}
    s3_written = written_bytes(stack.pids["S3 server"])
    gets_before = stack.gateway_gets(cluster) if cluster else 0
    busy, started = machine_busy(), time.perf_counter()
    result = ts_consumer(stack) if kind == "ts" else run_script_child(__file__, kind, *args)
    result["run_s"], result["machine_s"] = time.perf_counter() - started, machine_busy() - busy
    result["servers"] = {k: process_cpu_s(p) - before[k] for k, p in stack.pids.items()}
    result["s3_sent"] = written_bytes(stack.pids["S3 server"]) - s3_written
    result["gets"] = None if result["client_gets"] is None else result["client_gets"] + ((stack.gateway_gets(cluster) - gets_before) if cluster else 0)
    return result


def phase(stack: Stack, readers: dict[str, tuple[str, str | None, tuple[Any, ...]]], rounds: int, idle_s: float) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """Rounds alternating ``readers`` (row -> (child kind, gateway cluster, args)); the best round of each and the idle rates."""
    idle = idle_rates(stack, idle_s)
    runs: dict[str, list[dict[str, Any]]] = {row: [] for row in readers}
    for round_ in range(rounds):
        order = list(readers) if round_ % 2 == 0 else list(reversed(readers))
        for row in order:
            kind, cluster, args = readers[row]
            runs[row].append(measure(stack, kind, cluster, *args))
            if runs[row][-1]["records"] != stack.last + 1:
                raise SystemExit(f"{row} read {runs[row][-1]['records']} records, {stack.last + 1} were expected")
        print(f"  round {round_ + 1}: " + ", ".join(f"{row} {runs[row][-1]['elapsed']:.2f} s" for row in readers), file=sys.stderr, flush=True)
    return {row: min(rs, key=lambda r: r["elapsed"]) for row, rs in runs.items()}, idle


def measure_size(args: argparse.Namespace, value_bytes: int) -> tuple[Stack, dict[str, dict[str, Any]], dict[str, dict[str, float]]]:
    segments = max(1, args.mib // args.segment_mib)
    with kip405_stack(args.mib, args.segment_mib, value_bytes) as stack:
        url, last = stack.gateway.url, stack.last
        print(f"phase 1 (segments on the broker's disk): offsets 0..{last}, {args.rounds} rounds ...", file=sys.stderr, flush=True)
        rows1, idle1 = phase(stack, {
            "a": ("confluent", None, (stack.bootstrap, last)),
            **({"c": ("ts", None, ())} if pinterest_missing() is None else {}),
            "d": ("sdk", stack.agent_cluster, (url, stack.agent_cluster, last)),
            "e": ("bulk", stack.agent_cluster, (url, stack.agent_cluster, last)),
        }, args.rounds, args.idle_s)
        tier_and_lay_out(stack, segments)
        print(f"phase 2 (segments only in remote storage), {args.rounds} rounds ...", file=sys.stderr, flush=True)
        rows2, idle2 = phase(stack, {
            "b": ("confluent", None, (stack.bootstrap, last)),
            "d (phase 2)": ("sdk", stack.agent_cluster, (url, stack.agent_cluster, last)),
            **{f"4 {name}": ("sdk", name, (url, name, last)) for name in KIP405_CLUSTERS},
        }, args.rounds, args.idle_s)
    idle = {row: idle1 for row in rows1} | {row: idle2 for row in rows2}
    return stack, rows1 | rows2, idle


# -- report -----------------------------------------------------------------------------------------------
LABELS = {
    "a": "a. confluent-kafka, Kafka, segments on disk",
    "b": "b. confluent-kafka, Kafka KIP-405 (stand-in RSM)",
    "c": "c. Pinterest ts-consumer (agent's bucket)",
    "d": "d. TieredConsumer REMOTE_ONLY",
    "e": "e. bulk API",
    "d (phase 2)": "d. again, in phase 2",
    "4 kip405-plain": "4. TieredConsumer, kip405 cluster, plain",
    "4 kip405-zstd": "4. TieredConsumer, kip405 cluster, zstd",
}


def report(value_bytes: int, stack: Stack, rows: dict[str, dict[str, Any]], idle: dict[str, dict[str, float]]) -> None:
    records, mb = stack.last + 1, stack.segment_bytes / 1e6
    print(f"\n{records:,} records of {value_bytes} B, {mb:.1f} MB of segments; best round per row; {STAND_IN}")
    head = f"{'row':<46} {'records/s':>11} {'MB/s':>8} {'client CPU-s':>12} {'broker CPU-s':>12} {'(above idle)':>12} {'gateway CPU-s':>13} {'S3 server CPU-s':>15} {'S3 GETs':>8} {'S3 MB sent':>10} {'CPUs busy':>9}"
    print(head)
    for row, r in rows.items():
        above = r["servers"]["broker"] - idle[row]["broker"] * r["run_s"]
        print(f"{LABELS[row]:<46} {records / r['elapsed']:>11,.0f} {mb / r['elapsed']:>8.1f} {r['cpu_s']:>12.2f} {r['servers']['broker']:>12.2f} {above:>12.2f} "
              f"{r['servers']['gateway']:>13.2f} {r['servers']['S3 server']:>15.2f} {'n/a' if r['gets'] is None else r['gets']:>8} {r['s3_sent'] / 1e6:>10.1f} {r['machine_s'] / r['run_s']:>9.2f}")
    if "c" not in rows:
        print(f"{LABELS['c']:<46} not measured: {pinterest_missing()}")
    else:
        print("  (c: ts-consumer's own elapsed time, its JVM's start left out; client CPU-s of its whole JVM, start included; its S3 GETs not counted)")
    print("  (S3 MB sent: what SeaweedFS wrote over the reader's run, sockets included: /proc/<pid>/io wchar; its volume server and S3 API are one "
          "process here, so a byte served is written twice, volume to S3 API and S3 API to the reader: about 2x the bytes fetched)")
    print("  (CPUs busy: the whole machine's busy CPU-s over the reader's process, its start included, per second, of 2: other helpers' work included)")
    rate = {row: records / r["elapsed"] for row, r in rows.items()}
    goals = [("d / a", "d", "a", 1.0), ("d / b", "d (phase 2)", "b", 3.0), *([("d / c", "d", "c", 2.0)] if "c" in rows else []), ("e / a", "e", "a", 3.0),
             ("4 plain / b", "4 kip405-plain", "b", 3.0), ("4 zstd / b", "4 kip405-zstd", "b", 3.0)]
    for name, num, den, goal in goals:
        ratio = rate[num] / rate[den]
        print(f"goal {name:<12} {ratio:>6.2f}  >= {goal}  {'ok' if ratio >= goal else 'MISSED'}")
        if ratio < goal:
            print("  bound: " + bound(rows[num], rows[den], rate[den] * goal, records))
    if "c" not in rows:
        print("goal d / c      not measured (row c above)")
    for row in ("d", "e", "d (phase 2)", "4 kip405-plain", "4 kip405-zstd"):
        r = rows[row]
        above = r["servers"]["broker"] - idle[row]["broker"] * r["run_s"]
        if row.startswith("4"):
            verdict = "the reader sends it nothing; the gateway reads __remote_log_metadata from it"
        else:
            verdict = "ok: the reader has no bootstrap.servers and sends it nothing"
        print(f"goal broker CPU-s of {row:<14} 0: {above:>6.2f} above idle ({r['servers']['broker']:.2f} measured over {r['run_s']:.2f} s, idle "
              f"{idle[row]['broker']:.3f}/s); {verdict}")


def bound(r: dict[str, Any], ref: dict[str, Any], needed_rate: float, records: int) -> str:
    """What bounds row ``r``: its own CPU against its wall time, and the two CPUs it shares with the servers."""
    need_s = records / needed_rate
    servers = r["servers"]["gateway"] + r["servers"]["S3 server"]
    both = r["cpu_s"] + servers
    others = max(0.0, r["machine_s"] - both - r["servers"]["broker"])
    return (f"the reader used {r['cpu_s']:.2f} CPU-s in {r['elapsed']:.2f} s ({r['cpu_s'] / r['elapsed']:.0%} of one CPU), gateway + S3 server "
            f"{servers:.2f} CPU-s, {r['gets']} S3 GETs: {both:.2f} CPU-s on 2 shared CPUs is at least {both / 2:.2f} s; the goal asks {need_s:.2f} s "
            f"(the reference used {ref['cpu_s']:.2f} CPU-s, broker {ref['servers']['broker']:.2f}); over the reader's process "
            f"({r['run_s']:.2f} s with its start) the machine's other work took {others:.2f} CPU-s of the {2 * r['run_s']:.2f}")


@functools.cache
def pinterest_missing() -> str | None:
    """Why row c cannot run here (None: it can): Pinterest's harness launcher and its jars."""
    try:
        from tiered_kafka_dev.services._pinterest import consumer_classpath
    except ImportError as err:
        return f"no ts-consumer launcher ({err})"
    try:
        consumer_classpath()
    except Exception as err:  # noqa: BLE001 (a missing jar or javac: said, not fatal)
        return f"ts-consumer unavailable: {err}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024, help="MiB of rotated segments (about; whole segments)")
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--value-bytes", default="1024,100", help="record value sizes, one data set each (comma-separated)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=3.0, help="seconds of idle broker measured before each phase")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("child_args", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, *json.loads(args.child_args))))
        return
    for value_bytes in (int(v) for v in args.value_bytes.split(",")):
        stack, rows, idle = measure_size(args, value_bytes)
        report(value_bytes, stack, rows, idle)


if __name__ == "__main__":
    main()
