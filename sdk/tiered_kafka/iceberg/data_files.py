"""Writing a topic table's data files and committing them: the one path of every writer (export, Spark backfill, stream).

**Data files** (``FileWriter``): Arrow batches in the table's columns (``conform``) are gathered into
chunks of about ``chunk_bytes`` and each chunk is written by PyIceberg's own writer
(``pyiceberg.io.pyarrow._dataframe_to_data_files``: Parquet, one file per ``day(timestamp)``
partition value at least, split at ``write.target-file-size-bytes``; names carry a fresh write
UUID per writer, so Spark tasks writing at once never collide). It runs where the rows are: in the
export's process, in each Spark task (``spark_writer``), given the table's metadata and FileIO
properties (the catalog itself is only opened by the driver). Nothing is visible until committed.

**Commit** (``commit_append``): one fast-append snapshot of every data file with the summary
entries of ``table_contract`` (offsets, gaps, coverage start, writer), on the table *as loaded
when the run planned* (PyIceberg asserts the branch still points to that snapshot, and the
contract's ``commit.retry.num-retries=0`` keeps it from rebasing): a concurrent commit makes this
one fail (``CommitFailedException``) and the rerun continues from the winner's offsets. Crash
points for the tests (``faults``): before the commit, inside it (the metadata file written, the
catalog not yet swapped), after it.
"""

from __future__ import annotations

import itertools
import pickle
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tiered_kafka.iceberg import faults
from tiered_kafka.iceberg.table_contract import arrow_schema

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

DEFAULT_CHUNK_BYTES = 128 * 1024 * 1024
_SOURCE_NAMES = {"timestampType": ("timestampType", "timestamp_type")}  # the bulk API's name of a table column


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (the bulk API's columns with headers, or Spark's Kafka columns) as the table's Arrow
    columns: ``timestamp_type`` named ``timestampType``, timestamps as µs UTC, headers' key nullable."""
    names = set(batch.schema.names)
    columns = []
    for target in schema:
        name = next((n for n in _SOURCE_NAMES.get(target.name, (target.name,)) if n in names), target.name)
        columns.append(batch.column(name).cast(target.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class FileWriter:
    """Writes conformed batches as data files of ``metadata``'s table, a chunk at a time (module doc)."""

    def __init__(self, metadata: TableMetadata, io: FileIO, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.metadata, self.io, self.chunk_bytes = metadata, io, chunk_bytes
        self.schema = arrow_schema()
        self.write_uuid = uuid.uuid4()
        self._counter = itertools.count(0)
        self._chunk: list[pa.RecordBatch] = []
        self._size = 0
        self.files: list[DataFile] = []
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """One batch of any source layout ``conform`` knows; written out once the chunk is full."""
        if not batch.num_rows:
            return
        self._chunk.append(conform(batch, self.schema))
        self._size += batch.nbytes
        self.rows += batch.num_rows
        if self._size >= self.chunk_bytes:
            self.flush()

    def flush(self) -> None:
        if not self._chunk:
            return
        from pyiceberg.io.pyarrow import _dataframe_to_data_files

        table = pa.Table.from_batches(self._chunk, schema=self.schema)
        self._chunk, self._size = [], 0
        self.files.extend(_dataframe_to_data_files(self.metadata, table, self.io, write_uuid=self.write_uuid, counter=self._counter))


def write_task_files(batches: Iterable[pa.RecordBatch], metadata: TableMetadata, io_properties: Mapping[str, str],
                     chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    """A Spark task's side (``mapInArrow``): its rows written as data files; one row per file, ``file``
    the pickled ``DataFile`` the driver commits."""
    from pyiceberg.io import load_file_io

    writer = FileWriter(metadata, load_file_io(dict(io_properties), metadata.location), chunk_bytes)
    for batch in batches:
        writer.add(batch)
    writer.flush()
    if writer.files:
        yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(f) for f in writer.files], pa.binary())], names=["file"])


def commit_append(table: Table, files: Iterable[DataFile], summary: Mapping[str, str]) -> int:
    """One snapshot adding ``files`` with ``summary`` on ``table`` as loaded (module doc); its id."""
    faults.arm_catalog(table.catalog)
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=dict(summary)).fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)
        snapshot_id = append.snapshot_id
        faults.fault_point("before-commit")
    tx.commit_transaction()
    faults.fault_point("after-commit")
    return snapshot_id


def unpickle_files(rows: Iterable[Any]) -> list[DataFile]:
    """The ``DataFile`` s of ``write_task_files``' rows, collected by the driver (trusted: its own tasks wrote them)."""
    return [pickle.loads(row["file"]) for row in rows]  # noqa: S301 (bytes from this job's own tasks)
