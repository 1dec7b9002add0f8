"""Spark: ``format("tiered-kafka")`` beside Spark's own Kafka source, ``format("kafka")``, on the same topic
(issue 25, benchmarks 2 and 3), batch and streaming, in one run.

    .venv/bin/python bench/bench_spark_kafka.py [--mib 256] [--partitions 4] [--segment-mib 16] [--rounds 2] [--triggers 6] [--no-stream]

Set-up: Redis, SeaweedFS and one Apache Kafka 4.4 KRaft node (``KafkaServer``, 1 GiB of heap, segments on
its disk); ``bench`` produced with confluent-kafka (``bench_sdk.produce_partition``: ``--partitions``
partitions, each ``--mib`` / partitions MiB in rotated ``--segment-mib`` segments of uncompressed ~16 KiB
batches of 1 KiB records); our agent uploads the rotated segments from Kafka's log.dir
(``bench_spark.upload``); the gateway on uvicorn (``bench_gateway.gateway``). One local[2] SparkSession
(``tiered_kafka.spark.session.local_session``, the project's settings) with Spark's Kafka source of the
installed pyspark's version on ``spark.jars`` (``dev/java/spark-sql-kafka-<version>.pom.xml``, resolved by
``dev/install.sh``; 4.2.0 for the pinned pyspark) reads with both formats, same
options apart from where the data is (``tiered.gateway.url`` + ``tiered.cluster`` vs
``kafka.bootstrap.servers``), every column into the ``noop`` sink. Spark's Kafka source takes its
defaults (one task per Kafka partition, its consumer cache), as ours does (one Spark partition per Kafka
partition).

2. **Batch**: ``spark.read`` with ``endingOffsets`` = the rotated segments' end per partition (both read
   exactly the offsets remote storage holds); rounds alternate the two formats after one warm-up read of
   each; best round. Rows/s, and CPU-s by process: Spark's JVM, its Python workers, the Kafka broker,
   SeaweedFS, the gateway (``bench_spark.CpuMeter``). **Goal: tiered-kafka >= 1.5 x kafka.**
3. **Streaming** (``bench_spark_stream``'s runs, the format a parameter): ``readStream`` from earliest with
   the same ``maxOffsetsPerTrigger`` (records / ``--triggers``), steady state (end of the first micro-batch
   to the end of the last), and a whole AvailableNow query (``start()`` to its end). A stream reads to
   its source's latest: Kafka's high watermarks (the active segments too) for ``kafka``, remote storage's
   end for ``tiered-kafka``, so each is checked against its own row count and compared by rows/s.
   **Goal: tiered-kafka >= 1.0 x kafka, in both.**

The machine has 2 CPUs shared with other work: every process above competes for them, so where a goal
is missed the bench prints the CPU-s each process used and the wall time they allow at best.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_spark import MIB, TOPIC, upload  # noqa: E402
from bench_spark_stream import Run, available_now_run, batch_run, steady_run  # noqa: E402

KINDS = ["Spark JVM", "Python workers", "ended", "Kafka broker", "SeaweedFS", "gateway", "this script"]
BATCH_GOAL, STREAM_GOAL = 1.5, 1.0


def spark_kafka_jars() -> str:
    """Spark's Kafka source and what it needs beyond PySpark's jars, comma-separated for ``spark.jars``."""
    from tiered_kafka_dev.services._kafka import java_cache_dir

    import pyspark

    name = f"spark-sql-kafka-{pyspark.__version__}"  # Spark's Kafka source must be of Spark's own version
    directory = java_cache_dir() / name
    jars = sorted(directory.glob("*.jar")) if (directory / ".complete").is_file() else []
    if not jars:
        raise SystemExit(f"Spark's Kafka source is not in {directory}: run `bash dev/install.sh` (dev/java/{name}.pom.xml)")
    return ",".join(str(j) for j in jars)


RETRIES: list[str] = []
"""Stream runs started again (printed with the results)."""


def stream_with_retry(what: str, run: Callable[[Path], Run], checkpoint: Path) -> Run:
    """``run(checkpoint)``, started again (a fresh checkpoint) when Spark's driver-side Python runner did not connect
    back: Spark waits a fixed 10 s for it (``PythonWorkerFactory.createSimpleWorker``), which a Python start on an
    overloaded machine can exceed. Each retry is recorded in :data:`RETRIES`."""
    for attempt in range(3):
        try:
            return run(checkpoint.with_name(f"{checkpoint.name}-{attempt}"))
        except Exception as err:
            if "failed to connect back" not in str(err) or attempt == 2:
                raise
            RETRIES.append(what)
            print(f"  {what}: Spark's Python runner did not connect back within Spark's fixed 10 s; started again", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def cpu_line(run: Run) -> str:
    return ", ".join(f"{k} {run.cpu.by_kind.get(k, 0.0):.2f}" for k in KINDS if run.cpu.by_kind.get(k, 0.0) >= 0.005) + f"; other processes {run.cpu.others:.2f}"


def compare(label: str, ours: Run, theirs: Run, goal: float) -> None:
    """The two rows, the ratio against ``goal`` and, when missed, what bounds ours."""
    ratio = ours.rate / theirs.rate
    print(f"{label}")
    for name, run in (("tiered-kafka", ours), ("kafka", theirs)):
        print(f"  {name:<13}{run.seconds:>8.2f} s {run.rows:>10} rows {run.rate:>11,.0f} rows/s   CPU-s {run.cpu.ours:.2f}: {cpu_line(run)}")
    print(f"  tiered-kafka / kafka: {ratio:.2f}   goal >= {goal}: {'met' if ratio >= goal else 'NOT met'}")
    if ratio < goal:
        cpus = os.cpu_count() or 1
        available = cpus * ours.seconds
        largest, share = max(ours.cpu.by_kind.items(), key=lambda kv: kv[1])
        print(f"  bound: in its {ours.seconds:.2f} s the {cpus} CPUs had {available:.2f} CPU-s: its processes used {ours.cpu.ours:.2f} (most: {largest} "
              f"{share:.2f}), other work on the machine {ours.cpu.others:.2f}, idle {max(0.0, available - ours.cpu.ours - ours.cpu.others):.2f}; "
              f"alone on the CPUs it needs at least {ours.cpu.ours / cpus:.2f} s, the goal asks {ours.rows / (goal * theirs.rate):.2f} s "
              f"(kafka's processes used {theirs.cpu.ours:.2f} CPU-s, other work {theirs.cpu.others:.2f} in its {theirs.seconds:.2f} s); "
              f"without the S3 server's {ours.cpu.by_kind.get('SeaweedFS', 0.0):.2f} CPU-s (S3 on other machines, as in production) at least "
              f"{(ours.cpu.ours - ours.cpu.by_kind.get('SeaweedFS', 0.0)) / cpus:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256, help="MiB of rotated segments in all")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--triggers", type=int, default=6, help="micro-batches of the steady-state streams (maxOffsetsPerTrigger = records / this)")
    parser.add_argument("--no-stream", action="store_true", help="batch only")
    args = parser.parse_args()
    jars = spark_kafka_jars()
    from confluent_kafka import Consumer, TopicPartition

    from bench_agent import start_services
    from bench_gateway import gateway, write_gateway_config
    from bench_sdk import produce_partition
    from tiered_kafka.spark.session import local_session
    from tiered_kafka_dev.services import KafkaServer

    segments = max(1, args.mib // args.segment_mib // args.partitions)
    with tempfile.TemporaryDirectory(prefix="bench-spark-kafka-") as tmp, contextlib.ExitStack() as stack:
        redis_server, s3, bucket = start_services(stack, "bench-spark-kafka")
        kafka = stack.enter_context(KafkaServer(log_dir=Path(tmp) / "kafka-logs", heap="1g"))
        print(f"producing {args.partitions} partitions of {segments} segments of ~{args.segment_mib} MiB to Kafka ...", file=sys.stderr, flush=True)
        produce_partition(kafka.bootstrap_servers, kafka.log_dir / f"{TOPIC}-0", segments, args.segment_mib * MIB, 1024, args.partitions)
        cluster = f"bench-{uuid.uuid4().hex[:8]}"
        print("the agent uploads the rotated segments ...", file=sys.stderr, flush=True)
        agent, registry = upload(kafka.log_dir, redis_server.url, s3, bucket, cluster, args.partitions)
        ends = {p: registry.partition_info(TOPIC, p).latest_offset + 1 for p in range(args.partitions)}  # type: ignore[union-attr]
        records = sum(ends.values())
        stored = sum(s.size for p in range(args.partitions) for s in registry.segments(TOPIC, p))
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "bench-watermarks"})
        try:
            kafka_records = sum(consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(args.partitions))
        finally:
            consumer.close()
        config = write_gateway_config(Path(tmp) / "gateway.json", cluster, redis_server.url, s3, bucket, agent)
        port = stack.enter_context(gateway(config, 1))
        ending = json.dumps({TOPIC: {str(p): end for p, end in ends.items()}})
        ours = {"tiered.gateway.url": f"http://127.0.0.1:{port}", "tiered.cluster": cluster, "subscribe": TOPIC}
        theirs = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": TOPIC}
        spark = local_session("local[2]", "bench-spark-kafka", **{"spark.jars": jars})
        batches: dict[str, list[Run]] = {"tiered-kafka": [], "kafka": []}
        steady: dict[str, list[Run]] = {"tiered-kafka": [], "kafka": []}
        whole: dict[str, list[Run]] = {"tiered-kafka": [], "kafka": []}
        sources = {"tiered-kafka": (ours, records), "kafka": (theirs, kafka_records)}
        try:
            print("warm-up: one batch read of each ...", file=sys.stderr, flush=True)
            for fmt, (options, _rows) in sources.items():
                batch_run(spark, {**options, "startingOffsets": "earliest", "endingOffsets": ending}, records, fmt)
            for i in range(args.rounds):
                for fmt in (list(sources) if i % 2 == 0 else list(reversed(sources))):
                    batches[fmt].append(batch_run(spark, {**sources[fmt][0], "startingOffsets": "earliest", "endingOffsets": ending}, records, fmt))
                print(f"  batch round {i + 1}: " + ", ".join(f"{fmt} {runs[-1].seconds:.2f} s" for fmt, runs in batches.items()), file=sys.stderr, flush=True)
            if not args.no_stream:
                per_trigger = -(-records // args.triggers)
                print(f"streams: maxOffsetsPerTrigger {per_trigger}, warm-up then {args.rounds} rounds ...", file=sys.stderr, flush=True)
                for i in range(args.rounds + 1):
                    for fmt in (list(sources) if i % 2 == 0 else list(reversed(sources))):
                        options, rows = sources[fmt]
                        run_whole = stream_with_retry(f"{fmt} AvailableNow", lambda cp: available_now_run(spark, options, rows, cp, fmt), Path(tmp) / f"cp-{fmt}-now-{i}")
                        run_steady = stream_with_retry(f"{fmt} steady", lambda cp: steady_run(spark, options, rows, cp, per_trigger, fmt), Path(tmp) / f"cp-{fmt}-steady-{i}")
                        if i:  # round 0 warms both up
                            whole[fmt].append(run_whole)
                            steady[fmt].append(run_steady)
                    if i:
                        print(f"  stream round {i}: " + ", ".join(f"{fmt} AvailableNow {whole[fmt][-1].seconds:.2f} s, steady {steady[fmt][-1].seconds:.2f} s"
                                                                 for fmt in sources), file=sys.stderr, flush=True)
        finally:
            spark.stop()

    print(f"spark beside Spark's Kafka source: {records} records of 1 KiB ({stored / 1e6:.0f} MB of rotated segments, {args.partitions} partitions, "
          f"segments of ~{args.segment_mib} MiB; Kafka holds {kafka_records}, its active segments too), local[2], one session, best of {args.rounds} "
          f"alternating rounds after a warm-up; {os.cpu_count()} CPUs shared with Kafka, SeaweedFS, the gateway and other work")
    best = {fmt: min(runs, key=lambda r: r.seconds) for fmt, runs in batches.items()}
    compare("2. batch read (noop sink), the same offsets", best["tiered-kafka"], best["kafka"], BATCH_GOAL)
    if not args.no_stream:
        best_now = {fmt: max(runs, key=lambda r: r.rate) for fmt, runs in whole.items()}
        best_steady = {fmt: max(runs, key=lambda r: r.rate) for fmt, runs in steady.items()}
        micro = best_steady["tiered-kafka"].extra["micro_batches"]
        compare(f"3. stream, steady state (maxOffsetsPerTrigger {-(-records // args.triggers)}, {micro - 1} of {micro} micro-batches)",
                best_steady["tiered-kafka"], best_steady["kafka"], STREAM_GOAL)
        compare("3. stream, whole AvailableNow query (one micro-batch, start and stop included)", best_now["tiered-kafka"], best_now["kafka"], STREAM_GOAL)
        print("  ended: processes that ended within the run: a tiered-kafka stream's driver-side Python runner, a new process per query "
              "(bench_spark_stream's module doc); Spark's Kafka source runs in the JVM only")
        if RETRIES:
            print(f"  streams started again after Spark's Python runner missed its fixed 10 s to connect back (machine overloaded): {', '.join(RETRIES)}")
        for fmt in sources:
            phases = best_steady[fmt].extra["phases"]
            print(f"  {fmt} steady state per micro-batch (durationMs, s): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(phases.items()) if v >= 0.005))


if __name__ == "__main__":
    main()
