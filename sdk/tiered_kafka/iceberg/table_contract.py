"""The contract of a topic's Iceberg table, shared by every writer (PyIceberg export, Spark backfill, Spark stream).

**Columns**, as Spark's Kafka source names them (``KafkaRecordToRowConverter``), all optional so that
Spark (whose Kafka rows are nullable) and PyIceberg write the same table::

    1 topic string, 2 partition int, 3 offset long, 4 timestamp timestamptz (Kafka's ms as µs),
    5 timestampType int (0 CreateTime, 1 LogAppendTime; -1 none, as the SDK's decoder),
    6 key binary, 7 value binary, 8 headers list<struct<key string, value binary>>

Partitioned by ``day(timestamp)`` (a record without a timestamp, magic 0, lands in the null day).
Table property ``commit.retry.num-retries=0`` (set on create, and on the first write to a table
lacking it): both Iceberg libraries otherwise rebase a commit that lost a race onto the winner and
commit it again, which for an append of offsets the winner may also have covered is a duplicate.
With 0, the loser fails (``CommitFailedException``) and its rerun continues from the winner's offsets.

**Offsets in the snapshot summary** (the exactly-once rule). Every commit of a writer records, in
its snapshot's summary, under ``tiered-kafka.next-offsets``, the *next* offset of every partition
it covered, as Spark's Kafka source writes offsets (``{"topic": {"0": 42}}``,
``stream_planning.offsets_to_json``). The table's committed offsets are found by walking the
current snapshot's ancestry, newest first: a partition's offset is the first one met
(``committed_offsets``); a snapshot without the key (another writer: compaction, a delete) is
passed. A rerun reads from there, so data files and their offsets land in one atomic commit or not
at all: a writer killed before or during its commit leaves orphan files (no snapshot names them;
Iceberg's ``remove_orphan_files`` reclaims them) and its rerun writes the same offsets again, once.
Also in the summary, for people and audits: ``tiered-kafka.gaps`` (a JSON list of
``{"topic", "partition", "start", "end", "reason"}``, end inclusive: offsets the writer went past
under ``failOnDataLoss=false``) and ``tiered-kafka.coverage-start`` (offsets JSON: where a partition
first entered the table, when above 0), and ``tiered-kafka.writer`` (which tool committed).
A stream's commits carry ``tiered-kafka.stream`` instead (``{"checkpoint": path, "epoch": N}``:
``spark_writer``), whose newest epoch per checkpoint is ``last_stream_epoch``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiered_kafka.errors import ConfigError, OffsetNotRemoteError, RemoteReadError
from tiered_kafka.spark.stream_planning import offsets_from_json, offsets_to_json

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

NEXT_OFFSETS = "tiered-kafka.next-offsets"
GAPS = "tiered-kafka.gaps"
COVERAGE_START = "tiered-kafka.coverage-start"
WRITER = "tiered-kafka.writer"
STREAM = "tiered-kafka.stream"
TABLE_PROPERTIES = {"commit.retry.num-retries": "0", "format-version": "2"}
COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers")

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Gap:
    """Offsets ``start..end`` (inclusive) of a partition a writer went past (``failOnDataLoss=false``)."""

    topic: str
    partition: int
    start: int
    end: int
    reason: str


@dataclass
class WriteResult:
    """What one writer's run did. ``snapshot_id`` None: nothing committed (``nothing_new``)."""

    table: str
    snapshot_id: int | None = None
    rows: int = 0
    data_files: int = 0
    starts: dict[TopicPartition, int] = field(default_factory=dict)
    next_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    coverage_start: dict[TopicPartition, int] = field(default_factory=dict)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def nothing_new(self) -> bool:
        return self.snapshot_id is None


def iceberg_schema() -> Schema:
    """The table's Iceberg schema (module doc)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import BinaryType, IntegerType, ListType, LongType, NestedField, StringType, StructType, TimestamptzType

    header = StructType(NestedField(10, "key", StringType(), required=False), NestedField(11, "value", BinaryType(), required=False))
    return Schema(
        NestedField(1, "topic", StringType(), required=False),
        NestedField(2, "partition", IntegerType(), required=False),
        NestedField(3, "offset", LongType(), required=False),
        NestedField(4, "timestamp", TimestamptzType(), required=False),
        NestedField(5, "timestampType", IntegerType(), required=False),
        NestedField(6, "key", BinaryType(), required=False),
        NestedField(7, "value", BinaryType(), required=False),
        NestedField(8, "headers", ListType(9, header, element_required=False), required=False),
    )


def partition_spec() -> PartitionSpec:
    """``day(timestamp)``."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform

    return PartitionSpec(PartitionField(source_id=4, field_id=1000, transform=DayTransform(), name="timestamp_day"))


def arrow_schema() -> pa.Schema:
    """The columns as Arrow (what ``data_files.conform`` yields; PyIceberg matches them by name)."""
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    return pa.schema([
        pa.field("topic", pa.string()), pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("headers", pa.list_(header)),
    ])


