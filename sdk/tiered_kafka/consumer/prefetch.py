"""Reading partitions' remote data ahead of the application, within one memory budget.

One ``RemoteReader`` per partition being read remotely: a planner thread asks the gateway for read
plans from the partition's position on and hands the plan's ranges to a shared thread pool
(``tiered.prefetch.parallelism`` presigned GETs at once), which fetches them and turns each into
what the consumer delivers (``convert``: ``messages.range_messages``, which checks every CRC and
record, without the GIL for uncompressed batches, and indexes the range; its Messages are made
later, a slice at a time, on the consumer's thread). Fetched ranges queue up in offset order as
``Chunk``s; the consumer's thread takes them from the head only, so records come out in offset
order whatever order the GETs complete in.

Memory: every range reserves ``IN_FLIGHT_FACTOR`` times its size in the shared ``ByteBudget``
before its GET is issued (the response's chunks and the joined body coexist for a moment, with
room to spare); once checked, the reservation becomes what the range really holds
(``range_messages``' second value: the range's bytes, decompressed payloads, and one slice of
Messages, about 1.15 times the range for 1 KiB records), which is given back when the application
has taken its last record. ``tiered.prefetch.max.bytes`` covers the fetch threads
too: ``THREAD_OVERHEAD`` each is taken off before the rest is shared by the data (``data_budget``).

The bound: the bytes reserved never exceed the data budget plus ``OVERDRAFT_BYTES``, whatever the
number of partitions (one range alone may exceed it only when nothing else is reserved: a record
batch larger than the overdraft, which must be read whole). How:
  * plans are asked in pieces of at most half a reader's fair share (the budget divided among
    the partitions being read), so each reader's ranges fit its share (at least one batch:
    the gateway always plans a whole batch, as Kafka's fetch does, KIP-74), and a reader has
    one plan being consumed while the next is fetched (``plan_bytes``);
  * a reader holding something reserves only within its fair share and the budget;
  * a reader holding nothing (which must get one range through, or a partition whose share is
    smaller than one batch would never progress) may go past the budget, but only within the
    one shared ``OVERDRAFT_BYTES``: partitions then progress one overdrawn range at a time.
A range can hold more than its reservation (compressed batches, or records so small that
``MESSAGE_OVERHEAD``-like per-record costs dominate a slice): the budget learns the largest
expansion seen (``ByteBudget.factor``, bytes held per fetched byte, never below
``IN_FLIGHT_FACTOR``) and every later range reserves by it, so only ranges reserved before the
first such range can push the total past the bound, by their expansion beyond ``IN_FLIGHT_FACTOR``.
A paused partition keeps the chunks it prefetched, and with them its part of the budget.

GETs (#15): plans are sized by the budget, not by a fixed size: ``plan_bytes`` is the reader's
share in fetched bytes split among the ``IN_FLIGHT_RANGES`` (2) it keeps in flight, one being taken
by the application while the next is fetched (``fair_share / (2 * factor)``), capped by the
gateway's default ``max_bytes_limit`` (64 MiB; a gateway configured lower answers 400 to larger
plans: set ``tiered.plan.max.bytes``, which caps it further when given). A plan is asked in as few
ranges as its batches allow (``GatewayClient.plan``'s ``range_bytes`` defaults to ``max_bytes``:
the gateway's presigned URLs bind one range each) and what still touches is merged
(``gateway_client.coalesce_ranges``): one GET per plan. So GETs are as few as the budget allows;
a larger budget gives larger GETs. With the defaults (128 MiB budget, 4 fetch threads: 96 MiB of
data) one partition plans ``default_plan_bytes`` = 16 MiB at a time, 2 at once; 8 partitions
2 MiB each, the 4 threads shared among them.
Decision: two ranges in flight per partition, not one per fetch thread: S3 throttles and bills per
request, and at 16 MiB a GET's latency is small beside its transfer; many partitions still keep
every thread busy. (A single partition with 4 small plans in flight read no faster here.)

The chunks also carry what ends a remote read, for the consumer to act on at the exact offset:
``END`` (remote storage ends here; not used when ``tail`` — REMOTE_ONLY waits for new uploads),
``BELOW_START`` (remote retention removed the offset), ``GAP`` (the agent recorded a gap; the
following chunks continue after it) and ``ERROR`` (retries exhausted).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tiered_kafka.errors import OffsetNotRemoteError, RemoteReadError, TieredKafkaError
from tiered_kafka.client.gateway import GatewayClient, PlanGap, PlannedRange, coalesce_ranges
from tiered_kafka.client.remote_read import fetch_range

log = logging.getLogger(__name__)
#: the smallest plan asked of the gateway (the gateway plans at least one whole batch anyway)
MIN_PLAN_BYTES = 16 * 1024
#: a range being fetched is reserved three times over: the response's chunks and the joined body
#: coexist, then the body and what is made of it (what it holds replaces this once it is checked)
IN_FLIGHT_FACTOR = 3
#: how far past the budget a reader holding nothing may reserve (one at a time): one range of one
#: batch up to Kafka's default max.message.bytes (1 MiB), held ``IN_FLIGHT_FACTOR`` times over
OVERDRAFT_BYTES = IN_FLIGHT_FACTOR * 2**20
#: ranges a reader keeps in flight: one being taken by the application while the next is fetched
IN_FLIGHT_RANGES = 2
#: the largest plan asked by default: the gateway's default ``max_bytes_limit``
#: (app/tiered_kafka_gateway/config.py), above which it answers 400
GATEWAY_MAX_BYTES_LIMIT = 64 * 2**20


#: an allowance for what a fetch thread costs whatever the data (its allocator arena, which keeps
#: freed multi-MiB bodies, socket buffers): bench/bench_sdk.py measured 25-35 MiB of peak RSS
#: beyond the reserved data with 4 threads when ranges were decoded into columns; with the ranges
#: held as their bytes (messages.py) the peak RSS growth stays within the budget; it prints both
THREAD_OVERHEAD = 8 * 2**20


def data_budget(prefetch_max_bytes: int, threads: int) -> int:
    """The part of ``tiered.prefetch.max.bytes`` left for data once the fetch threads are paid for."""
    return max(MIN_PLAN_BYTES * IN_FLIGHT_FACTOR, prefetch_max_bytes - threads * THREAD_OVERHEAD)


def plan_bytes(budget: ByteBudget, plan_max_bytes: int | None) -> int:
    """Bytes to ask of the next plan: the reader's fair share (in fetched bytes, ``factor``) split
    among the ``IN_FLIGHT_RANGES`` it keeps in flight, within ``plan_max_bytes`` (``tiered.plan.max.bytes``;
    None: the gateway's default limit)."""
    cap = GATEWAY_MAX_BYTES_LIMIT if plan_max_bytes is None else plan_max_bytes
    return max(MIN_PLAN_BYTES, min(cap, budget.fair_share() // (IN_FLIGHT_RANGES * budget.factor)))


def default_plan_bytes(config: dict[str, Any]) -> int:
    """The plan size a TieredConsumer with ``config`` asks when it reads one partition (before
    any expansion is learnt): what ``bench/bench_plans.py`` reports as the SDK default."""
    from tiered_kafka.consumer.config import parse_config  # (config imports this module)

    tiered = parse_config(config)
    budget = ByteBudget(data_budget(tiered.prefetch_max_bytes, tiered.prefetch_parallelism), tiered.prefetch_parallelism)
    budget.readers = 1
    return plan_bytes(budget, tiered.plan_max_bytes)


class ByteBudget:
    """Bytes of prefetched data, shared by every partition's reader."""

    def __init__(self, limit: int, parallelism: int = 1) -> None:
        """``parallelism``: the fetch threads (``tiered.prefetch.parallelism``) the readers share."""
        self.limit = limit
        self.parallelism = parallelism
        self.used = 0
        self.peak = 0  # the most ever reserved (a measure of the prefetch's memory)
        self.readers = 0
        self.factor = IN_FLIGHT_FACTOR  # bytes reserved per fetched byte (grows with the data's expansion)
        self._cond = threading.Condition()

    def fair_share(self) -> int:
        return max(MIN_PLAN_BYTES, self.limit // max(1, self.readers))

    def acquire(self, size: int, held_by_reader: Callable[[], int], stop: threading.Event) -> bool:
        """Reserve ``size`` bytes for a reader holding ``held_by_reader()`` (False when ``stop`` is set).

        Within its fair share and the budget; a reader holding nothing may also use the shared
        overdraft (the bound in the module docstring), or take any size when nothing is reserved.
        """
        with self._cond:
            while not self._fits(size, held_by_reader()):
                if stop.is_set():
                    return False
                self._cond.wait(0.1)
            if stop.is_set():
                return False
            self.used += size
            self.peak = max(self.peak, self.used)
            return True

    def _fits(self, size: int, held: int) -> bool:
        if self.used + size <= self.limit and held + size <= self.fair_share():
            return True
        return held == 0 and (self.used + size <= self.limit + OVERDRAFT_BYTES or self.used == 0)

    def learn(self, fetched: int, held: int) -> None:
        """A range of ``fetched`` bytes holds ``held`` bytes once checked and decoded (the fetched
        bytes included, with what is made of them): every later range reserves by it."""
        factor = -(-held // max(1, fetched))
        if factor > self.factor:
            self.factor = factor

    def adjust(self, delta: int) -> None:
        with self._cond:
            self.used += delta
            self.peak = max(self.peak, self.used)
            if delta < 0:
                self._cond.notify_all()


class ChunkKind(enum.Enum):
    DATA = "data"
    END = "end"
    BELOW_START = "below_start"
    GAP = "gap"
    ERROR = "error"


@dataclass
class Chunk:
    kind: ChunkKind
    offset: int  # DATA: the range's first offset; END/BELOW_START: the offset asked; GAP: its start
    future: Future[Any] | None = None  # DATA: what ``convert`` made of the range
    reserved: int = 0
    gap: PlanGap | None = None
    error: BaseException | None = None
    earliest: int | None = None  # BELOW_START: the first offset remote storage holds
    stable_end: int | None = None  # DATA, read_committed: the remote LSO when the range was planned (None: unknown)


class RemoteReader:
    """Prefetches one partition's remote data from ``offset`` on (see the module docstring)."""

    def __init__(
        self,
        client: GatewayClient,
        topic: str,
        partition: int,
        offset: int,
        *,
        budget: ByteBudget,
        pool: ThreadPoolExecutor,
        convert: Callable[[str, int, bytes, PlannedRange, str], tuple[Any, int]],
        plan_max_bytes: int | None,
        tail: bool,
        poll_interval_s: float,
        wake: threading.Event,
        read_committed: bool = False,
    ) -> None:
        """``convert(topic, partition, data, planned, object_key)``: what a DATA chunk's future holds
        (made of a fetched range: it checks and decodes it), and what that holds in memory. ``plan_max_bytes``: ``tiered.plan.max.bytes`` (None: sized by the budget,
        ``plan_bytes``). ``read_committed``: plans carry the remote LSO, and so do their DATA chunks."""
        self.topic = topic
        self.partition = partition
        self.start_offset = offset
        self._client = client
        self._budget = budget
        self._pool = pool
        self._convert = convert
        self._plan_max_bytes = plan_max_bytes
        self._tail = tail
        self._poll_interval_s = poll_interval_s
        self._wake = wake
        self._read_committed = read_committed
        self._chunks: deque[Chunk] = deque()
        self._held = 0  # bytes reserved by this reader's chunks
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._budget.readers += 1
        self._thread = threading.Thread(target=self._plan_loop, name=f"tiered-prefetch-{topic}-{partition}", daemon=True)
        self._thread.start()

    # -- the consumer's side ------------------------------------------------------------------
    def head(self) -> Chunk | None:
        """The next chunk if it is ready (a DATA chunk whose GET finished, or any marker)."""
        with self._lock:
            if not self._chunks:
                return None
            chunk = self._chunks[0]
            if chunk.future is not None and not chunk.future.done():
                return None
            return chunk

    def pop(self) -> Chunk:
        with self._lock:
            return self._chunks.popleft()

    def release(self, chunk: Chunk) -> None:
        """The application took the chunk's records: its bytes go back to the budget."""
        with self._lock:
            self._held -= chunk.reserved
        self._budget.adjust(-chunk.reserved)
        chunk.reserved = 0

    def stop(self) -> None:
        """Stop planning, cancel what has not started, give back every reserved byte."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._budget.readers -= 1  # (only the consumer's thread starts and stops readers)
        with self._lock:
            chunks, self._chunks = list(self._chunks), deque()
        for chunk in chunks:
            self._discard(chunk)

    def _discard(self, chunk: Chunk) -> None:
        if chunk.future is not None and not chunk.future.cancel():
            chunk.future.add_done_callback(lambda _f: self._give_back(chunk))  # after its decode settled the size
        else:
            self._give_back(chunk)

    def join(self, timeout_s: float) -> None:
        """Wait for the planner thread to finish (after ``stop()``; it may be inside a gateway call)."""
        self._thread.join(timeout_s)

    def _give_back(self, chunk: Chunk) -> None:
        self._budget.adjust(-chunk.reserved)
        chunk.reserved = 0

    # -- the planner thread -------------------------------------------------------------------
    def _plan_loop(self) -> None:
        offset = self.start_offset
        try:
            while not self._stop.is_set():
                try:
                    max_bytes = plan_bytes(self._budget, self._plan_max_bytes)
                    plan = self._client.plan(self.topic, self.partition, offset, max_bytes, read_committed=self._read_committed)
                    if self._stop.is_set():
                        return
                except OffsetNotRemoteError as err:
                    if err.past_the_end and self._tail:
                        self._stop.wait(self._poll_interval_s)
                        continue
                    kind = ChunkKind.END if err.past_the_end else ChunkKind.BELOW_START
                    self._push(Chunk(kind, offset, earliest=err.earliest))
                    return
                if plan.gap is not None:
                    self._push(Chunk(ChunkKind.GAP, plan.gap.start_offset, gap=plan.gap))
                for planned in coalesce_ranges(plan.ranges, max_bytes):
                    reserve = planned.size * self._budget.factor
                    if not self._budget.acquire(reserve, lambda: self._held, self._stop):
                        return
                    with self._lock:
                        self._held += reserve
                    chunk = Chunk(ChunkKind.DATA, planned.first_offset, reserved=reserve, stable_end=plan.last_stable_offset)
                    try:
                        chunk.future = self._pool.submit(self._load, plan.object_key, planned, chunk)
                    except RuntimeError:  # the pool shut down: the consumer is closing
                        self._give_back(chunk)
                        return
                    chunk.future.add_done_callback(lambda _f: self._wake.set())
                    self._push(chunk)
                if plan.next_offset <= offset:
                    raise RemoteReadError(f"{self.topic}-{self.partition}: the gateway planned offset {offset} with next offset {plan.next_offset}: no progress")
                offset = plan.next_offset
        except TieredKafkaError as err:
            self._push(Chunk(ChunkKind.ERROR, offset, error=err))
        except Exception as err:  # a bug must surface in poll(), not die in a thread
            log.exception("prefetch of %s-%d failed", self.topic, self.partition)
            self._push(Chunk(ChunkKind.ERROR, offset, error=err))

    def _push(self, chunk: Chunk) -> None:
        with self._lock:
            stopped = self._stop.is_set()
            if not stopped:
                self._chunks.append(chunk)
        if stopped:
            self._discard(chunk)
            return
        self._wake.set()

    def _load(self, object_key: str, planned: PlannedRange, chunk: Chunk) -> Any:
        data = fetch_range(self._client, self.topic, self.partition, planned)
        loaded, held = self._convert(self.topic, self.partition, data, planned, object_key)
        del data
        self._budget.learn(planned.size, held)
        delta = held - chunk.reserved  # from the in-flight reservation to what the range holds now
        self._budget.adjust(delta)
        with self._lock:
            self._held += delta
            chunk.reserved += delta
        return loaded
