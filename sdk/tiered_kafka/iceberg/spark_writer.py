"""Spark writes a topic's Iceberg table: the backfill's ``--format iceberg`` and a streaming sink.

Decision (issue 28 asked for Iceberg's Spark runtime): our pyspark is pinned to 4.2.0 and Maven
Central has no Iceberg Spark runtime for Spark 4.2 (``iceberg-spark-runtime-4.1_2.13:1.12.0``
fails to load on it: ``SparkView`` implements Spark 4.1's ``View`` interface, a class in 4.2). So
Spark's tasks write the data files with PyIceberg's writer (``data_files.write_task_files`` in
``mapInArrow``: where the rows are, in parallel) and the driver commits them through the PyIceberg
catalog (``data_files.commit_append``): the export's one commit path, no jar, any Spark version.

**Backfill** (``backfill_iceberg``; ``tiered-kafka-backfill --format iceberg``), the export's rules
(``export`` module doc) on Spark:

1. *planning*: the table is loaded or created (``table_contract.load_or_create``) and its committed
   offsets read (``table_contract.committed_offsets``); remote extents come from the gateway
   (``planning.resolve_offsets``); each partition starts by ``table_contract.resume_from`` (the
   export's rule, so either tool continues the other's table) and ends at remote storage's end,
   under read_committed at the remote last stable offset (the snapshot's offsets are fixed before
   the write, so nothing undecided is read; the export's held-back first offset is that offset);
2. *writing*: ``spark.read.format("tiered-kafka")`` of exactly those partitions (``assign``) and
   offsets, with headers; each task writes its rows' data files and returns them;
3. *commit*: one snapshot of every file with the offsets, on the table as planned from (a
   concurrent commit makes it fail: ``data_files`` module doc). Rows: the files' record counts.

Gaps recorded in remote storage inside a range fail the read (``failOnDataLoss=true``) or are
skipped with the data source's warning; this writer records in the summary only losses at a
partition's start (the data source does not report the others back to the driver).

**Streaming** (``start_iceberg_stream``): ``readStream.format("tiered-kafka")`` with a
``foreachBatch`` sink (``EpochSink``) that writes each micro-batch the same way and commits it with
``tiered-kafka.stream`` = ``{"checkpoint": <its absolute path>, "epoch": N}`` in the summary.
Exactly once across a restart: Spark's checkpoint replays an epoch whose end it had not recorded
with the same offsets and epoch number, and the sink skips an epoch the table already holds for
that checkpoint (``table_contract.last_stream_epoch``). Decision: stream commits do not carry
``tiered-kafka.next-offsets`` (the checkpoint holds the offsets; a micro-batch's end offsets are
not given to ``foreachBatch``), so a backfill or export must not write a table a stream writes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiered_kafka.errors import ConfigError
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.iceberg.catalog import load
from tiered_kafka.iceberg.data_files import commit_append, unpickle_files, write_task_files
from tiered_kafka.iceberg.table_contract import (
    COLUMNS,
    STREAM,
    WRITER,
    TopicPartition,
    WriteResult,
    committed_offsets,
    last_stream_epoch,
    load_or_create,
    resume_from,
    summary_properties,
    table_summaries,
)
from tiered_kafka.spark.options import parse_options
from tiered_kafka.spark.planning import resolve_offsets

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

BACKFILL_WRITER = "tiered-kafka-backfill"
STREAM_WRITER = "tiered-kafka stream"
Say = Callable[[str], None]


@dataclass
class IcebergBackfillResult(WriteResult):
    seconds: float = 0.0


def write_frame(frame: DataFrame, table: Table) -> list[DataFile]:
    """``frame``'s rows (Spark's Kafka columns) written by its tasks as data files of ``table``; the files."""
    metadata, io_properties = table.metadata, dict(table.io.properties)

    def task(batches: Any) -> Any:
        return write_task_files(batches, metadata, io_properties)

    return unpickle_files(frame.select(*COLUMNS).mapInArrow(task, "file binary").collect())


def backfill_iceberg(
    spark: SparkSession,
    *,
    gateway_url: str,
    cluster: str,
    topics: Sequence[str],
    table: str,
    catalog: str,
    catalog_properties: Mapping[str, str] | None = None,
    token: str | None = None,
    fail_on_data_loss: bool = True,
    read_committed: bool = False,
    say: Say = print,
) -> IcebergBackfillResult:
    """The three stages of the module doc."""
    began = time.monotonic()
    iceberg_table = load_or_create(load(catalog, catalog_properties), table)
    committed = committed_offsets(table_summaries(iceberg_table))
    base_options = {"subscribe": ",".join(topics), "tiered.gateway.url": gateway_url, "tiered.cluster": cluster,
                    "failOnDataLoss": str(fail_on_data_loss).lower(), "kafka.isolation.level": "read_committed" if read_committed else "read_uncommitted"}
    if token:
        base_options["tiered.gateway.token"] = token
    say(f"[planning] topics {', '.join(topics)} into {table} (catalog {catalog})")
    with GatewayClient(gateway_url, cluster, token=token) as client:
        offsets = resolve_offsets(parse_options(base_options), client)
    result = IcebergBackfillResult(table)
    to_read: dict[TopicPartition, tuple[int, int]] = {}
    for r in offsets:
        tp, name = (r.topic, r.partition), f"{r.topic}-{r.partition}"
        if r.start == r.end == 0:  # (planning's answer for a partition remote storage holds nothing of)
            say(f"[planning]   {name}: nothing remote")
            continue
        resume = resume_from(table, r.topic, r.partition, committed.get(tp), None, r.start, r.end, fail_on_data_loss)
        start, end = resume.start, r.end
        if read_committed:
            if r.stable_end is None:
                raise ConfigError(f"{name}: remote storage's last stable offset is unknown: a read_committed write cannot know where to stop")
            end = min(end, r.stable_end)
        end = max(start, end)
        result.starts[tp] = start
        if resume.gap is not None:
            result.gaps.append(resume.gap)
            say(f"[planning]   {name}: offsets {resume.gap.start}..{resume.gap.end} are no longer in remote storage; skipped (failOnDataLoss=false)")
        if resume.coverage_start is not None:
            result.coverage_start[tp] = start
        if end > start or resume.gap is not None:
            result.next_offsets[tp] = end
        if end > start:
            to_read[tp] = (start, end)
        say(f"[planning]   {name}: offsets {start}..{end - 1}" if end > start else f"[planning]   {name}: nothing new from {start}")
    if not result.next_offsets:
        result.seconds = time.monotonic() - began
        say(f"[done] nothing new: {table} holds every remote offset")
        return result

    files: list[DataFile] = []
    if to_read:
        assign: dict[str, list[int]] = {}
        starting: dict[str, dict[str, int]] = {}
        ending: dict[str, dict[str, int]] = {}
        for (t, p), (s, e) in sorted(to_read.items()):
            assign.setdefault(t, []).append(p)
            starting.setdefault(t, {})[str(p)] = s
            ending.setdefault(t, {})[str(p)] = e
        options = {k: v for k, v in base_options.items() if k != "subscribe"}
        frame = (spark.read.format("tiered-kafka").options(**options).option("assign", json.dumps(assign)).option("startingOffsets", json.dumps(starting))
                 .option("endingOffsets", json.dumps(ending)).option("includeHeaders", "true").load())
        say(f"[writing] data files of {len(to_read)} partitions under {iceberg_table.metadata.location}")
        files = write_frame(frame, iceberg_table)
    result.rows = sum(f.record_count for f in files)
    result.data_files = len(files)
    summary = summary_properties(BACKFILL_WRITER, result.next_offsets, result.gaps, result.coverage_start)
    result.snapshot_id = commit_append(iceberg_table, files, summary)
    result.seconds = time.monotonic() - began
    say(f"[done] {result.rows} rows in {result.data_files} data files appended to {table}, snapshot {result.snapshot_id}, {result.seconds:.1f} s")
    return result


class EpochSink:
    """The ``foreachBatch`` function of ``start_iceberg_stream`` (module doc: one commit per epoch, a replayed epoch skipped)."""

    def __init__(self, catalog: str, catalog_properties: Mapping[str, str] | None, table: str, checkpoint: str) -> None:
        self.catalog, self.catalog_properties, self.table, self.checkpoint = catalog, dict(catalog_properties or {}), table, checkpoint
        self.skipped: list[int] = []

    def __call__(self, frame: DataFrame, epoch_id: int) -> None:
        table = load(self.catalog, self.catalog_properties).load_table(self.table)
        last = last_stream_epoch(table_summaries(table), self.checkpoint)
        if last is not None and epoch_id <= last:
            log.info("tiered-kafka: %s: epoch %d is in the table already (its last epoch: %d); skipped", self.table, epoch_id, last)
            self.skipped.append(epoch_id)
            return
        files = write_frame(frame, table)
        if files:
            commit_append(table, files, {WRITER: STREAM_WRITER, STREAM: json.dumps({"checkpoint": self.checkpoint, "epoch": epoch_id})})


def start_iceberg_stream(spark: SparkSession, read_options: Mapping[str, str], *, table: str, catalog: str, checkpoint: str,
                         catalog_properties: Mapping[str, str] | None = None, **trigger: Any) -> StreamingQuery:
    """A started ``tiered-kafka`` stream into the Iceberg table (module doc); ``trigger``: ``DataStreamWriter.trigger``'s keywords."""
    load_or_create(load(catalog, catalog_properties), table)
    location = checkpoint if "://" in checkpoint else str(Path(checkpoint).resolve())
    sink = EpochSink(catalog, catalog_properties, table, location)
    writer = (spark.readStream.format("tiered-kafka").options(**read_options).option("includeHeaders", "true").load()
              .writeStream.foreachBatch(sink).option("checkpointLocation", location))
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()