def committed_offsets(summaries: Iterable[Mapping[str, str]]) -> dict[TopicPartition, int]:
    """The table's next offset per partition, from its snapshots' summaries, newest first (module doc)."""
    found: dict[TopicPartition, int] = {}
    for summary in summaries:
        text = summary.get(NEXT_OFFSETS)
        if not text:
            continue
        try:
            offsets = offsets_from_json(json.loads(text))
        except (ValueError, ConfigError) as err:
            raise ConfigError(f"the table's snapshot summary {NEXT_OFFSETS} is not Kafka's offset JSON: {err}") from err
        for tp, offset in offsets.items():
            found.setdefault(tp, offset)
    return found


def last_stream_epoch(summaries: Iterable[Mapping[str, str]], checkpoint: str) -> int | None:
    """The newest epoch a stream of ``checkpoint`` committed, from summaries newest first; None: none."""
    for summary in summaries:
        text = summary.get(STREAM)
        if text:
            stream = json.loads(text)
            if stream.get("checkpoint") == checkpoint:
                return int(stream["epoch"])
    return None


def table_summaries(table: Table) -> list[dict[str, str]]:
    """The summaries of the current snapshot's ancestry, newest first (PyIceberg)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return []
    return [dict(s.summary.additional_properties) if s.summary is not None else {} for s in ancestors_of(current, table.metadata)]


def summary_properties(writer: str, next_offsets: Mapping[TopicPartition, int], gaps: Sequence[Gap] = (),
                       coverage_start: Mapping[TopicPartition, int] | None = None) -> dict[str, str]:
    """The summary entries of one commit (module doc)."""
    out = {WRITER: writer, NEXT_OFFSETS: json.dumps(offsets_to_json(next_offsets), separators=(",", ":"))}
    if gaps:
        out[GAPS] = json.dumps([{"topic": g.topic, "partition": g.partition, "start": g.start, "end": g.end, "reason": g.reason} for g in gaps])
    if coverage_start:
        out[COVERAGE_START] = json.dumps(offsets_to_json(coverage_start), separators=(",", ":"))
    return out


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a writer's run starts in one partition: ``start``; the offsets it skips there (``gap``,
    ``failOnDataLoss=false``); ``coverage_start``: the partition enters the table there, above 0."""

    start: int
    gap: Gap | None = None
    coverage_start: int | None = None


def resume_from(table: str, topic: str, partition: int, table_next: int | None, asked_start: int | None, earliest: int, remote_end: int,
                fail_on_data_loss: bool) -> Resume:
    """The one rule every writer starts a partition by (``export`` module doc): the table's next offset,
    else ``asked_start``, else remote storage's ``earliest``; what remote storage no longer holds is
    data loss (Spark's ``failOnDataLoss``: ``OffsetNotRemoteError``, else a ``Gap``); a table ahead of
    ``remote_end`` is an error; ``asked_start`` differing from the table's next offset is a ``ConfigError``."""
    name = f"{topic}-{partition}"
    if table_next is not None and asked_start is not None and asked_start != table_next:
        raise ConfigError(f"{name}: the table {table} continues at offset {table_next}, not {asked_start} (every offset is written once)")
    if table_next is not None and table_next > remote_end:
        raise RemoteReadError(f"{name}: the table {table} is at offset {table_next}, past remote storage's end {remote_end}: "
                              "is it another cluster's table, or was the topic recreated?")
    start = table_next if table_next is not None else asked_start if asked_start is not None else earliest
    gap = None
    if start < earliest:
        message = f"{name}: offsets {start}..{earliest - 1} are no longer in remote storage (it starts at {earliest})"
        if fail_on_data_loss:
            raise OffsetNotRemoteError(f"OFFSET_OUT_OF_RANGE: {message} (set failOnDataLoss=false to skip them)", offset=start, earliest=earliest,
                                       latest=remote_end - 1)
        gap = Gap(topic, partition, start, earliest - 1, "below remote storage's earliest offset")
        start = earliest
    return Resume(start, gap, start if table_next is None and start > 0 else None)


def parse_identifier(text: str) -> tuple[str, str]:
    """``namespace.table`` (the namespace may hold dots: the last part is the table); ConfigError otherwise."""
    parts = text.split(".")
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"an Iceberg table is named namespace.table, got {text!r}")
    return ".".join(parts[:-1]), parts[-1]


def load_or_create(catalog: Any, identifier: str) -> Table:
    """The table (created with the contract's schema, spec and properties when missing; namespace too).
    An existing table must have the contract's columns; one lacking ``commit.retry.num-retries=0`` gets it."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

    namespace, _name = parse_identifier(identifier)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        try:
            catalog.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        try:
            return catalog.create_table(identifier, iceberg_schema(), partition_spec=partition_spec(), properties=dict(TABLE_PROPERTIES))
        except TableAlreadyExistsError:  # another writer created it meanwhile
            table = catalog.load_table(identifier)
    names = {field.name for field in table.schema().fields}
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise ConfigError(f"table {identifier} lacks columns {', '.join(missing)}: it is not a topic's table (columns: {', '.join(sorted(names))})")
    if table.properties.get("commit.retry.num-retries") != "0":
        with table.transaction() as tx:
            tx.set_properties({"commit.retry.num-retries": "0"})
        table = catalog.load_table(identifier)
    return table
