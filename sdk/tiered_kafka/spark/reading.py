"""Executor side of a ``tiered-kafka`` read: fetch a task's presigned ranges, decode, yield Arrow.

Each range is fetched with ``remote_read.fetch_range`` (an expired or refused URL is re-planned
once through the gateway named in the task, which is why a task carries the gateway URL, cluster
and token), CRC-checked and decoded with ``remote_read.decode_range``, and its records with
offsets in the slice's [start, end) are appended (``arrow.BatchBuilder``); control records are
skipped. The next ranges are fetched while one is decoded (``PREFETCH`` in flight), so network
waits overlap decoding. A batch of about ``BATCH_ROWS`` rows or ``BATCH_BYTES`` bytes is yielded
at a time, never mixing two Kafka partitions.

**read_committed** (``kafka.isolation.level``): each slice is decided by the one rule,
``tiered_kafka.transactions.CommittedFilter``, fed with the slice's batches in offset order
(aborted records and control records never become rows). Decision for a slice that ends inside
an open transaction: the task *reads on* for markers only, planning through the gateway from the
slice's last planned offset (plans of ``LOOKAHEAD_BYTES``), until every held transaction is
decided or remote storage ends (a plan past its end), so a slice boundary never changes a fate.
How far it reads on: with the stable end known, every transaction the filter still holds began
below it, so remote storage holds its marker (none is open at its end) and the look-ahead stops at
that marker. It may lie past the stable end (a transaction that began below it can end after a
later one began), so the stable end does not bound the look-ahead. With the stable end unknown the
look-ahead reads at most ``LOOKAHEAD_MAX_BYTES`` (the gateway's default ``max_bytes_limit``, as its
records endpoint does); what is still open then is undecided. Such a partition is read by one
slice only (``planning.make_tasks``), so the look-ahead runs once per partition, not per slice.
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

import logging
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from tiered_kafka.errors import OffsetNotRemoteError
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.gateway_client import GatewayClient, PlannedRange
from tiered_kafka.remote_read import DecodedBatch, decode_batch, decode_range, fetch_range
from tiered_kafka.spark.arrow import BatchBuilder
from tiered_kafka.spark.planning import ReadTask, Slice
from tiered_kafka.transactions import CommittedFilter, Fate

log = logging.getLogger(__name__)

PREFETCH = 2
BATCH_ROWS = 8192
BATCH_BYTES = 16 * 1024 * 1024
LOOKAHEAD_BYTES = 4 * 1024 * 1024
LOOKAHEAD_MAX_BYTES = 64 * 1024 * 1024  # stable end unknown: the gateway's default max_bytes_limit

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


def read_task(task: ReadTask, *, client: GatewayClient | None = None) -> Iterator[pa.RecordBatch]:
    """The records of ``task`` as Arrow record batches, in slice order, offsets ascending."""
    gateway = shared_client(task.gateway_url, task.cluster, task.token) if client is None else client
    work: list[tuple[Slice, str, PlannedRange]] = [(s, key, planned) for s in task.slices for key, planned in s.ranges]
    with ThreadPoolExecutor(PREFETCH, thread_name_prefix="tiered-kafka-fetch") as pool:
        pending: deque[Future[bytes]] = deque()
        submitted = 0

        def top_up() -> None:
            nonlocal submitted
            while submitted < len(work) and len(pending) < PREFETCH:
                piece, _key, planned = work[submitted]
                pending.append(pool.submit(fetch_range, gateway, piece.topic, piece.partition, planned))
                submitted += 1

        try:
            builder: BatchBuilder | None = None
            current: _SliceReader | None = None
            for piece, key, planned in work:
                top_up()
                data = pending.popleft().result()
                top_up()
                if builder is None or (builder.topic, builder.partition) != (piece.topic, piece.partition):
                    if current is not None:
                        current.finish(gateway)
                    if builder is not None and builder.rows:
                        yield builder.flush()
                    builder = BatchBuilder(
                        piece.topic, piece.partition, include_headers=task.include_headers, include_control_records=task.include_control_records
                    )
                    current = None
                if current is None or current.piece is not piece:
                    if current is not None:
                        current.finish(gateway)
                    current = _SliceReader(piece, builder, task.read_committed)
                current.add(decode_range(data, planned, object_key=key), planned)
                del data
                if builder.rows >= BATCH_ROWS or builder.payload_bytes >= BATCH_BYTES:
                    yield builder.flush()
            if current is not None:
                current.finish(gateway)
            if builder is not None and builder.rows:
                yield builder.flush()
        finally:
            for future in pending:
                future.cancel()


class _SliceReader:
    """One slice's batches into the builder: all of them, or (read_committed) what the rule delivers."""

    def __init__(self, piece: Slice, builder: BatchBuilder, read_committed: bool) -> None:
        self.piece = piece
        self.builder = builder
        self.rule: CommittedFilter[Any] | None = CommittedFilter(stable_end=piece.stable_end) if read_committed else None
        self.next_offset = piece.start

    def add(self, batches: list[DecodedBatch], planned: PlannedRange) -> None:
        self.next_offset = planned.last_offset + 1
        if self.rule is None:
            self.builder.add(batches, self.piece.start, self.piece.end)
            return
        end = self.piece.end
        for batch in batches:
            if batch.base_offset < end:
                self._emit(self.rule.push_decisions(batch))
            else:  # the last range may run past the slice: only its markers matter
                self.rule.look_ahead(batch)

    def finish(self, gateway: GatewayClient) -> None:
        """End of the slice: read on for markers while a transaction is open, then drain the rule."""
        rule = self.rule
        if rule is None:
            return
        piece = self.piece
        offset = self.next_offset
        budget = LOOKAHEAD_MAX_BYTES if piece.stable_end is None else None  # module doc: how far it reads on
        while rule.undecided and (budget is None or budget > 0):
            try:
                plan = gateway.plan(piece.topic, piece.partition, offset, LOOKAHEAD_BYTES if budget is None else min(budget, LOOKAHEAD_BYTES))
            except OffsetNotRemoteError as err:
                if err.past_the_end:
                    break  # remote storage ends: what is open stays undecided
                raise
            for planned in plan.ranges:
                data = fetch_range(gateway, piece.topic, piece.partition, planned)
                if budget is not None:
                    budget -= len(data)
                for batch in iter_batches(data, position=planned.start):
                    rule.look_ahead(decode_batch(batch, with_records=False))
                if not rule.undecided:
                    break
            if plan.next_offset <= offset:
                break
            offset = plan.next_offset
        self._emit(rule.take_released())
        undecided = 0
        first_undecided: int | None = None
        for batch, fate in rule.drain():
            if fate is Fate.CONTROL:
                self.builder.add_skipped(batch, piece.start, piece.end, "control")
            elif fate is Fate.ABORTED:
                self.builder.add_skipped(batch, piece.start, piece.end, "aborted")
            elif batch.last_offset >= piece.start and batch.base_offset < piece.end:  # held behind an open transaction
                self.builder.add_skipped(batch, piece.start, piece.end, "undecided")
                undecided += sum(1 for r in batch.records if piece.start <= r.offset < piece.end)
                first_undecided = max(piece.start, batch.base_offset) if first_undecided is None else first_undecided
        if undecided:
            log.warning(
                "tiered-kafka: %s-%d: %d records from offset %d on are not read: a transaction there or before is still open in "
                "remote storage (read_committed: at or past the last stable offset, or its marker is not uploaded yet)",
                piece.topic, piece.partition, undecided, first_undecided,
            )

    def _emit(self, decisions: list[tuple[Any, Fate]]) -> None:
        piece, builder = self.piece, self.builder
        for batch, fate in decisions:
            if fate is Fate.DELIVER:
                builder.add([batch], piece.start, piece.end)
            elif fate is Fate.ABORTED:
                builder.add_skipped(batch, piece.start, piece.end, "aborted")
            elif fate is Fate.CONTROL:
                builder.add_skipped(batch, piece.start, piece.end, "control")
