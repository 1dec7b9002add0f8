"""The gateway's in-process caches, every one bounded by bytes, with counters for ``/metrics``.

Caches are never required for correctness (DESIGN.md: the gateway is stateless). Each holds at
most ``capacity_bytes`` of estimated memory (``weigh``: the value's arrays or lists, plus
``ENTRY_OVERHEAD`` for the key and the map's bookkeeping), so caller input — unknown topics and
partitions, listings that find nothing, offsets anywhere — cannot grow memory without bound: a
negative answer (an empty listing, a missing segment) is an entry like any other, weighed and
evicted least-recently-used first. A value heavier than the whole cache is returned, not kept.

Each cache counts ``hits`` (also a caller that waited for another's load), ``misses`` (loads)
and ``evictions`` and knows its ``bytes``; the gateway's metrics export them per cluster and
cache name (hit ratio = hits / (hits + misses)).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

ENTRY_OVERHEAD = 200
"""Bytes charged per entry beyond its value: the key (a tuple or a string) and the map's slots."""


class _Pending:
    """A load under way: the callers that asked for the same key meanwhile wait for it."""

    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None


class LRU(Generic[K, V]):
    """A thread-safe least-recently-used map bounded by the bytes ``weigh`` estimates.

    ``ttl_s``: entries older than that are loaded again (None: kept until evicted), by ``clock``
    (seconds, monotonic)."""

    def __init__(
        self, name: str, capacity_bytes: int, weigh: Callable[[V], int], *, ttl_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"cache {name}: capacity_bytes must be positive, got {capacity_bytes}")
        self.name = name
        self.capacity_bytes = capacity_bytes
        self._weigh = weigh
        self._ttl_s = ttl_s
        self._clock = clock
        self._items: OrderedDict[K, tuple[V, int, float]] = OrderedDict()  # value, weight, stored at
        self.bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[K, _Pending] = {}
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def _fresh(self, key: K, now: float) -> tuple[V, int, float] | None:
        item = self._items.get(key)
        if item is not None and self._ttl_s is not None and now - item[2] > self._ttl_s:
            self._drop(key)
            return None
        return item

    def peek(self, key: K, *, count: bool = True) -> V | None:
        """The cached value (a hit when ``count``), None when absent (not counted: no load follows)."""
        with self._lock:
            item = self._fresh(key, self._clock())
            if item is None:
                return None
            self._items.move_to_end(key)
            self.hits += count
            return item[0]

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        """The cached value, else ``load()``'s, kept; concurrent loads of one key run once (the
        others wait for it: a background load and a request never GET the same object twice).

        Counting: a miss is a load; only the caller that runs it counts one. A caller that waits
        for another's load counts a hit (decision: it caused no load, so the hit ratio stays the
        share of asks that did not load)."""
        with self._lock:
            item = self._fresh(key, self._clock())
            if item is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return item[0]
            pending = self._loading.get(key)
            owner = pending is None
            if pending is None:
                pending = self._loading[key] = _Pending()
                self.misses += 1
            else:
                self.hits += 1
        if not owner:
            pending.done.wait()
            if pending.error is not None:
                raise pending.error
            return pending.value  # type: ignore[return-value]
        try:
            pending.value = value = load()
            self.put(key, value)
            return value
        except BaseException as err:
            pending.error = err
            raise
        finally:
            with self._lock:
                del self._loading[key]
            pending.done.set()

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` (again, after it grew: its weight is taken anew), evicting the least recently used."""
        weight = self._weigh(value) + ENTRY_OVERHEAD
        with self._lock:
            self._drop(key)
            if weight > self.capacity_bytes:
                return
            self._items[key] = (value, weight, self._clock())
            self.bytes += weight
            while self.bytes > self.capacity_bytes:
                old = next(iter(self._items))
                self._drop(old)
                self.evictions += 1

    def _drop(self, key: K) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self.bytes -= item[1]


@dataclass(frozen=True)
class RemoteSegment:
    """A segment object as the gateway plans it (from the registry or a listing)."""

    object_key: str
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int  # -1 when unknown (listed segments)
    files: tuple[str, ...] = ()  # uploaded file kinds (registry); () for listed segments
    sparse_index: bytes | None = None  # the registry entry's sparse plan index (format.sparse_index), when it has one
    first_offset: int | None = None  # the registry's first_offset (its range is [first, last]); None: base_offset

    @property
    def first(self) -> int:
        """The first offset this segment serves: its registry ``first_offset``, else its base offset."""
        return self.base_offset if self.first_offset is None else self.first_offset

    @property
    def nbytes(self) -> int:
        return 150 + 2 * len(self.object_key) + len(self.sparse_index or b"")


class RecentSegments:
    """Registry lookups remembered for a few seconds, per partition (bounded by bytes).

    Registered segments never change; they only disappear through remote retention, which
    deletes the registry entry before the objects. A remembered segment is used for at most
    ``ttl_s`` seconds, so a plan can name a segment retention deleted that long ago at worst: its
    presigned GET then fails with 404 and the client plans again. ``ttl_s`` 0 disables it. Only
    segments the registry returned are remembered (no caller input becomes a key by itself).
    """

    def __init__(self, ttl_s: float, capacity_bytes: int) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        # (topic, partition) -> [(first offset, seen at, segment)], sorted
        self.cache: LRU[tuple[str, int], list[tuple[int, float, RemoteSegment]]] = LRU(
            "segments", capacity_bytes, lambda known: sum(64 + s.nbytes for _, _, s in known)
        )

    def find(self, topic: str, partition: int, offset: int) -> RemoteSegment | None:
        if self.ttl_s <= 0:
            return None
        now = time.monotonic()
        with self._lock:
            known = self.cache.peek((topic, partition), count=False)
            found = None
            if known:
                slot = bisect.bisect_right(known, (offset, float("inf"))) - 1
                if slot >= 0 and known[slot][2].last_offset >= offset:
                    if now - known[slot][1] > self.ttl_s:
                        del known[slot]
                        self.cache.put((topic, partition), known)
                    else:
                        found = known[slot][2]
            if found is None:
                self.cache.misses += 1
            else:
                self.cache.hits += 1
            return found

    def remember(self, topic: str, partition: int, segment: RemoteSegment) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            known = [k for k in self.cache.peek((topic, partition), count=False) or () if k[0] != segment.first]
            bisect.insort(known, (segment.first, time.monotonic(), segment))
            self.cache.put((topic, partition), known)


class BackgroundLoads:
    """Loads run off the request path (a batch index fetched after a plan made without it): at
    most one per key at once and at most ``limit`` pending, so callers cannot queue without bound;
    a load refused or failed is simply tried again by a later request."""

    def __init__(self, workers: int = 2, limit: int = 256) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gateway-load")
        for _ in range(workers):  # threads started now, not by the first request that needs one
            self._pool.submit(time.sleep, 0.01)
        self._limit = limit
        self._pending: set[Hashable] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def submit(self, key: Hashable, load: Callable[[], object]) -> bool:
        """Start ``load`` unless the same key is pending or too many are; True when started."""
        with self._lock:
            if key in self._pending or len(self._pending) >= self._limit:
                return False
            self._pending.add(key)

        def run() -> None:
            try:
                load()
            except Exception as err:  # noqa: BLE001 - logged; the request path loads it again when needed
                log.warning("background load of %s failed: %s", key, err)
            finally:
                with self._lock:
                    self._pending.discard(key)
                    self._idle.notify_all()

        try:
            self._pool.submit(run)
        except RuntimeError:  # closed (the app is shutting down): refused like a full queue
            with self._lock:
                self._pending.discard(key)
                self._idle.notify_all()
            return False
        return True

    def close(self) -> None:
        """Stop the worker threads (the app's shutdown): loads not started are dropped, the ones
        running finish first. Later ``submit`` calls are refused."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._pending.clear()
            self._idle.notify_all()

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until no load is pending (tests and benchmarks); False on timeout."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._pending, timeout_s)
