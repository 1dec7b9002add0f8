"""The Spark part of ``make run``: read a topic through the ``tiered-kafka`` data source, then
backfill it to Parquet and check the row counts against the registry.

Called by ``tiered_kafka_dev.stack`` once the gateway is up::

    spark_demo(gateway_url, cluster, "demo", redis_url, output_dir)

It starts a local[2] SparkSession (quiet logs; ~10-20 s), prints per partition the rows read,
the first and last offsets and the bytes of keys and values, runs
``tiered_kafka.spark.backfill`` into ``output_dir/parquet`` and prints the count check. A session
that was already active is used and left running; one started here is stopped.

The SIGINT handler in force before is restored on the way out (``sigint_handler_kept``):
PySpark's SparkContext, created in the main thread, installs its own handler, which cancels the
context's jobs and raises KeyboardInterrupt, and leaves it installed after ``spark.stop()``; a
later Ctrl-C then called ``cancelAllJobs`` on a stopped context and printed a traceback instead
of stopping the stack in order.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from tiered_kafka.registry import Registry
from tiered_kafka.spark.backfill import backfill


@contextlib.contextmanager
def sigint_handler_kept() -> Iterator[None]:
    """Put back, on exit, the SIGINT handler in force on entry (see the module docstring).

    Only the main thread can set handlers; a handler not installed from Python (``getsignal``
    gives None) cannot be put back and is left alone."""
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)


def spark_demo(gateway_url: str, cluster: str, topic: str, redis_url: str, output_dir: Path) -> None:
    with sigint_handler_kept():
        _spark_demo(gateway_url, cluster, topic, redis_url, output_dir)


def _spark_demo(gateway_url: str, cluster: str, topic: str, redis_url: str, output_dir: Path) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from tiered_kafka.spark.session import local_session

    began = time.monotonic()
    started_here = SparkSession.getActiveSession() is None
    spark = local_session("local[2]", "tiered-kafka-demo", log_level="ERROR")
    print(f"Spark {spark.version} on local[2] ready in {time.monotonic() - began:.1f} s; reading '{topic}' through format('tiered-kafka')")
    try:
        began = time.monotonic()
        df = (
            spark.read.format("tiered-kafka")
            .option("tiered.gateway.url", gateway_url)
            .option("tiered.cluster", cluster)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        stats = (
            df.groupBy("partition")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.min("offset").alias("first"),
                F.max("offset").alias("last"),
                F.sum(F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))).alias("bytes"),
            )
            .orderBy("partition")
            .collect()
        )
        seconds = time.monotonic() - began
        for row in stats:
            print(f"  {topic}-{row.partition}: {row.rows} rows, offsets {row.first}..{row.last}, {row.bytes / 1e6:.2f} MB of keys and values")
        total_rows = sum(r.rows for r in stats)
        print(f"  {total_rows} rows in {seconds:.1f} s ({df.rdd.getNumPartitions()} Spark partitions, planning included)")

        output = output_dir / "parquet"
        print(f"backfilling '{topic}' to {output} ...")
        registry = Registry(redis.Redis.from_url(redis_url), cluster)
        result = backfill(spark, gateway_url=gateway_url, cluster=cluster, topics=[topic], output=str(output), registry=registry, overwrite=True, say=lambda line: print(f"  {line}"))
        dates = sorted({p.name for p in output.glob("topic=*/partition=*/date=*")})
        print(f"  Parquet: {sum(1 for _ in output.rglob('*.parquet'))} files under {output} (dates: {', '.join(d.removeprefix('date=') for d in dates)})")
        verdict = "row counts match the registry" if result.ok else "ROW COUNTS DO NOT MATCH THE REGISTRY"
        print(f"  check: {verdict} ({result.rows} rows, control records excluded)")
    finally:
        if started_here:
            spark.stop()
