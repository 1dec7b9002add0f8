"""Spark filter pushdown benchmark: bytes a timestamp-filtered batch query fetches ÷ bytes of the
segments holding its matching records. Goal: at most 1.2.

    .venv/bin/python bench/bench_spark_pushdown.py [--hours 24] [--mib-per-hour 1] [--partitions 2] [--segment-kib 256] [--agent-mib 256]

It starts Redis and SeaweedFS, writes a topic with the format core's log.dir writer whose records
are stamped hour by hour (``--hours`` hours ending now, ``--mib-per-hour`` MiB of 1 KiB records
per hour and partition, timestamps non-decreasing), has the agent upload it and the gateway serve
it (as ``bench_spark.py`` does), and then, on Spark local[2], runs three queries of one hour each
(``timestamp >= h AND timestamp < h + 1 hour``):

1. the last hour (the usual "recent data" query);
2. an hour in the middle, with the default rule (``pushdown`` module doc, rules 4-5: the read
   starts at the hour's first record and skips the segments whose exact [min, max] record
   timestamps miss the hour, mid-partition too);
3. the same hour with ``tiered.timestampsOrdered=true`` (the end is also cut at batch level).

For each: the bytes fetched (the query's planned GETs, planned in this process by the same reader
Spark's pushdown worker runs, then fetched with ``GatewayClient.fetch``: their bytes are counted,
not assumed), the bytes of the registered segments holding a record of the hour, their ratio, the
rows (checked against what was written), and the Spark query's wall seconds and CPU seconds (this
script's descendants, from /proc) writing to Spark's ``noop`` sink. The goal (<= 1.2) is judged
on each line.

First, the agent's cost of exact minimum timestamps (``local_segments.MinTimestamp``: every
record's timestamp decoded by the columnar decoder): ``read_stats`` CPU seconds per GiB on a
generated ``--agent-mib`` MiB segment (16 records of 1 KiB per batch, CreateTime), uncompressed
and zstd, beside the same scan taking batch base timestamps only (the rule before), measured in
the same run (best of 3, page cache warm).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_spark import TOPIC, CpuMeter, upload  # noqa: E402  (the same agent upload and CPU accounting)

KIB = 1024
HOUR_MS = 3_600_000
RECORD_BYTES = 1024
BATCH_RECORDS = 16
GOAL = 1.2


def write_topic(log_dir: Path, partitions: int, hours: int, bytes_per_hour: int, segment_bytes: int, base_ms: int) -> dict[int, int]:
    """Hour h's records (per partition) stamped base_ms + h hours + their index (ms); returns records per hour and partition."""
    from tiered_kafka_dev.kafka_log.log_config import LogConfig
    from tiered_kafka_dev.kafka_log.log_writer import PartitionLog

    text = b"the quick brown fox jumps over the lazy dog " * 12
    batch_bytes = BATCH_RECORDS * (RECORD_BYTES + 30)
    batches_per_hour = max(1, bytes_per_hour // batch_bytes)
    per_hour = {}
    for p in range(partitions):
        plog = PartitionLog.create(log_dir / f"{TOPIC}-{p}", LogConfig(segment_bytes=segment_bytes, retention_ms=-1))
        for h in range(hours):
            for b in range(batches_per_hour):
                builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
                for i in range(BATCH_RECORDS):
                    stamp = base_ms + h * HOUR_MS + b * BATCH_RECORDS + i
                    builder.append(i, timestamp=stamp, key=f"k{h}-{b}-{i}".encode(), value=os.urandom(RECORD_BYTES // 2) + text[: RECORD_BYTES // 2], headers=[])
                plog.append(bytes(builder.build()))
            per_hour[h] = batches_per_hour * BATCH_RECORDS
        plog.roll()
        plog.close()
    from tiered_kafka_dev.kafka_log.high_watermarks import checkpoint_high_watermarks

    checkpoint_high_watermarks(log_dir)  # as a broker would: the agent uploads only up to the high watermark
    return per_hour


def matching_bytes(registry: Any, partitions: int, low: int, high: int) -> int:
    """Bytes of the registered segments holding a record stamped in [low, high]: a segment holds
    one iff its exact [min_timestamp, max_timestamp] meets the range, records being stamped in
    order here (every stamp between two of a segment's is one of its records')."""
    return sum(s.size for p in range(partitions) for s in registry.segments(TOPIC, p) if s.min_timestamp <= high and s.max_timestamp >= low)


def agent_cpu(mib: int, codec: int) -> tuple[float, float, int]:
    """(CPU s per GiB of read_stats with exact minimums, the same with base timestamps only, batches)
    on a generated segment of ``mib`` MiB compressed with ``codec`` (0 none, 4 zstd)."""
    import resource

    from tiered_kafka_dev.kafka_log.log_config import LogConfig
    from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
    from tiered_kafka_agent import local_segments

    class BaseTimestamps(local_segments.MinTimestamp):
        """The rule before: each batch's baseTimestamp, header only."""

        def add(self, view: memoryview, batch: Any) -> None:
            if batch.magic >= 2:
                self._take(batch.base_timestamp)

        def flush(self, view: memoryview) -> None:
            pass

    text = b"the quick brown fox jumps over the lazy dog " * 12
    with tempfile.TemporaryDirectory() as tmp:
        plog = PartitionLog.create(Path(tmp) / "agent-0", LogConfig(segment_bytes=2**31 - 1, retention_ms=-1))
        batches = 0
        while plog.size < mib * KIB * KIB:
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
            for i in range(BATCH_RECORDS):
                builder.append(i, timestamp=1_700_000_000_000 + batches * BATCH_RECORDS + (i * 7) % BATCH_RECORDS, key=b"k%d" % i,
                               value=os.urandom(RECORD_BYTES // 2) + text[: RECORD_BYTES // 2], headers=[])  # fmt: skip
            plog.append(bytes(builder.build()))
            batches += 1
        plog.roll()
        plog.close()
        segments, _ = local_segments.list_segments(Path(tmp) / "agent-0")
        size = 0

        def cpu(rule: type) -> float:
            nonlocal size
            original = local_segments.MinTimestamp
            local_segments.MinTimestamp = rule  # type: ignore[misc]
            try:
                best = float("inf")
                for _ in range(3):
                    with local_segments.open_segment(segments[0]) as opened:
                        before = resource.getrusage(resource.RUSAGE_SELF)
                        stats = local_segments.read_stats(opened)
                        after = resource.getrusage(resource.RUSAGE_SELF)
                    size = stats.size
                    best = min(best, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                return best
            finally:
                local_segments.MinTimestamp = original  # type: ignore[misc]

        cpu(BaseTimestamps)  # page cache warm-up
        base, exact = cpu(BaseTimestamps), cpu(local_segments.MinTimestamp)
    gib = size / KIB**3
    return exact / gib, base / gib, batches


def fetched_bytes(options: dict[str, str], start: dt.datetime, end: dt.datetime) -> tuple[int, int]:
    """(bytes fetched, GETs) by the query's planned GETs, planned as Spark's pushdown worker plans them."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from tiered_kafka.client.gateway import GatewayClient
    from tiered_kafka.spark.datasource import TieredKafkaPushdownReader
    from tiered_kafka.spark.options import parse_options
    from tiered_kafka.spark.reading import task_gets

    reader = TieredKafkaPushdownReader(parse_options(options))
    list(reader.pushFilters([GreaterThanOrEqual(("timestamp",), start), LessThan(("timestamp",), end)]))
    gets = [planned for partition in reader.partitions() for _piece, _key, planned in task_gets(partition.task)]  # type: ignore[attr-defined]
    with GatewayClient(options["tiered.gateway.url"], options["tiered.cluster"]) as client:
        return sum(len(client.fetch(planned)) for planned in gets), len(gets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--mib-per-hour", type=float, default=1.0, help="MiB per hour and partition")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--segment-kib", type=int, default=256)
    parser.add_argument("--agent-mib", type=int, default=256, help="size of the segment the agent's CPU is measured on (0: skip)")
    args = parser.parse_args()
    if args.agent_mib:
        print(f"agent: read_stats CPU on a generated {args.agent_mib} MiB segment ({BATCH_RECORDS} x 1 KiB records per batch, CreateTime); best of 3")
        print(f"{'codec':8}{'exact min s/GiB':>17}{'base-only s/GiB':>17}{'added s/GiB':>13}{'ratio':>8}")
        for name, codec in (("none", 0), ("zstd", 4)):
            exact, base, _batches = agent_cpu(args.agent_mib, codec)
            print(f"{name:8}{exact:>17.2f}{base:>17.2f}{exact - base:>13.2f}{exact / base:>8.2f}")
        sys.stdout.flush()
    from bench_agent import start_services  # the same services
    from bench_gateway import gateway, write_gateway_config  # the gateway on uvicorn in a subprocess

    from tiered_kafka.spark.session import local_session

    base_ms = (int(time.time() * 1000) // HOUR_MS - args.hours) * HOUR_MS
    lines = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        redis_server, s3, bucket = start_services(stack, "bench-pushdown")
        log_dir = Path(tmp) / "logs"
        print(f"writing {args.hours} hours x {args.mib_per_hour} MiB x {args.partitions} partitions, uploading ...", file=sys.stderr, flush=True)
        per_hour = write_topic(log_dir, args.partitions, args.hours, int(args.mib_per_hour * KIB * KIB), args.segment_kib * KIB, base_ms)
        cluster = f"bench-{uuid.uuid4().hex[:8]}"
        agent, registry = upload(log_dir, redis_server.url, s3, bucket, cluster, args.partitions)
        segments = [s for p in range(args.partitions) for s in registry.segments(TOPIC, p)]
        stored = sum(s.size for s in segments)
        config = write_gateway_config(Path(tmp) / "gateway.json", cluster, redis_server.url, s3, bucket, agent)
        port = stack.enter_context(gateway(config, 1))
        options = {"tiered.gateway.url": f"http://127.0.0.1:{port}", "tiered.cluster": cluster, "subscribe": TOPIC}
        from pyspark.sql import functions as F

        spark = local_session("local[2]", "bench-pushdown")
        try:
            spark.read.format("tiered-kafka").options(**options).load().where(F.col("partition") == 0).write.format("noop").mode("overwrite").save()  # warm-up
            middle = args.hours // 2
            queries = [("last hour", args.hours - 1, {}), ("middle hour", middle, {}), ("middle hour, timestampsOrdered", middle, {"tiered.timestampsOrdered": "true"})]
            for name, hour, extra in queries:
                opts = {**options, **extra}
                start = dt.datetime.fromtimestamp((base_ms + hour * HOUR_MS) / 1000, tz=dt.UTC)
                end = start + dt.timedelta(hours=1)
                df = spark.read.format("tiered-kafka").options(**opts).load().where((F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") < F.lit(end)))
                with CpuMeter() as meter:
                    started = time.perf_counter()
                    df.write.format("noop").mode("overwrite").save()
                    wall = time.perf_counter() - started
                rows = df.count()
                expected_rows = per_hour[hour] * args.partitions
                if rows != expected_rows:
                    raise SystemExit(f"{name}: {rows} rows, {expected_rows} written in that hour")
                fetched, gets = fetched_bytes(opts, start, end)
                matching = matching_bytes(registry, args.partitions, base_ms + hour * HOUR_MS, base_ms + (hour + 1) * HOUR_MS - 1)
                lines.append((name, fetched, gets, matching, rows, wall, meter.ours))
        finally:
            spark.stop()

    print(f"spark pushdown benchmark: {args.hours} hours x {args.mib_per_hour} MiB x {args.partitions} partitions "
          f"({stored / 1e6:.1f} MB stored in {len(segments)} segments of ~{args.segment_kib} KiB); local[2]; one-hour timestamp filters")
    print(f"{'query':34}{'fetched MB':>11}{'GETs':>6}{'matching MB':>13}{'ratio':>8}{'rows':>8}{'wall s':>8}{'CPU s':>7}  goal <= {GOAL}")
    for name, fetched, gets, matching, rows, wall, cpu in lines:
        ratio = fetched / matching
        print(f"{name:34}{fetched / 1e6:>11.2f}{gets:>6}{matching / 1e6:>13.2f}{ratio:>8.2f}{rows:>8}{wall:>8.2f}{cpu:>7.2f}  {'met' if ratio <= GOAL else 'NOT met'}")
    print("  (without timestampsOrdered, segments are skipped by their exact [min, max] record timestamps, pushdown module doc, rule 5; "
          "with it, the end is also cut at batch level)")


if __name__ == "__main__":
    main()
