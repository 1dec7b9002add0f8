"""Executor side of a ``tiered-kafka`` read: fetch a task's presigned ranges, decode, yield Arrow.

Each range is fetched with ``remote_read.fetch_range`` (an expired or refused URL is re-planned
once through the gateway named in the task, which is why a task carries the gateway URL, cluster
and token), CRC-checked and decoded with ``remote_read.decode_range``, and its records with
offsets in the slice's [start, end) are appended (``arrow.BatchBuilder``); control records are
skipped. The next ranges are fetched while one is decoded (``PREFETCH`` in flight), so network
waits overlap decoding. A batch of about ``BATCH_ROWS`` rows or ``BATCH_BYTES`` bytes is yielded
at a time, never mixing two Kafka partitions.

Spark reuses its Python workers across tasks, so each worker process keeps one
``GatewayClient`` per (gateway, cluster, token) (:func:`shared_client`): its HTTP connection
pools and TLS contexts (tens of milliseconds to build) serve every task the process runs.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from tiered_kafka.gateway_client import GatewayClient, PlannedRange
from tiered_kafka.remote_read import decode_range, fetch_range
from tiered_kafka.spark.arrow import BatchBuilder
from tiered_kafka.spark.planning import ReadTask, Slice

PREFETCH = 2
BATCH_ROWS = 8192
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
            for piece, key, planned in work:
                top_up()
                data = pending.popleft().result()
                top_up()
                if builder is None or (builder.topic, builder.partition) != (piece.topic, piece.partition):
                    if builder is not None and builder.rows:
                        yield builder.flush()
                    builder = BatchBuilder(
                        piece.topic, piece.partition, include_headers=task.include_headers, include_control_records=task.include_control_records
                    )
                builder.add(decode_range(data, planned, object_key=key), piece.start, piece.end)
                del data
                if builder.rows >= BATCH_ROWS or builder.payload_bytes >= BATCH_BYTES:
                    yield builder.flush()
            if builder is not None and builder.rows:
                yield builder.flush()
        finally:
            for future in pending:
                future.cancel()
