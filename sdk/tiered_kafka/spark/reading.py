"""Executor side of a ``tiered-kafka`` read: fetch a task's presigned ranges, decode, yield Arrow.

The driver planned ranges of at most ``planning.GET_BYTES`` (the task's memory budget over its
GETs in flight; ``planning`` rule 3), each one GET; contiguous ranges sharing one URL are merged
within that size (``gateway_client.coalesce_ranges``, #15). ``PREFETCH`` GETs are in flight while
one is selected. Each GET goes through
``columnar_read.read_range``: fetched with ``remote_read.fetch_range`` (an expired or refused URL
is re-planned once through the gateway named in the task, which is why a task carries the gateway
URL, cluster and token), CRC-checked and decoded straight into Arrow columns
(``format.columnar``, in the fetch thread, so decoding overlaps network waits); a
``columnar_read.ColumnarSelector`` per slice keeps the rows with offsets in the slice's
[start, end) (and, under read_committed, what the rule delivers), and ``arrow.spark_batch`` gives
them Spark's columns. No Python object is made per record. Batches of at most about
``BATCH_BYTES`` are yielded (zero-copy slices), never mixing two Kafka partitions.

**read_committed** (``kafka.isolation.level``): each slice is decided by the one rule,
``tiered_kafka.transactions.CommittedFilter``, fed with the slice's batches in offset order
(aborted records and control records never become rows). A slice that ends inside an open
transaction *reads on* for markers only (``columnar_read.finish_read``: how far), so a slice
boundary never changes a fate. A partition whose stable end is unknown is read by one slice only
(``planning.make_tasks``), so its bounded look-ahead runs once per partition, not per slice.
The executor cannot read ``.txnindex`` objects (the gateway plans ``.log`` ranges only), so
markers are its only input; they decide exactly what the index would. A transaction still open at
the end of remote data is undecided: its records and every record of the slice after its first
one are not rows (the remote analogue of Kafka's last stable offset, as the gateway's records
endpoint and ``TieredConsumer`` stop there); a warning names them, and with
``tiered.includeControlRecords`` they are ``undecided`` rows for the backfill's count. Every
slice also holds back what is at or past the partition's remote last stable offset read when the
source was planned (``Slice.stable_end``; ``transactions`` module doc), so a slice starting past a
transaction opened in an earlier slice and still open yields nothing past it either, as Kafka's
source under read_committed would; those records are ``undecided`` too. When that offset is
unknown (no producer snapshot: Pinterest buckets, entries from before the field), the partition's
read is one slice (``planning.make_tasks``): one filter sees it in order and the read stops at its
first undecided offset, as a Kafka read_committed consumer stops at the LSO; nothing after it is a
row, so there is never a hole in the middle of a partition. The backfill prints that offset as the
partition's resume offset.

Spark reuses its Python workers across tasks, so each worker process keeps one
``GatewayClient`` per (gateway, cluster, token) (:func:`shared_client`): its HTTP connection
pools and TLS contexts (tens of milliseconds to build) serve every task the process runs.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa

from tiered_kafka.client.columnar_read import ColumnarSelector, finish_read, read_range
from tiered_kafka.client.gateway import GatewayClient, PlannedRange, coalesce_ranges
from tiered_kafka.spark.arrow import spark_batch
from tiered_kafka.spark.planning import GET_BYTES, PREFETCH, ReadTask, Slice
from tiered_kafka.transactions import CommittedFilter

if TYPE_CHECKING:
    from tiered_kafka.format.columnar import ColumnarRange

BATCH_BYTES = 16 * 1024 * 1024

_clients: dict[tuple[str, str, str | None], GatewayClient] = {}
_clients_lock = threading.Lock()


def shared_client(gateway_url: str, cluster: str, token: str | None) -> GatewayClient:
    """This process's client of (gateway, cluster, token), created on first use (thread-safe)."""
    key = (gateway_url, cluster, token)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = GatewayClient(gateway_url, cluster, token=token)
        return client


def task_gets(task: ReadTask, get_bytes: int = GET_BYTES) -> list[tuple[Slice, str, PlannedRange]]:
    """The task's GETs: each slice's ranges, contiguous ones of one object coalesced within ``get_bytes``."""
    out = []
    for piece in task.slices:
        for key, group in itertools.groupby(piece.ranges, key=lambda kr: kr[0]):
            out.extend((piece, key, planned) for planned in coalesce_ranges([r for _k, r in group], get_bytes))
    return out


def read_task(task: ReadTask, *, client: GatewayClient | None = None) -> Iterator[pa.RecordBatch]:
    """The records of ``task`` as Arrow record batches, in slice order, offsets ascending (then its
    Kafka slices, hybrid modes: ``kafka_reading``)."""
    if task.kafka_slices:
        from tiered_kafka.spark.kafka_reading import read_kafka_slice

        for kafka_slice in task.kafka_slices:
            yield from read_kafka_slice(task, kafka_slice)
    if not task.slices:
        return
    gateway = shared_client(task.gateway_url, task.cluster, task.token) if client is None else client
    work = task_gets(task)
    with ThreadPoolExecutor(PREFETCH, thread_name_prefix="tiered-kafka-fetch") as pool:
        pending: deque[Future[ColumnarRange]] = deque()
        submitted = 0

        def top_up() -> None:
            nonlocal submitted
            while submitted < len(work) and len(pending) < PREFETCH:
                piece, key, planned = work[submitted]
                pending.append(pool.submit(read_range, gateway, piece.topic, piece.partition, planned, object_key=key, include_headers=task.include_headers))
                submitted += 1

        try:
            current: Slice | None = None
            selector: ColumnarSelector | None = None
            for piece, _key, planned in work:
                top_up()
                decoded = pending.popleft().result()
                top_up()
                if selector is None or current is not piece:
                    if selector is not None and current is not None:
                        yield from _batches(task, current, _finish(gateway, current, selector))
                    current, selector = piece, _selector(task, piece)
                selected = selector.add(decoded, planned.first_offset, planned.last_offset)
                del decoded
                yield from _batches(task, piece, selected)
            if selector is not None and current is not None:
                yield from _batches(task, current, _finish(gateway, current, selector))
        finally:
            for future in pending:
                future.cancel()


def _selector(task: ReadTask, piece: Slice) -> ColumnarSelector:
    committed = CommittedFilter(stable_end=piece.stable_end) if task.read_committed else None
    return ColumnarSelector(piece.start, piece.end, committed=committed, report_skipped=task.include_control_records)


def _finish(gateway: GatewayClient, piece: Slice, selector: ColumnarSelector) -> list[pa.RecordBatch]:
    """End of a slice: ``columnar_read.finish_read`` (reads on for markers while a transaction is
    open; what is still held is undecided, and a warning names it)."""
    return finish_read(gateway, piece.topic, piece.partition, selector)


def _batches(task: ReadTask, piece: Slice, selected: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Spark's columns, in zero-copy slices of at most about ``BATCH_BYTES``."""
    for records in selected:
        batch = spark_batch(records, piece.topic, piece.partition, include_headers=task.include_headers, include_control_records=task.include_control_records)
        n = batch.num_rows
        if not n:
            continue
        step = max(1, n * BATCH_BYTES // max(1, batch.nbytes))
        for at in range(0, n, step):
            yield batch.slice(at, step)
