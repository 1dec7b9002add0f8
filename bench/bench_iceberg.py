"""Iceberg benchmark: the cost of the table. Writing a topic into Iceberg beside writing the same records as plain Parquet, in the same run.

    .venv/bin/python bench/bench_iceberg.py [--segments 3] [--segment-mib 32] [--rounds 2] [--value-bytes 1024] [--no-spark]

Set-up: ``bench_sdk.uploaded_partition`` (Redis, SeaweedFS, Kafka, the agent, the gateway, each in its
own process): one partition of ``--segments`` rotated segments of ~``--segment-mib`` MiB uploaded
and registered. Every writer reads offsets 0..L of it through the gateway with headers, and writes
to the local disk (decision: the same sink for both sides, so the ratio is the table's cost, not
SeaweedFS's write path; the catalog is SQL on SQLite, the warehouse a ``file://`` directory).

1. **export rows/s**: ``tiered_kafka.iceberg.export_iceberg`` into a new table (PyIceberg's writer,
   ``day(timestamp)`` partitions, one commit) beside the bulk API into one Parquet file
   (``pyarrow.parquet.ParquetWriter``, what ``tiered-kafka export --format parquet`` does), each in
   a child process of its own (each with its modules imported before timing); rounds alternate them,
   the best of each counts. Goal: ratio >= 0.8.
2. **Spark backfill rows/s** (one child process, one ``local[2]`` session, a warm-up job first):
   ``spark_writer.backfill_iceberg`` beside ``spark.read.format("tiered-kafka")`` written as
   Parquet partitioned by date (the Parquet backfill's write stage), alternated. Goal: ratio >= 0.8.
3. **CPU seconds** of each writer: the child process (for Spark: the driver, its JVM and the Python
   workers, summed over the process tree), and SeaweedFS's meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_sdk import MIB, TOPIC, measure_round, uploaded_partition  # noqa: E402


def _catalog(root: str) -> dict[str, str]:
    Path(root, "warehouse").mkdir(parents=True, exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


def child_export(gateway_url: str, cluster: str, last: int, root: str, name: str) -> dict[str, Any]:
    import pyiceberg.catalog.sql  # noqa: F401 (PyIceberg's modules loaded before timing, as the Parquet writer's are)
    import pyiceberg.io.pyarrow  # noqa: F401

    from tiered_kafka.client.columnar_read import decode_columnar_impl
    from tiered_kafka.iceberg.export import export_iceberg

    decode_columnar_impl()
    start, cpu_start = time.perf_counter(), time.process_time()
    result = export_iceberg(gateway_url, cluster, TOPIC, 0, table=f"bench.{name}", catalog_properties=_catalog(root), isolation_level="read_uncommitted")
    elapsed, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    if result.rows != last + 1:
        raise RuntimeError(f"exported {result.rows} rows, expected {last + 1}")
    return {"rows": result.rows, "elapsed": elapsed, "cpu_s": cpu_s, "files": result.data_files}


def child_parquet(gateway_url: str, cluster: str, last: int, root: str, name: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from tiered_kafka.bulk import BulkReader
    from tiered_kafka.client.columnar_read import decode_columnar_impl

    decode_columnar_impl()

    start, cpu_start = time.perf_counter(), time.process_time()
    rows = 0
    with BulkReader(gateway_url, cluster, include_headers=True) as reader, pq.ParquetWriter(Path(root, f"{name}.parquet"), reader.schema) as writer:
        for batch in reader.batches(TOPIC, 0):
            writer.write_batch(batch)
            rows += batch.num_rows
    elapsed, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    if rows != last + 1:
        raise RuntimeError(f"wrote {rows} rows, expected {last + 1}")
    return {"rows": rows, "elapsed": elapsed, "cpu_s": cpu_s, "files": 1}


def tree_cpu_s(root_pid: int) -> float:
    """User + system CPU seconds of ``root_pid`` and every live descendant (/proc)."""
    from bench_sdk import process_cpu_s

    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        try:
            total += process_cpu_s(pid)
        except OSError:
            continue
        todo.extend(children.get(pid, []))
    return total


def child_spark(gateway_url: str, cluster: str, last: int, root: str, rounds: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from tiered_kafka.iceberg.spark_writer import backfill_iceberg
    from tiered_kafka.spark.session import local_session

    spark = local_session("local[2]", "bench-iceberg")
    options = {"subscribe": TOPIC, "tiered.gateway.url": gateway_url, "tiered.cluster": cluster, "includeHeaders": "true"}
    spark.read.format("tiered-kafka").options(**options).load().limit(10).collect()  # warm-up: Python workers, the source's imports
    me = os.getpid()
    out: dict[str, list[dict[str, Any]]] = {"spark_parquet": [], "spark_iceberg": []}
    for round_ in range(rounds):
        for kind in ("spark_parquet", "spark_iceberg"):
            start, cpu = time.perf_counter(), tree_cpu_s(me)
            if kind == "spark_parquet":
                frame = spark.read.format("tiered-kafka").options(**options).load()
                frame.withColumn("date", F.to_date(F.col("timestamp"))).write.partitionBy("topic", "partition", "date").parquet(f"{root}/parquet-{round_}")
                rows = -1  # counted below, outside the timing
            else:
                rows = backfill_iceberg(spark, gateway_url=gateway_url, cluster=cluster, topics=[TOPIC], table=f"bench.spark_{round_}", catalog="tiered_kafka",
                                        catalog_properties=_catalog(root), say=lambda _line: None).rows
            elapsed, cpu_s = time.perf_counter() - start, tree_cpu_s(me) - cpu
            if rows == -1:
                rows = spark.read.parquet(f"{root}/parquet-{round_}").count()
            if rows != last + 1:
                raise RuntimeError(f"{kind}: {rows} rows, expected {last + 1}")
            out[kind].append({"rows": rows, "elapsed": elapsed, "cpu_s": cpu_s})
            print(f"  spark round {round_ + 1}: {kind} {elapsed:.2f} s, {cpu_s:.2f} CPU-s", file=sys.stderr, flush=True)
    spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=3)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--no-spark", action="store_true", help="the export figures only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("child_args", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        children = {"export": child_export, "parquet": child_parquet, "spark": child_spark}
        print(json.dumps(children[args.child](*json.loads(args.child_args))))
        return
    root = tempfile.mkdtemp(prefix="bench-iceberg-")
    try:
        with uploaded_partition(args.segments, args.segment_mib, "bench-iceberg", args.value_bytes) as served:
            last, size = served.last, served.segment_bytes
            print(f"writing offsets 0..{last} ({size / MIB:.0f} MiB) in {args.rounds} rounds ...", file=sys.stderr, flush=True)
            export: list[dict[str, Any]] = []
            parquet: list[dict[str, Any]] = []
            for round_ in range(args.rounds):
                measure_round(parquet, served, __file__, "parquet", served.gateway_url, served.cluster, last, root, f"p{round_}")
                measure_round(export, served, __file__, "export", served.gateway_url, served.cluster, last, root, f"e{round_}")
                print(f"  round {round_ + 1}: parquet {parquet[-1]['elapsed']:.2f} s, iceberg export {export[-1]['elapsed']:.2f} s", file=sys.stderr, flush=True)
            spark: dict[str, list[dict[str, Any]]] = {}
            if not args.no_spark:
                holder: list[dict[str, Any]] = []
                measure_round(holder, served, __file__, "spark", served.gateway_url, served.cluster, last, root, args.rounds)
                spark = {k: v for k, v in holder[0].items() if k in ("spark_parquet", "spark_iceberg")}
                spark_s3 = holder[0]["s3_cpu_s"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = last + 1
    print(f"\nbest of {args.rounds} rounds; {rows:,} records of {args.value_bytes} B ({size / MIB:.1f} MiB), headers included; local-disk sink for both")
    print(f"{'figure':<46} {'measured':>12} {'reference':>12} {'ratio':>7}  goal")
    best_e = _compare("Iceberg export vs bulk API to Parquet", "process", rows, export, parquet,
                      "day partitioning, PyIceberg's data-file statistics and the commit")
    print(f"{'SeaweedFS CPU-s meanwhile':<46} {best_e['s3_cpu_s']:>12.2f}")
    if spark:
        _compare("Spark backfill Iceberg vs Parquet", "process tree", rows, spark["spark_iceberg"], spark["spark_parquet"],
                 "rows cross to Python workers through Arrow for PyIceberg's writer, where Spark's Parquet writer stays in the JVM")
        print(f"{'SeaweedFS CPU-s over the Spark child':<46} {spark_s3:>12.2f}")


def _compare(what: str, cpu_of: str, rows: int, iceberg: list[dict[str, Any]], parquet: list[dict[str, Any]], costs: str) -> dict[str, Any]:
    """Print rows/s and CPU-s of the best Iceberg run beside the best Parquet run, and what bounds a missed goal; the best Iceberg run."""
    best_i, best_p = min(iceberg, key=lambda r: r["elapsed"]), min(parquet, key=lambda r: r["elapsed"])
    ratio = best_p["elapsed"] / best_i["elapsed"]
    print(f"{'rows/s: ' + what:<46} {rows / best_i['elapsed']:>12,.0f} {rows / best_p['elapsed']:>12,.0f} {ratio:>7.2f}  >= 0.8  {'ok' if ratio >= 0.8 else 'MISSED'}")
    print(f"{'CPU-s (' + cpu_of + ')':<46} {best_i['cpu_s']:>12.2f} {best_p['cpu_s']:>12.2f} {best_p['cpu_s'] / best_i['cpu_s']:>7.2f}")
    if ratio < 0.8:
        extra_cpu, extra_wall = best_i["cpu_s"] - best_p["cpu_s"], best_i["elapsed"] - best_p["elapsed"]
        print(f"  bound: {extra_wall:.2f} s more wall for {extra_cpu:.2f} CPU-s more ({costs})"
              + ("; the rest is waiting (2 CPUs shared with SeaweedFS, Kafka and other processes)" if extra_cpu < extra_wall else ""))
    return best_i

if __name__ == "__main__":
    main()
