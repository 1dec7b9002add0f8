"""The gateway's in-process caches: a bounded LRU, and registry lookups remembered for seconds.

Caches are never required for correctness (DESIGN.md: the gateway is stateless); each is bounded
(by item count or by bytes), so caller input cannot grow memory without bound.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A bounded, thread-safe least-recently-used map with hit/miss counters.

    ``capacity`` bounds the sum of ``weigh(value)`` (1 per item by default: a count; a size in
    bytes for caches bounded by bytes). The newest item is kept even when it alone exceeds it."""

    def __init__(self, capacity: int, weigh: Callable[[V], int] = lambda value: 1) -> None:
        self.capacity = capacity
        self._weigh = weigh
        self._items: OrderedDict[K, V] = OrderedDict()
        self._weights: dict[K, int] = {}
        self.weight = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
            self.misses += 1
        value = load()
        weight = self._weigh(value)
        with self._lock:
            self.weight += weight - self._weights.get(key, 0)
            self._items[key], self._weights[key] = value, weight
            self._items.move_to_end(key)
            while self.weight > self.capacity and len(self._items) > 1:
                old, _ = self._items.popitem(last=False)
                self.weight -= self._weights.pop(old)
        return value


@dataclass(frozen=True)
class RemoteSegment:
    """A segment object as the gateway plans it (from the registry or a listing)."""

    object_key: str
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int  # -1 when unknown (listed segments)
    files: tuple[str, ...] = ()  # uploaded file kinds (registry); () for listed segments


class RecentSegments:
    """Registry lookups remembered for a few seconds, per partition.

    Registered segments never change; they only disappear through remote retention, which
    deletes the registry entry before the objects. A remembered segment is used for at most
    ``ttl_s`` seconds, so a plan can name a segment retention deleted that long ago at worst: its
    presigned GET then fails with 404 and the client plans again. ``ttl_s`` 0 disables it.
    """

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._by_partition: dict[tuple[str, int], list[tuple[int, float, RemoteSegment]]] = {}

    def find(self, topic: str, partition: int, offset: int) -> RemoteSegment | None:
        if self.ttl_s <= 0:
            return None
        now = time.monotonic()
        with self._lock:
            known = self._by_partition.get((topic, partition))
            if not known:
                return None
            slot = bisect.bisect_right(known, (offset, float("inf"))) - 1
            if slot < 0:
                return None
            _, seen_at, segment = known[slot]
            if segment.last_offset < offset:
                return None
            if now - seen_at > self.ttl_s:
                del known[slot]
                return None
            return segment

    def remember(self, topic: str, partition: int, segment: RemoteSegment) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            known = self._by_partition.setdefault((topic, partition), [])
            known[:] = [k for k in known if k[0] != segment.base_offset]
            bisect.insort(known, (segment.base_offset, time.monotonic(), segment))
            if len(known) > 4096:
                del known[0]
