"""A topic's remote history appended to its Iceberg table through the bulk API and PyIceberg: incremental, exactly once.

::

    from tiered_kafka.iceberg import export_iceberg

    result = export_iceberg("http://gw:8080", "prod", "orders", table="kafka.orders",
                            catalog_properties={"warehouse": "s3://lake/warehouse", "s3.endpoint": "http://s3:8333", ...})
    result.rows, result.next_offsets, result.gaps

**What one run reads**, per partition (one, or every partition of the topic):

- from the table's committed next offset (``table_contract.committed_offsets``) when the table has
  one for the partition; ``start_offset`` there must equal it (else ``ConfigError``: the table
  continues at N; an export never writes an offset twice). A partition the table has never seen
  starts at ``start_offset``, else at remote storage's earliest offset; when that is above 0 it is
  the partition's *coverage start*, reported and recorded (``tiered-kafka.coverage-start``);
- to ``end_offset`` (exclusive), else remote storage's end now;
- read_committed by default (a table holds what a read_committed consumer sees; aborted records
  never land, ``transactions`` through the bulk API). A transaction still open in remote storage
  stops the partition at its first offset (``BulkReader.held_back``): that is the next offset
  recorded, so the rerun reads it whole once decided. Offsets compaction removed are passed, as
  the Kafka source passes them.

**failOnDataLoss**, Spark's rule as the bulk API's ``skip_gaps`` applies it (``fail_on_data_loss``,
default true; the CLI's ``--skip-gaps`` turns it off): offsets the table should continue from that
remote storage no longer holds (retention went past them), and gaps the agent recorded, fail the
run (``OffsetNotRemoteError`` / ``RemoteGapError``: nothing is committed); with it false they are
skipped, logged, returned in ``gaps`` and recorded in the snapshot summary (``tiered-kafka.gaps``).
A table ahead of remote storage (its next offset past remote's end: another cluster, a recreated
topic) is an error either way.

**One commit per run**: data files are written as the read goes (Arrow chunks of about
``chunk_bytes`` at a time, so memory stays within the reader's budget plus one chunk), then one
fast-append snapshot adds all of them with the offsets (``table_contract``'s module doc: why a kill
at any point leaves every offset once). Partitions read to nothing new (aborted records only, a
skipped gap) still advance in that commit. A run with nothing new at all commits nothing and says
so (``nothing_new``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tiered_kafka.bulk import BulkReader, HeldBack, Offsets, ReadStats, _check_offsets, _offset_for
from tiered_kafka.errors import ConfigError, OffsetNotRemoteError
from tiered_kafka.iceberg.catalog import DEFAULT_CATALOG, load
from tiered_kafka.iceberg.data_files import DEFAULT_CHUNK_BYTES, FileWriter, commit_append
from tiered_kafka.iceberg.table_contract import (
    Gap,
    TopicPartition,
    WriteResult,
    committed_offsets,
    load_or_create,
    resume_from,
    summary_properties,
    table_summaries,
)

log = logging.getLogger(__name__)

WRITER = "tiered-kafka export"


@dataclass
class ExportResult(WriteResult):
    """What one export did (``WriteResult``), and what its reads said: transactions held back, partitions without remote data, costs."""

    held_back: list[HeldBack] = field(default_factory=list)
    nothing_remote: list[TopicPartition] = field(default_factory=list)
    stats: ReadStats = field(default_factory=ReadStats)


@dataclass(frozen=True)
class _Span:
    partition: int
    start: int
    end: int


def export_iceberg(
    gateway_url: str | None,
    cluster: str | None,
    topic: str,
    partition: int | None = None,
    *,
    table: str,
    catalog: str = DEFAULT_CATALOG,
    catalog_properties: Mapping[str, str] | None = None,
    start_offset: Offsets = None,
    end_offset: Offsets = None,
    fail_on_data_loss: bool = True,
    isolation_level: str = "read_committed",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    say: Callable[[str], None] | None = None,
    **reader_options: Any,
) -> ExportResult:
    """Append what is new of ``topic`` to the Iceberg ``table`` (``namespace.name``) of ``catalog`` (module doc).
    ``reader_options`` go to ``BulkReader`` (token, memory_budget, parallelism, client)."""
    _check_offsets(start_offset, "start_offset")
    _check_offsets(end_offset, "end_offset")
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes must be at least 1, got {chunk_bytes}")
    iceberg_catalog = load(catalog, catalog_properties)
    with BulkReader(gateway_url, cluster, isolation_level=isolation_level, include_headers=True, skip_gaps=not fail_on_data_loss,
                    **reader_options) as reader:
        return IcebergExport(reader, iceberg_catalog, table, chunk_bytes, say or (lambda line: log.info("%s", line))).run(
            topic, partition, start_offset, end_offset, fail_on_data_loss)


class IcebergExport:
    """One run over an open ``BulkReader`` (``include_headers=True``) and a PyIceberg catalog."""

    def __init__(self, reader: BulkReader, catalog: Any, identifier: str, chunk_bytes: int, say: Callable[[str], None]) -> None:
        if not reader.include_headers:
            raise ConfigError("an Iceberg export reads headers (the table has the headers column): BulkReader(include_headers=True)")
        self.reader, self.catalog, self.identifier, self.chunk_bytes, self.say = reader, catalog, identifier, chunk_bytes, say

    def run(self, topic: str, partition: int | None, start_offset: Offsets, end_offset: Offsets, fail_on_data_loss: bool) -> ExportResult:
        table = load_or_create(self.catalog, self.identifier)
        committed = {p: o for (t, p), o in committed_offsets(table_summaries(table)).items() if t == topic}
        result = ExportResult(self.identifier)
        spans = self._spans(topic, partition, start_offset, end_offset, committed, fail_on_data_loss, result)
        if not spans:
            return result
        writer = FileWriter(table.metadata, table.io, self.chunk_bytes)
        for span in spans:
            self._read(topic, span, result, writer)
        writer.flush()
        result.data_files = len(writer.files)
        result.snapshot_id = commit_append(table, writer.files, summary_properties(WRITER, result.next_offsets, result.gaps, result.coverage_start))
        return result

    def _spans(self, topic: str, partition: int | None, start_offset: Offsets, end_offset: Offsets, committed: Mapping[int, int],
               fail_on_data_loss: bool, result: ExportResult) -> list[_Span]:
        """Each partition's [start, end) for this run (module doc); data loss at the start per ``fail_on_data_loss``."""
        client = self.reader.client
        if partition is not None:
            numbers = [partition]
        else:
            topics = client.topics()
            if topic not in topics:
                client.partition(topic, 0)  # raises the gateway's error (unknown topic, authorization)
                raise ConfigError(f"the gateway does not list topic {topic!r}")
            numbers = sorted(topics[topic])
            for what, offsets in (("start_offset", start_offset), ("end_offset", end_offset)):
                unknown = sorted(set(offsets) - set(numbers)) if isinstance(offsets, Mapping) else []
                if unknown:
                    raise ConfigError(f"{what} names partitions {unknown} that topic {topic!r} does not have")
        spans = []
        for number in numbers:
            name, tp = f"{topic}-{number}", (topic, number)
            remote = client.partition(topic, number).remote
            asked_start, asked_end = _offset_for(start_offset, number), _offset_for(end_offset, number)
            table_next = committed.get(number)
            if remote is None or remote.segment_count == 0:
                if partition is not None or asked_start is not None or asked_end is not None:
                    raise OffsetNotRemoteError(f"OFFSET_OUT_OF_RANGE: remote storage holds nothing of {name}", offset=asked_start or 0, earliest=None, latest=None)
                result.nothing_remote.append(tp)
                continue
            earliest, remote_end = remote.earliest_offset, remote.latest_offset + 1
            resume = resume_from(self.identifier, topic, number, table_next, asked_start, earliest, remote_end, fail_on_data_loss)
            start = resume.start
            if resume.gap is not None:
                self.say(f"{name}: offsets {resume.gap.start}..{resume.gap.end} are no longer in remote storage; skipped (failOnDataLoss=false)")
                result.gaps.append(resume.gap)
            if resume.coverage_start is not None:
                result.coverage_start[tp] = start
                self.say(f"{name}: the table's coverage starts at offset {start}" + (" (remote storage's earliest)" if start == earliest else ""))
            end = remote_end if asked_end is None else asked_end
            if end < start:
                raise ConfigError(f"{name}: end_offset {end} is before where this run starts, {start}")
            result.starts[tp] = start
            if start < end or start != (table_next if table_next is not None else start):  # (moved by a skipped loss: recorded)
                spans.append(_Span(number, start, end))
        return spans

    def _read(self, topic: str, span: _Span, result: ExportResult, writer: FileWriter) -> None:
        tp = (topic, span.partition)
        if span.start == span.end:
            result.next_offsets[tp] = span.start
            return
        reader = self.reader
        for batch in reader.batches(topic, span.partition, span.start, span.end):
            writer.add(batch)
            result.rows += batch.num_rows
        result.gaps.extend(Gap(g.topic, g.partition, g.start_offset, g.end_offset, g.reason) for g in reader.gaps)
        result.held_back.extend(reader.held_back)
        held = [h.first_offset for h in reader.held_back]
        result.next_offsets[tp] = min(held) if held else span.end
        for name in (f.name for f in dataclasses.fields(ReadStats)):
            setattr(result.stats, name, getattr(result.stats, name) + getattr(reader.stats, name))
        self.say(f"{topic}-{span.partition}: offsets {span.start}..{result.next_offsets[tp] - 1} read"
                 + (f"; held back from {min(held)} (a transaction still open in remote storage)" if held else ""))
