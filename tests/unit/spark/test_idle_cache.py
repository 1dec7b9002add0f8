"""IdleCache: one value per key while it is used, dropped once idle (no client kept for the process's life)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from tiered_kafka.spark.idle_cache import IdleCache


class Client:
    """Stands for an AdminClient: something whose lifetime is the point."""

    def __init__(self, key: str) -> None:
        self.key = key


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_value_is_built_once_per_key_and_reused_while_used() -> None:
    built: list[str] = []
    cache: IdleCache[str, Client] = IdleCache(lambda key: built.append(key) or Client(key), idle_s=30, name="test")
    first = cache.get("a")
    assert cache.get("a") is first and cache.get("b") is not first
    assert built == ["a", "b"] and len(cache) == 2
    cache.clear()
    assert len(cache) == 0 and cache.get("a") is not first


def test_an_idle_value_is_dropped_and_freed_and_a_used_one_kept() -> None:
    cache: IdleCache[str, Client] = IdleCache(Client, idle_s=0.3, name="test")
    idle = weakref.ref(cache.get("idle"))
    used = cache.get("used")
    stop = threading.Event()

    def keep_using() -> None:
        while not stop.is_set():
            cache.get("used")
            time.sleep(0.05)

    user = threading.Thread(target=keep_using)
    user.start()
    try:
        wait_until(lambda: gc.collect() >= 0 and idle() is None)  # dropped by the cache and freed
        assert cache.get("used") is used  # still the same object: it never went idle
    finally:
        stop.set()
        user.join()
    wait_until(lambda: len(cache) == 0)  # and the reaper ends with the last entry
    assert cache._reaper is None


def test_idle_time_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_s must be positive"):
        IdleCache(Client, idle_s=0, name="test")
