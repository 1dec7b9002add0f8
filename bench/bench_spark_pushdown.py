"""Spark filter pushdown benchmark: bytes a timestamp-filtered batch query fetches ÷ bytes of the
segments holding its matching records. Goal: at most 1.2.

    .venv/bin/python bench/bench_spark_pushdown.py [--hours 24] [--mib-per-hour 1] [--partitions 2] [--segment-kib 256]

It starts Redis and SeaweedFS, writes a topic with the format core's log.dir writer whose records
are stamped hour by hour (``--hours`` hours ending now, ``--mib-per-hour`` MiB of 1 KiB records
per hour and partition, timestamps non-decreasing), has the agent upload it and the gateway serve
it (as ``bench_spark.py`` does), and then, on Spark local[2], runs three queries of one hour each
(``timestamp >= h AND timestamp < h + 1 hour``):

1. the last hour (the usual "recent data" query);
2. an hour in the middle, with the default, conservative rule (``pushdown`` module doc, rule 4:
   the read starts at the hour's first record and runs to the end, since timestamps may be out of
   order);
3. the same hour with ``tiered.timestampsOrdered=true`` (the end is cut too).

For each: the bytes fetched (the query's planned GETs, planned in this process by the same reader
Spark's pushdown worker runs, then fetched with ``GatewayClient.fetch``: their bytes are counted,
not assumed), the bytes of the registered segments holding a record of the hour, their ratio, the
rows (checked against what was written), and the Spark query's wall seconds and CPU seconds (this
script's descendants, from /proc) writing to Spark's ``noop`` sink. The goal (<= 1.2) is judged
on each line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
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
    from tiered_kafka.format.log_config import LogConfig
    from tiered_kafka.format.log_writer import PartitionLog

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
    return per_hour


def matching_bytes(registry: Any, partitions: int, low: int, high: int) -> int:
    """Bytes of the registered segments holding a record stamped in [low, high]: records are
    stamped in order here, so a segment holds one iff [first batch's base timestamp, max timestamp]
    meets the range (the registry's ``min_timestamp`` is the first of those)."""
    return sum(s.size for p in range(partitions) for s in registry.segments(TOPIC, p) if s.min_timestamp <= high and s.max_timestamp >= low)


def fetched_bytes(options: dict[str, str], start: dt.datetime, end: dt.datetime) -> tuple[int, int]:
    """(bytes fetched, GETs) by the query's planned GETs, planned as Spark's pushdown worker plans them."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from tiered_kafka.gateway_client import GatewayClient
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
    args = parser.parse_args()
    from bench_gateway import gateway  # the gateway on uvicorn in a subprocess

    from tiered_kafka.spark.session import local_session
    from tiered_kafka_dev.services import RedisServer, S3Server

    base_ms = (int(time.time() * 1000) // HOUR_MS - args.hours) * HOUR_MS
    lines = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        print("starting Redis and SeaweedFS ...", file=sys.stderr, flush=True)
        redis_server = stack.enter_context(RedisServer())
        s3 = stack.enter_context(S3Server())
        bucket = s3.create_bucket("bench-pushdown")
        log_dir = Path(tmp) / "logs"
        print(f"writing {args.hours} hours x {args.mib_per_hour} MiB x {args.partitions} partitions, uploading ...", file=sys.stderr, flush=True)
        per_hour = write_topic(log_dir, args.partitions, args.hours, int(args.mib_per_hour * KIB * KIB), args.segment_kib * KIB, base_ms)
        cluster = f"bench-{uuid.uuid4().hex[:8]}"
        agent, registry = upload(log_dir, redis_server.url, s3, bucket, cluster, args.partitions)
        segments = [s for p in range(args.partitions) for s in registry.segments(TOPIC, p)]
        stored = sum(s.size for s in segments)
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"clusters": {cluster: {
            "redis_url": redis_server.url,
            "s3": {"bucket": bucket, "prefix": agent.s3.prefix, "entropy_bits": agent.s3.entropy_bits, "endpoint_url": s3.endpoint_url,
                   "region": s3.region, "access_key_id": s3.access_key, "secret_access_key": s3.secret_key},
        }}}))
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
    print("  (the middle hour without timestampsOrdered reads from the hour to the end of the topic: timestamps may be out of order, "
          "and no metadata bounds where the last match is; pushdown module doc, rule 4)")


if __name__ == "__main__":
    main()
