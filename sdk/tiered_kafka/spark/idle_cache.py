"""A process's long-lived clients, kept while they are used and let go when they are not.

A Spark driver plans every micro-batch of a streaming query, and the hybrid modes ask Kafka for its
bounds at each plan (``hybrid_planning.kafka_view``): one confluent-kafka ``AdminClient`` per Kafka
configuration is reused across plans instead of bootstrapping a new one each time. An unbounded
cache (``functools.lru_cache``) kept those clients for the life of the process: a notebook that
planned once against a cluster that later went away kept a librdkafka handle reconnecting to it
every second until the interpreter exited. :class:`IdleCache` drops an entry that nobody asked
for during ``idle_s`` seconds; a later ask builds a new one.

Dropping is done by one daemon thread per cache, started with the first entry and ended when the
cache is empty again. A caller holding an entry when it is dropped keeps a working object (the
cache only lets go of its reference: the client is freed when the last holder lets go too).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class IdleCache(Generic[K, V]):
    """``get(key)`` returns the cached value for ``key`` or the one ``build(key)`` makes; values
    unused for ``idle_s`` seconds are dropped (module doc)."""

    def __init__(self, build: Callable[[K], V], *, idle_s: float, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        if idle_s <= 0:
            raise ValueError(f"idle_s must be positive, got {idle_s}")
        self._build = build
        self.idle_s = idle_s
        self._name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[V, float]] = {}  # key -> (value, clock time of its last use)
        self._reaper: threading.Thread | None = None

    def get(self, key: K) -> V:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries[key] = (entry[0], self._clock())
                return entry[0]
        value = self._build(key)  # outside the lock: building may talk to the network
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:  # built meanwhile by another thread: keep one
                value = entry[0]
            self._entries[key] = (value, self._clock())
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name=f"{self._name}-idle", daemon=True)
                self._reaper.start()
        return value

    def clear(self) -> None:
        """Drop every entry now."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def drop_idle(self) -> int:
        """Drop the entries unused for ``idle_s`` (what the reaper thread does); how many were dropped."""
        with self._lock:
            return self._drop_idle()

    def _drop_idle(self) -> int:
        now = self._clock()
        dropped = [key for key, (_value, used) in self._entries.items() if now - used >= self.idle_s]
        for key in dropped:
            del self._entries[key]
        return len(dropped)

    def _reap(self) -> None:
        while True:
            time.sleep(min(self.idle_s / 2, 5.0))
            with self._lock:
                self._drop_idle()
                if not self._entries:
                    self._reaper = None
                    return
