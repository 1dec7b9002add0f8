"""IdleCache: one value per key while it is used, dropped once idle (no client kept for the process's life)."""

from __future__ import annotations

import gc
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


def test_an_entry_unused_for_idle_s_is_dropped_and_a_used_one_kept() -> None:
    now = [100.0]
    cache: IdleCache[str, Client] = IdleCache(Client, idle_s=30, name="test", clock=lambda: now[0])
    cache.get("idle")
    used = cache.get("used")
    now[0] += 20
    cache.get("used")  # used again: its idle time starts over
    now[0] += 15  # "idle" unused for 35 s, "used" for 15 s
    assert cache.drop_idle() == 1
    assert len(cache) == 1 and cache.get("used") is used
    now[0] += 30
    assert cache.drop_idle() == 1 and len(cache) == 0


def test_the_reaper_frees_an_idle_value_and_ends_with_the_last_entry() -> None:
    cache: IdleCache[str, Client] = IdleCache(Client, idle_s=0.2, name="test")
    idle = weakref.ref(cache.get("idle"))
    wait_until(lambda: gc.collect() >= 0 and idle() is None)  # dropped by the reaper and freed
    wait_until(lambda: cache._reaper is None)
    assert len(cache) == 0


def test_idle_time_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_s must be positive"):
        IdleCache(Client, idle_s=0, name="test")
