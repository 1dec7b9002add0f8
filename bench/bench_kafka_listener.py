"""The Kafka listener (issue 35): confluent-kafka reading one partition's history through the gateway's
Kafka-protocol listener, beside the same client reading Kafka's disk and Kafka's KIP-405 tiered storage.

    .venv/bin/python bench/bench_kafka_listener.py [--mib 1024] [--segment-mib 32] [--value-bytes 1024,100] [--rounds 2]

Set-up per record size (``--value-bytes``, each on a stack of its own): Redis, SeaweedFS, one Kafka 4.4
KRaft node with KIP-405 enabled (``bench_catchup``'s broker: its stand-in ``DirectoryRemoteStorageManager``
keeps tiered segments on the local disk, a lower bound on what an S3-backed RSM costs); ``bench``-0
produced (``bench_sdk.produce_partition``) and its rotated segments uploaded by our agent; one gateway
process whose cluster has a ``kafka_listener`` in REMOTE_ONLY mode (no ``bootstrap_servers``: it never
contacts the broker).

Phase 1 (segments on the broker's disk), rounds alternating:
  a. confluent-kafka from Kafka;  L. confluent-kafka through the listener.
Phase 2 (``remote.storage.enable`` with ``local.retention.ms`` 1 s: the broker tiers every rotated segment
and deletes it from its disk), rounds alternating:
  b. confluent-kafka from Kafka through KIP-405;  L. again.
Each reader is a process of its own (``bench_sdk.child_confluent``: the same client and settings for every
row); the best round counts. Per row: records/s, MB/s, CPU-seconds of the client, the broker (and above its
idle rate), the gateway (the listener's process) and the S3 server.
Goals: broker CPU above idle through the listener 0; the listener's CPU-s per GB at most the broker's own
CPU-s per GB serving its disk (row a); L's records/s at least 3x b's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_catchup import idle_rates  # noqa: E402
from bench_sdk import MIB, TOPIC, child_confluent, process_cpu_s, produce_and_upload, run_script_child  # noqa: E402
from bench_spark import machine_busy  # noqa: E402

GOAL_RATE = 3.0


@dataclass
class Stack:
    listener: str
    gateway_port: int
    cluster: str
    last: int
    segment_bytes: int
    bootstrap: str
    pids: dict[str, int]
    log_dir: Path
    storage: Path


@contextlib.contextmanager
def listener_stack(mib: int, segment_mib: int, value_bytes: int) -> Iterator[Stack]:
    from tests.support.gateway_process import GatewayProcess
    from tiered_kafka_dev.services import KafkaServer, RedisServer, S3Server
    from tiered_kafka_dev.services._kafka import KAFKA_VERSION
    from tiered_kafka_dev.services._kip405 import kip405_broker_config, rsm_classpath
    from tiered_kafka_dev.services._process import free_ports
    from tiered_kafka_gateway.config import load_settings

    segments = max(1, mib // segment_mib)
    with tempfile.TemporaryDirectory(prefix="bench-listener-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        print(f"starting Redis, SeaweedFS and Kafka {KAFKA_VERSION} with KIP-405 ({value_bytes} B records) ...", file=sys.stderr, flush=True)
        redis_server = stack.enter_context(RedisServer())
        s3 = stack.enter_context(S3Server())
        storage = root / "rsm"
        kafka = stack.enter_context(KafkaServer(log_dir=root / "kafka-logs", heap="1g", config=kip405_broker_config(KAFKA_VERSION, storage),
                                                extra_classpath=rsm_classpath(KAFKA_VERSION)))
        bucket = s3.create_bucket("bench-listener")
        cluster, info = produce_and_upload(kafka, redis_server.url, s3, bucket, segments, segment_mib, value_bytes, "tiered")
        keys = {"endpoint_url": s3.endpoint_url, "region": s3.region, "access_key_id": s3.access_key, "secret_access_key": s3.secret_key}
        (port,) = free_ports(1)
        clusters = {cluster: {"redis_url": redis_server.url, "s3": {"bucket": bucket, "prefix": "tiered", "entropy_bits": 0, **keys},
                              "kafka_listener": {"port": port, "mode": "REMOTE_ONLY"}}}
        gateway = GatewayProcess(load_settings(clusters=clusters))
        stack.callback(gateway.stop)
        gateway.wait_ready()
        if kafka.pid is None:
            raise RuntimeError("Kafka is not running")
        pids = {"broker": kafka.pid, "S3 server": s3._proc.pid, "gateway": gateway.pid}  # noqa: SLF001
        yield Stack(f"127.0.0.1:{port}", gateway.port, cluster, info.latest_offset, info.total_bytes, kafka.bootstrap_servers, pids, kafka.log_dir, storage)


def tier(stack: Stack, segments: int) -> None:
    """``remote.storage.enable`` on ``bench`` with 1 s local retention, until only the active segment is on disk."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

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


