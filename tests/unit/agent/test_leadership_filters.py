"""TopicFilter semantics and StaticLeadership notifications (pure logic, no services)."""

from __future__ import annotations

import logging
import threading

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka_agent.leadership import (
    LEADER_EPOCH_UNKNOWN,
    Leadership,
    LeadershipWatcher,
    StaticLeadership,
    TopicFilter,
    TopicPartition,
    is_compacted,
)

# -- TopicFilter ---------------------------------------------------------------------------------


def test_default_filter_accepts_every_ordinary_topic() -> None:
    f = TopicFilter()
    assert f.include == (".*",) and f.exclude == ()
    for topic in ("orders", "a", "a.b-c_d", "topic-with-123", "_single_underscore"):
        assert f.accepts(topic)


def test_patterns_must_match_the_whole_name() -> None:
    f = TopicFilter(include=["orders"])
    assert f.accepts("orders")
    assert not f.accepts("orders-v2")  # re.search would accept it
    assert not f.accepts("old-orders")
    f = TopicFilter(include=["orders.*"], exclude=["orders-tmp"])
    assert f.accepts("orders-tmp2")  # "orders-tmp" is not a prefix exclude
    assert not f.accepts("orders-tmp")


def test_a_topic_must_match_an_include() -> None:
    f = TopicFilter(include=["logs-.*", "metrics"])
    assert f.accepts("logs-app") and f.accepts("metrics")
    assert not f.accepts("orders") and not f.accepts("metrics-raw")
    assert not TopicFilter(include=[]).accepts("anything")


def test_exclude_wins_over_include() -> None:
    f = TopicFilter(include=["logs-.*", "logs-secret"], exclude=["logs-secret", ".*-tmp"])
    assert f.accepts("logs-app")
    assert not f.accepts("logs-secret")  # included explicitly, excluded anyway
    assert not f.accepts("logs-app-tmp")
    assert not TopicFilter(exclude=[".*"]).accepts("orders")


def test_internal_topics_are_excluded_unless_an_include_names_them() -> None:
    default = TopicFilter()
    assert not default.accepts("__consumer_offsets")
    assert not default.accepts("__transaction_state")
    assert not TopicFilter(include=["_.*"]).accepts("__consumer_offsets")  # does not start with "__"
    assert TopicFilter(include=["__consumer_offsets"]).accepts("__consumer_offsets")
    assert TopicFilter(include=["^__.*"]).accepts("__transaction_state")
    both = TopicFilter(include=[".*", "__consumer_offsets"])
    assert both.accepts("orders") and both.accepts("__consumer_offsets") and not both.accepts("__transaction_state")
    assert not TopicFilter(include=["__.*"], exclude=["__consumer_offsets"]).accepts("__consumer_offsets")


def test_invalid_patterns_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="include pattern"):
        TopicFilter(include=["orders("])
    with pytest.raises(ConfigError, match="exclude pattern"):
        TopicFilter(exclude=["[a-"])
    with pytest.raises(ConfigError, match="sequences"):
        TopicFilter(include="orders")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "compacted"),
    [("compact", True), ("delete", False), ("compact,delete", True), ("delete, compact", True), ("[compact]", True), ("", False), (None, False), ("Compact", True)],
)
def test_cleanup_policy_parsing(policy: str | None, compacted: bool) -> None:
    assert is_compacted(policy) is compacted


# -- the value types -------------------------------------------------------------------------------


def test_topic_partitions_order_hash_and_print() -> None:
    a, b, c = TopicPartition("a", 1), TopicPartition("a", 0), TopicPartition("b", 0)
    assert sorted([c, a, b]) == [b, a, c]
    assert {a: 1}[TopicPartition("a", 1)] == 1
    assert str(a) == "a-1"
    assert Leadership(3) == Leadership(leader_epoch=3) and Leadership().leader_epoch == LEADER_EPOCH_UNKNOWN
    with pytest.raises(AttributeError):
        a.topic = "x"  # type: ignore[misc]


# -- StaticLeadership ------------------------------------------------------------------------------

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict[TopicPartition, Leadership]] = []

    def __call__(self, led: dict[TopicPartition, Leadership]) -> None:
        self.calls.append(led)


def test_static_leadership_notifies_at_start_and_on_real_changes_only() -> None:
    watcher = StaticLeadership({A0: Leadership(1)})
    assert isinstance(watcher, LeadershipWatcher)
    assert watcher.current() == {A0: Leadership(1)}  # known before start
    seen = Recorder()
    watcher.start(seen)
    assert seen.calls == [{A0: Leadership(1)}]

    watcher.set({A0: Leadership(1)})  # same map: no call
    assert len(seen.calls) == 1
    watcher.set({A0: Leadership(1), A1: Leadership(0)})
    watcher.set({A0: Leadership(2), A1: Leadership(0)})  # a new epoch is a change
    watcher.set({})
    assert seen.calls[1:] == [{A0: Leadership(1), A1: Leadership(0)}, {A0: Leadership(2), A1: Leadership(0)}, {}]
    assert watcher.current() == {}

    watcher.stop()
    watcher.set({B0: Leadership(0)})
    assert len(seen.calls) == 4  # nothing after stop()
    watcher.stop()  # idempotent


def test_static_leadership_starts_with_an_empty_map_and_hands_out_copies() -> None:
    watcher = StaticLeadership()
    seen = Recorder()
    watcher.start(seen)
    assert seen.calls == [{}]  # once at start, even when empty
    watcher.set({B0: Leadership(0)})
    seen.calls[-1].clear()  # the callee may mutate what it got
    assert watcher.current() == {B0: Leadership(0)}
    watcher.current().clear()
    assert watcher.current() == {B0: Leadership(0)}
    watcher.stop()


def test_static_leadership_set_before_start_is_what_start_reports() -> None:
    watcher = StaticLeadership({A0: Leadership(0)})
    watcher.set({B0: Leadership(5)})
    seen = Recorder()
    with watcher:
        watcher.start(seen)
        assert seen.calls == [{B0: Leadership(5)}]


def test_a_failing_callback_is_logged_and_does_not_break_the_watcher(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[dict] = []

    def flaky(led: dict) -> None:
        calls.append(led)
        if len(calls) == 2:
            raise RuntimeError("boom")

    watcher = StaticLeadership()
    watcher.start(flaky)
    with caplog.at_level(logging.ERROR, logger="tiered_kafka_agent.leadership"):
        watcher.set({A0: Leadership(0)})
    assert "on_change callback failed" in caplog.text
    watcher.set({A1: Leadership(0)})
    assert calls == [{}, {A0: Leadership(0)}, {A1: Leadership(0)}]
    watcher.stop()


def test_static_leadership_calls_are_serialized_under_concurrent_sets() -> None:
    active = 0
    overlap = False
    calls: list[dict] = []
    guard = threading.Lock()

    def slow(led: dict) -> None:
        nonlocal active, overlap
        with guard:
            active += 1
            overlap |= active > 1
        calls.append(led)
        threading.Event().wait(0.001)
        with guard:
            active -= 1

    watcher = StaticLeadership()
    watcher.start(slow)
    threads = [threading.Thread(target=lambda i=i: [watcher.set({TopicPartition("t", i * 100 + j): Leadership(0)}) for j in range(20)]) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    watcher.stop()
    assert not overlap
    assert calls[-1] == watcher.current()
