"""Backfill a topic's remote history into Parquet, then check the row counts against the registry
(or, with ``--format iceberg --table ns.name``, append what is new to an Iceberg table:
``tiered_kafka.iceberg.spark_writer``).

::

    python -m tiered_kafka.spark.backfill --gateway-url http://gw:8080 --cluster prod \\
        --topic orders [--topic payments] --output /data/orders-parquet \\
        --redis-url redis://registry:6379/0 [--master URL] [--token T] [--overwrite] \\
        [--isolation-level read_committed]

Stages, each printed as it happens:

1. **planning**: the topics' partitions and their remote extents from the gateway; each partition
   is read from its first remote offset E to one past its last L (both fixed now, so segments
   uploaded meanwhile are left for the next run), passed to the data source as explicit
   ``startingOffsets``/``endingOffsets``.
2. **writing**: ``spark.read.format("tiered-kafka")`` → Parquet under ``--output``, partitioned
   by ``topic``, ``partition`` and ``date`` (the UTC date of the record timestamp, as
   ``date=YYYY-MM-DD`` directories; Hive-style, so Spark, pyarrow and others read the columns
   back from the paths). Progress: tasks done per Spark stage (Spark's status tracker).
3. **counting**: the Parquet is read back and its rows per (topic, partition) compared with the
   registry in Redis.

The count rule. The registry's ``record_count`` of a segment is the sum of its batches' record
counts, which includes transaction markers (control records), aborted records and records of
transactions still open. Rows are the records the read delivers. So, per partition::

    rows in Parquet == R - C - A - U

    R  sum(record_count) of the registered segments inside [E, L + 1), each over its registered
       range (``SegmentEntry.records_in_range``: a segment registered from a later first_offset
       counts its batches from there; an unknown count fails the check, naming the segment)
    C  control records in those offsets: the registry's ``control_records`` summed over those
       segments when every one of them knows it (not -1), else the control records counted
       during the read; when the registry knows it, the read's count must equal it too
    A  aborted records the read dropped (read_committed; 0 under read_uncommitted), counted
    U  undecided records the read held back (read_committed: a transaction still open at the
       end of remote data, and every record after it; ``reading`` module doc)

Under read_committed a partition with undecided records is not finished: the first undecided
offset is its *resume offset* (where a read_committed consumer stands, Kafka's last stable
offset), printed per partition; a later backfill from there writes the rest once the transaction
is decided.

The read's counts come from the same pass that writes the rows: the data source's internal
``tiered.includeControlRecords`` option emits each left-out record as a row whose ``skipped``
column says why (``control``, ``aborted``, ``undecided``); an ``Observation`` counts them per
partition while the data rows (``skipped`` null) are written. A segment only partly inside the
range (the registry changed since planning) makes the check fail: its share cannot be known from
the registry. Also checked: every offset written lies in [E, L + 1). ``--isolation-level``
(default read_uncommitted, Kafka's default) is the data source's ``kafka.isolation.level``.
Exit status: 0 when every partition matches, 1 on a mismatch (each one named) or a failed read,
2 on bad arguments. The Spark master (``resolve_master``): ``--master`` when given; else, under
``spark-submit``, the one spark-submit was given (its ``--master``, ``spark.master``, or its own
default), the session being built without a master; else, run as a plain command, ``local[2]``.
A ``local[N]`` master named here gets a loopback session (``session.local_session``); any other a
plain one, whose executors need ``tiered-kafka[spark]`` installed. The output path is anything Spark can write (a local
directory, ``s3a://`` with the Hadoop AWS jars, ...); counting reads it back through Spark.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiered_kafka.errors import TieredKafkaError
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.registry import Registry, SegmentEntry, connect
from tiered_kafka.spark.options import parse_options
from tiered_kafka.spark.planning import OffsetRange, resolve_offsets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Say = Callable[[str], None]
MIB = 1024 * 1024


@dataclass(frozen=True)
class PartitionCheck:
    """The row-count check of one partition (the module doc's rule)."""

    topic: str
    partition: int
    start: int
    end: int
    rows: int
    registry_records: int
    control_records: int  # counted by the read
    segments: int
    partial_segments: tuple[int, ...] = ()
    min_offset: int | None = None
    max_offset: int | None = None
    aborted_records: int = 0
    undecided_records: int = 0
    registry_control_records: int | None = None  # None when a segment does not know it
    resume_offset: int | None = None  # read_committed: the first undecided offset (None: none held back)

    @property
    def control(self) -> int:
        """C of the module doc's rule: the registry's count when known, else the read's."""
        return self.control_records if self.registry_control_records is None else self.registry_control_records

    @property
    def expected(self) -> int:
        return self.registry_records - self.control - self.aborted_records - self.undecided_records

    @property
    def problems(self) -> list[str]:
        out = []
        if self.partial_segments:
            out.append(
                f"segments {list(self.partial_segments)} lie only partly inside [{self.start}, {self.end}) (the registry changed since planning)"
                " or their registered range's record count is unknown"
            )
        if self.rows != self.expected:
            out.append(
                f"wrote {self.rows} rows, the registry counts {self.registry_records} records in {self.segments} segments"
                f" minus {self.control} control, {self.aborted_records} aborted and {self.undecided_records} undecided records = {self.expected}"
            )
        if self.registry_control_records is not None and self.registry_control_records != self.control_records:
            out.append(f"the read met {self.control_records} control records, the registry counts {self.registry_control_records}")
        if self.min_offset is not None and (self.min_offset < self.start or (self.max_offset or 0) >= self.end):
            out.append(f"offsets {self.min_offset}..{self.max_offset} written, outside [{self.start}, {self.end})")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class BackfillResult:
    output: str
    offsets: list[OffsetRange]
    checks: list[PartitionCheck] = field(default_factory=list)
    rows: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


class BackfillCheckError(TieredKafkaError):
    """The Parquet written does not hold what the registry says remote storage holds."""


def expected_from_registry(segments: Sequence[SegmentEntry], start: int, end: int) -> tuple[int, int, tuple[int, ...]]:
    """(records in the registered ranges inside [start, end), how many segments, base offsets of those
    only partly inside or whose range's count is unknown). A segment's range is [first_offset,
    last_offset] and its count ``records_in_range`` (a straddling segment: the batches from first_offset)."""
    records, count, partial = 0, 0, []
    for segment in segments:
        if segment.last_offset < start or segment.first >= end:
            continue
        if segment.first < start or segment.last_offset >= end or segment.records_in_range < 0:
            partial.append(segment.base_offset)
            continue
        records += segment.records_in_range
        count += 1
    return records, count, tuple(partial)


def registry_control_records(segments: Sequence[SegmentEntry], start: int, end: int) -> int | None:
    """The registry's control records of the registered ranges wholly inside [start, end); None when one does not know (-1)."""
    total = 0
    for segment in segments:
        if segment.last_offset < start or segment.first < start or segment.last_offset >= end:
            continue
        if segment.control_records_in_range < 0:
            return None
        total += segment.control_records_in_range
    return total


def backfill(
    spark: SparkSession,
    *,
    gateway_url: str,
    cluster: str,
    topics: Sequence[str],
    output: str,
    registry: Registry,
    token: str | None = None,
    overwrite: bool = False,
    fail_on_data_loss: bool = True,
    read_committed: bool = False,
    say: Say = print,
) -> BackfillResult:
    """Run the three stages of the module doc; returns the checks (the caller decides the exit status)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    began = time.monotonic()
    base_options = {
        "subscribe": ",".join(topics),
        "tiered.gateway.url": gateway_url,
        "tiered.cluster": cluster,
        "failOnDataLoss": str(fail_on_data_loss).lower(),
        "kafka.isolation.level": "read_committed" if read_committed else "read_uncommitted",
    }
    if token:
        base_options["tiered.gateway.token"] = token

    # 1. planning
    say(f"[planning] topics {', '.join(topics)} on {gateway_url} (cluster {cluster})")
    options = parse_options(base_options)
    with GatewayClient(gateway_url, cluster, token=token) as client:
        offsets = resolve_offsets(options, client)
    for r in offsets:
        say(f"[planning]   {r.topic}-{r.partition}: offsets {r.start}..{r.end - 1} ({r.count} offsets, ~{r.estimated_bytes / MIB:.1f} MiB)" if r.count else f"[planning]   {r.topic}-{r.partition}: nothing remote")
    total = sum(r.estimated_bytes for r in offsets)
    say(f"[planning] {sum(r.count for r in offsets)} offsets in {len(offsets)} partitions, ~{total / MIB:.1f} MiB remote")
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in offsets:
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start if r.count else -2
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end if r.count else -1

    # 2. writing
    reader = spark.read.format("tiered-kafka").options(**base_options)
    df = (
        reader.option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("tiered.includeControlRecords", "true")
        .load()
    )
    to_read = [r for r in offsets if r.count]
    observation = Observation("tiered-kafka-backfill")
    reasons = ("control", "aborted", "undecided")
    skipped_columns = {(r.topic, r.partition, why): f"{why}_{i}" for i, r in enumerate(to_read) for why in reasons}
    metrics = [
        F.sum(F.when((F.col("topic") == t) & (F.col("partition") == p) & (F.col("skipped") == why), 1).otherwise(0)).alias(name)
        for (t, p, why), name in skipped_columns.items()
    ]
    resume_columns = {(r.topic, r.partition): f"resume_{i}" for i, r in enumerate(to_read)}
    metrics += [
        F.min(F.when((F.col("topic") == t) & (F.col("partition") == p) & (F.col("skipped") == "undecided"), F.col("offset"))).alias(name)
        for (t, p), name in resume_columns.items()
    ]
    metrics = metrics or [F.count(F.lit(1)).alias("rows_read")]
    data = (
        df.observe(observation, *metrics)
        .filter(F.col("skipped").isNull())
        .drop("skipped")
        .withColumn("date", F.date_from_unix_date(F.floor(F.unix_micros(F.col("timestamp")) / 86_400_000_000).cast("int")))
    )
    say(f"[writing] Parquet to {output} (partitioned by topic, partition, date)")
    with StageProgress(spark, "[writing]", say):
        data.write.mode("overwrite" if overwrite else "errorifexists").partitionBy("topic", "partition", "date").parquet(output)
    observed = observation.get
    skipped = {key: int(observed.get(name) or 0) for key, name in skipped_columns.items()}
    resume = {key: None if observed.get(name) is None else int(observed[name]) for key, name in resume_columns.items()}

    # 3. counting
    say("[counting] reading the Parquet back and comparing with the registry")
    written = count_parquet(spark, output)
    result = BackfillResult(output, offsets)
    for r in offsets:
        rows, low, high = written.get((r.topic, r.partition), (0, None, None))
        segments = registry.segments(r.topic, r.partition)
        records, n_segments, partial = expected_from_registry(segments, r.start, r.end) if r.count else (0, 0, ())
        key = (r.topic, r.partition)
        check = PartitionCheck(
            r.topic, r.partition, r.start, r.end, rows, records, skipped.get((*key, "control"), 0), n_segments, partial, low, high,
            aborted_records=skipped.get((*key, "aborted"), 0),
            undecided_records=skipped.get((*key, "undecided"), 0),
            registry_control_records=registry_control_records(segments, r.start, r.end) if r.count else None,
            resume_offset=resume.get(key),
        )
        result.checks.append(check)
        status = "ok" if check.ok else "MISMATCH: " + "; ".join(check.problems)
        say(
            f"[counting]   {r.topic}-{r.partition}: {rows} rows written, registry {records} records in {n_segments} segments"
            f" - {check.control} control - {check.aborted_records} aborted - {check.undecided_records} undecided = {check.expected}: {status}"
        )
        if check.resume_offset is not None:
            say(
                f"[counting]   {r.topic}-{r.partition}: resume offset {check.resume_offset}: a transaction there is still open in remote "
                f"storage (read_committed); offsets {check.resume_offset}..{r.end - 1} are not written yet: backfill from {check.resume_offset} once it is decided"
            )
    unexpected = sorted(set(written) - {(r.topic, r.partition) for r in offsets})
    for t, p in unexpected:
        rows = written[(t, p)][0]
        result.checks.append(PartitionCheck(t, p, 0, 0, rows, 0, 0, 0))
        say(f"[counting]   {t}-{p}: {rows} rows written for a partition that was not planned: MISMATCH")
    result.rows = sum(c.rows for c in result.checks)
    result.seconds = time.monotonic() - began
    bad = [c for c in result.checks if not c.ok]
    say(
        f"[done] {result.rows} rows in {len(result.checks)} partitions, {result.seconds:.1f} s: "
        + ("row counts match the registry" if not bad else f"{len(bad)} partition(s) do not match the registry")
    )
    return result


def count_parquet(spark: SparkSession, output: str) -> dict[tuple[str, int], tuple[int, int | None, int | None]]:
    """(topic, partition) → (rows, min offset, max offset) of the Parquet under ``output``."""
    from pyspark.sql import functions as F

    # an explicit schema keeps topic names that look like numbers strings (no partition type inference)
    frame: DataFrame = (
        spark.read.schema("offset long, topic string, partition int, date date").option("basePath", output).parquet(output)
    )
    rows = frame.groupBy("topic", "partition").agg(F.count(F.lit(1)).alias("rows"), F.min("offset").alias("low"), F.max("offset").alias("high")).collect()
    return {(row["topic"], int(row["partition"])): (int(row["rows"]), row["low"], row["high"]) for row in rows}


class StageProgress:
    """Prints Spark's progress (tasks done per active stage) at most every ``interval_s`` while a job
    runs, and on exit every stage of the jobs run inside it with its final count (a job quicker than
    the first look is reported too). It finds those jobs by Spark's job group of the calling thread:
    its own (``tiered-kafka-progress-…``, removed on exit) unless the application set one."""

    def __init__(self, spark: SparkSession, prefix: str, say: Say, interval_s: float = 1.0) -> None:
        self._context = spark.sparkContext
        self._tracker = self._context.statusTracker()
        self._prefix = prefix
        self._say = say
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tiered-kafka-progress", daemon=True)
        self._last: dict[int, int] = {}

    def __enter__(self) -> StageProgress:
        self._began = time.monotonic()
        self._own_group = self._context.getLocalProperty("spark.jobGroup.id") is None
        if self._own_group:
            self._context.setJobGroup(f"tiered-kafka-progress-{uuid.uuid4().hex[:12]}", self._prefix)
        self._group = self._context.getLocalProperty("spark.jobGroup.id")
        self._jobs_before = set(self._tracker.getJobIdsForGroup(self._group))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._poll()
        for stage_id in self._stages_run():
            info = self._tracker.getStageInfo(stage_id)
            if info is not None and self._last.get(stage_id) != info.numCompletedTasks:
                self._report(stage_id, info)
        if self._own_group:
            for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
                self._context.setLocalProperty(key, None)  # type: ignore[arg-type]  # None removes it
        self._say(f"{self._prefix} done in {time.monotonic() - self._began:.1f} s")

    def _stages_run(self) -> list[int]:
        """The stages of the jobs run inside the block, and any other seen while it ran."""
        stages = set(self._last)
        for job_id in set(self._tracker.getJobIdsForGroup(self._group)) - self._jobs_before:
            job = self._tracker.getJobInfo(job_id)
            if job is not None:
                stages.update(job.stageIds)
        return sorted(stages)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._poll()

    def _poll(self) -> None:
        try:
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is not None and self._last.get(stage_id) != info.numCompletedTasks:
                    self._report(stage_id, info)
        except Exception:  # the tracker is advisory; never let it break the job
            return

    def _report(self, stage_id: int, info: Any) -> None:
        self._last[stage_id] = info.numCompletedTasks
        self._say(
            f"{self._prefix}   stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks done"
            f" ({info.numActiveTasks} running, {time.monotonic() - self._began:.1f} s)"
        )


FALLBACK_MASTER = "local[2]"
"""The master of a backfill run as a plain command (not by spark-submit) without ``--master``."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tiered-kafka-backfill",
        description="Backfill topics' remote history (through the tiered-kafka gateway) into Parquet partitioned by topic, partition "
        "and date, then check the row counts against the registry in Redis.",
    )
    parser.add_argument("--gateway-url", required=True, help="the gateway, e.g. http://127.0.0.1:8080")
    parser.add_argument("--cluster", required=True, help="the Kafka cluster's name in the gateway and the registry")
    parser.add_argument("--topic", action="append", required=True, help="a topic to backfill (repeat for more)")
    parser.add_argument("--format", choices=("parquet", "iceberg"), default="parquet",
                        help="parquet (default: files under --output, counted against the registry) or iceberg (append to --table: tiered_kafka.iceberg.spark_writer)")
    parser.add_argument("--output", help="parquet: the directory (any path Spark can write)")
    parser.add_argument("--redis-url", help="parquet: the registry's Redis, e.g. redis://127.0.0.1:6379/0 or redis+cluster://host:port,host:port")
    parser.add_argument("--table", help="iceberg: the table, namespace.name (created when missing; each run appends what is new)")
    parser.add_argument("--catalog", default="tiered_kafka", help="iceberg: the catalog's name in PyIceberg's configuration (default tiered_kafka)")
    parser.add_argument("--catalog-property", action="append", default=[], metavar="KEY=VALUE", help="iceberg: a PyIceberg catalog property (repeat)")
    parser.add_argument(
        "--master", default=None, help=f"Spark master (default: spark-submit's master; {FALLBACK_MASTER} when not run by spark-submit)"
    )
    parser.add_argument("--token", default=None, help="bearer token for the gateway, when it has auth enabled: visible to every local user in ps; "
                        "prefer $TIERED_KAFKA_TOKEN")
    parser.add_argument("--overwrite", action="store_true", help="replace what is under --output (default: fail if it exists)")
    parser.add_argument(
        "--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
        help="Kafka's isolation.level: read_committed leaves out aborted transactions (default read_uncommitted)",
    )
    parser.add_argument(
        "--allow-data-loss", action="store_true", help="skip gaps in remote storage with a warning (failOnDataLoss=false) instead of failing"
    )
    args = parser.parse_args(argv)
    if args.format == "parquet" and (args.output is None or args.redis_url is None or args.table is not None):
        parser.error("--format parquet needs --output and --redis-url (--table is for --format iceberg)")
    if args.format == "iceberg" and (args.table is None or args.output is not None):
        parser.error("--format iceberg needs --table (not --output)")
    if args.token:  # issue 36: taken, with a warning (as tiered-kafka's --token)
        print("tiered-kafka-backfill: warning: --token is visible to every local user (ps): prefer $TIERED_KAFKA_TOKEN", file=sys.stderr)
    else:
        args.token = os.environ.get("TIERED_KAFKA_TOKEN") or None
    return args