def measure(stack: Stack, bootstrap: str) -> dict[str, Any]:
    from bench_gateway import gateway_s3_gets

    gets = gateway_s3_gets(stack.gateway_port, stack.cluster)
    before = {k: process_cpu_s(p) for k, p in stack.pids.items()}
    busy, started = machine_busy(), time.perf_counter()
    result = run_script_child(__file__, "confluent", bootstrap, stack.last)
    result["run_s"], result["machine_s"] = time.perf_counter() - started, machine_busy() - busy
    result["servers"] = {k: process_cpu_s(p) - before[k] for k, p in stack.pids.items()}
    result["gets"] = gateway_s3_gets(stack.gateway_port, stack.cluster) - gets
    if result["records"] != stack.last + 1:
        raise SystemExit(f"read {result['records']} records, {stack.last + 1} were expected")
    return result


def phase(stack: Stack, readers: dict[str, str], rounds: int, idle_s: float) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    idle = idle_rates(stack, idle_s)  # type: ignore[arg-type]
    runs: dict[str, list[dict[str, Any]]] = {row: [] for row in readers}
    for round_ in range(rounds):
        for row in (list(readers) if round_ % 2 == 0 else list(reversed(readers))):
            runs[row].append(measure(stack, readers[row]))
        print(f"  round {round_ + 1}: " + ", ".join(f"{row} {runs[row][-1]['elapsed']:.2f} s" for row in readers), file=sys.stderr, flush=True)
    return {row: min(rs, key=lambda r: r["elapsed"]) for row, rs in runs.items()}, idle


LABELS = {"a": "a. confluent-kafka, Kafka, segments on disk", "L1": "L. confluent-kafka via the listener (phase 1)",
          "b": "b. confluent-kafka, Kafka KIP-405 (stand-in RSM)", "L2": "L. confluent-kafka via the listener (phase 2)"}


def report(value_bytes: int, stack: Stack, rows: dict[str, dict[str, Any]], idle: dict[str, dict[str, float]]) -> None:
    records, gb = stack.last + 1, stack.segment_bytes / 1e9
    print(f"\n{records:,} records of {value_bytes} B, {gb * 1000:.1f} MB of segments; best round per row; {os.cpu_count()} CPUs shared with other work")
    print(f"{'row':<48} {'records/s':>11} {'MB/s':>8} {'client CPU-s':>12} {'broker CPU-s':>12} {'(above idle)':>12} {'listener CPU-s':>14} "
          f"{'S3 server CPU-s':>15} {'S3 GETs':>8} {'CPU-s/GB (server)':>17}")
    above: dict[str, float] = {}
    for row, r in rows.items():
        above[row] = r["servers"]["broker"] - idle[row]["broker"] * r["run_s"]
        server = r["servers"]["gateway"] if row.startswith("L") else above[row]
        print(f"{LABELS[row]:<48} {records / r['elapsed']:>11,.0f} {gb * 1000 / r['elapsed']:>8.1f} {r['cpu_s']:>12.2f} {r['servers']['broker']:>12.2f} "
              f"{above[row]:>12.2f} {r['servers']['gateway']:>14.2f} {r['servers']['S3 server']:>15.2f} {r['gets']:>8} {server / gb:>17.2f}")
    print("  (CPU-s/GB (server): the listener's process for L rows, the broker's above idle for a and b; S3 GETs: the listener's own)")
    for row in ("L1", "L2"):
        print(f"goal broker CPU-s above idle through the listener ({row}) 0: {above[row]:.2f} "
              f"({rows[row]['servers']['broker']:.2f} measured over {rows[row]['run_s']:.2f} s, idle {idle[row]['broker']:.3f}/s)")
    listener_per_gb = min(rows["L1"]["servers"]["gateway"], rows["L2"]["servers"]["gateway"]) / gb
    broker_per_gb = above["a"] / gb
    print(f"goal listener CPU-s/GB <= broker's from disk: {listener_per_gb:.2f} vs {broker_per_gb:.2f}  {'ok' if listener_per_gb <= broker_per_gb else 'MISSED'}")
    ratio = (records / rows["L2"]["elapsed"]) / (records / rows["b"]["elapsed"])
    print(f"goal records/s L / b {ratio:.2f} >= {GOAL_RATE}  {'ok' if ratio >= GOAL_RATE else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--value-bytes", default="1024,100")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("child_args", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child_confluent(*json.loads(args.child_args))))
        return
    for value_bytes in (int(v) for v in args.value_bytes.split(",")):
        with listener_stack(args.mib, args.segment_mib, value_bytes) as stack:
            print(f"phase 1 (segments on the broker's disk): offsets 0..{stack.last}, {args.rounds} rounds ...", file=sys.stderr, flush=True)
            rows1, idle1 = phase(stack, {"a": stack.bootstrap, "L1": stack.listener}, args.rounds, args.idle_s)
            tier(stack, max(1, args.mib // args.segment_mib))
            print(f"phase 2 (segments only in remote storage), {args.rounds} rounds ...", file=sys.stderr, flush=True)
            rows2, idle2 = phase(stack, {"b": stack.bootstrap, "L2": stack.listener}, args.rounds, args.idle_s)
        report(value_bytes, stack, rows1 | rows2, {row: idle1 for row in rows1} | {row: idle2 for row in rows2})


if __name__ == "__main__":
    main()
