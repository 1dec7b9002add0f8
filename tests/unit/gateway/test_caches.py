"""The gateway's LRU (caches.LRU): bounded by bytes, counted, TTL, one load per key at once."""

from __future__ import annotations

import threading

import pytest

from tests.support.agent_env import wait_for
from tiered_kafka_gateway.caches import ENTRY_OVERHEAD, LRU, BackgroundLoads


def test_bounded_by_bytes_with_counters() -> None:
    cache: LRU[int, bytes] = LRU("t", 10 * (100 + ENTRY_OVERHEAD), len)
    for i in range(50):
        assert cache.get_or_load(i, lambda i=i: bytes(100)) == bytes(100)
        assert cache.bytes <= cache.capacity_bytes
    assert (len(cache), cache.misses, cache.evictions, cache.hits) == (10, 50, 40, 0)
    assert cache.get_or_load(49, lambda: pytest.fail("loaded again")) == bytes(100) and cache.hits == 1
    assert cache.peek(0) is None and cache.peek(49, count=False) is not None and cache.hits == 1
    cache.put(48, bytes(100_000))  # heavier than the whole cache: not kept, and the old value is gone
    assert cache.peek(48) is None and cache.bytes <= cache.capacity_bytes
    with pytest.raises(ValueError, match="capacity_bytes"):
        LRU("t", 0, len)


def test_entries_expire_after_their_ttl() -> None:
    now = [100.0]
    cache: LRU[str, bytes] = LRU("t", 10_000, len, ttl_s=0.05, clock=lambda: now[0])
    cache.get_or_load("k", lambda: b"1")
    now[0] += 0.05  # at the TTL: still fresh
    assert cache.get_or_load("k", lambda: b"2") == b"1"
    now[0] += 0.01
    assert cache.get_or_load("k", lambda: b"2") == b"2" and cache.misses == 2


def test_concurrent_loads_of_one_key_run_once_and_share_errors() -> None:
    cache: LRU[str, bytes] = LRU("t", 10_000, len)
    calls, release = [], threading.Event()

    def load() -> bytes:
        calls.append(1)
        release.wait(5)
        return b"value"

    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_load("k", load))) for _ in range(5)]
    for t in threads:
        t.start()
    wait_for(lambda: cache.hits == 4, timeout_s=10, what="four callers waiting for the one load")  # each counts a hit, then waits
    release.set()
    for t in threads:
        t.join(5)
    assert results == [b"value"] * 5 and len(calls) == 1
    assert (cache.misses, cache.hits) == (1, 4)  # only the load's owner missed; who waited for it caused no load

    def fail() -> bytes:
        raise OSError("S3 said no")

    with pytest.raises(OSError, match="S3 said no"):
        cache.get_or_load("bad", fail)
    assert cache.peek("bad") is None


def test_background_loads_run_once_per_key_and_are_bounded() -> None:
    loads = BackgroundLoads(workers=1, limit=2)
    gate, ran = threading.Event(), []
    assert loads.submit("a", lambda: (gate.wait(5), ran.append("a")))
    assert not loads.submit("a", lambda: ran.append("again"))  # pending: not twice
    assert loads.submit("b", lambda: ran.append("b"))
    assert not loads.submit("c", lambda: ran.append("c"))  # the limit
    gate.set()
    assert loads.wait_idle(5) and ran == ["a", "b"]
    assert loads.submit("d", lambda: 1 / 0) and loads.wait_idle(5)  # a failure is logged, not raised


def test_background_loads_close_ends_their_threads_and_refuses_later_loads() -> None:
    loads = BackgroundLoads(workers=2)
    workers = set(loads._pool._threads)
    assert len(workers) == 2 and all(t.is_alive() for t in workers)  # started at construction
    ran: list[str] = []
    assert loads.submit("a", lambda: ran.append("a")) and loads.wait_idle(5)
    loads.close()
    assert ran == ["a"]
    assert not any(t.is_alive() for t in workers)
    assert not loads.submit("b", lambda: ran.append("b")) and loads.wait_idle(0.1)  # refused, nothing pending