def resolve_master(requested: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The master to build the session with; None leaves spark-submit's.

    spark-submit runs a Python application through its ``PythonRunner``, which starts the JVM
    first and hands its gateway to the Python process in ``PYSPARK_GATEWAY_PORT``; that variable
    is how a driver knows it was submitted. A master set on the builder there would override the
    one given to spark-submit (a submitted job silently running in the driver), so it is left
    unset and ``--master`` is only needed to override spark-submit's on purpose.
    """
    if requested:
        return requested
    if environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    return FALLBACK_MASTER


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    from tiered_kafka.spark.session import local_session

    topics = list(dict.fromkeys(args.topic))
    started_here = SparkSession.getActiveSession() is None
    master = resolve_master(args.master)
    print(f"[spark] starting a session on {master or 'the master spark-submit was given'} ...", flush=True)
    if master is not None and master.startswith("local"):
        spark = local_session(master, "tiered-kafka-backfill")
    else:  # spark-submit's master, or a cluster: its executors need tiered-kafka[spark] installed; no loopback settings
        from tiered_kafka.spark.datasource import TieredKafkaDataSource

        builder = SparkSession.builder.appName("tiered-kafka-backfill")
        spark = (builder if master is None else builder.master(master)).getOrCreate()
        spark.dataSource.register(TieredKafkaDataSource)
    print(f"[spark] session on {spark.sparkContext.master}", flush=True)
    if args.format == "iceberg":
        from tiered_kafka.iceberg.spark_cli import run_iceberg_backfill

        return run_iceberg_backfill(spark, args, topics, started_here, _cause)
    registry = Registry(connect(args.redis_url), args.cluster)
    try:
        result = backfill(
            spark,
            gateway_url=args.gateway_url,
            cluster=args.cluster,
            topics=topics,
            output=args.output,
            registry=registry,
            token=args.token,
            overwrite=args.overwrite,
            fail_on_data_loss=not args.allow_data_loss,
            read_committed=args.isolation_level == "read_committed",
            say=lambda line: print(line, flush=True),
        )
    except Exception as err:  # a clear one-line cause, not a JVM stack trace
        print(f"error: backfill failed: {_cause(err)}", file=sys.stderr)
        return 1
    finally:
        if started_here:
            spark.stop()
    if not result.ok:
        for check in result.checks:
            for problem in check.problems:
                print(f"error: {check.topic}-{check.partition}: {problem}", file=sys.stderr)
        return 1
    return 0


def _cause(err: BaseException) -> str:
    """The most telling line of an error raised through Spark (the Python exception's own message)."""
    text = str(err)
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if stripped and ("Error:" in stripped or "Exception:" in stripped) and not stripped.startswith("at "):
            return stripped
    return text.splitlines()[0] if text else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
