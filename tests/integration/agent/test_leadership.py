"""Leadership watchers against a real ZooKeeper and the development broker.

ZooKeeper mode: every test gets its own chroot in the session's ZooKeeper, shared by its
broker(s) and watcher(s), so tests do not see each other's cluster (a broker writes /cluster/id).
KRaft mode: the development broker without ZooKeeper, read through the Admin API.
Waits poll with a deadline and never assert on how fast a change arrived.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from tests.support.kafka_clients import create_topic
from tiered_kafka_agent.leadership import (
    LEADER_EPOCH_UNKNOWN,
    KRaftLeadershipWatcher,
    Leadership,
    LeadershipError,
    TopicFilter,
    TopicPartition,
    ZooKeeperLeadershipWatcher,
)

pytestmark = pytest.mark.integration

LOGGER = "tiered_kafka_agent.leadership"
WAIT_S = 10.0
TP = TopicPartition


# -- helpers and fixtures ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_thread_leak() -> Iterator[None]:
    """Every thread started during the test (watchers, kazoo, brokers) ends by its teardown."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 10
    while True:
        extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not extra, f"threads left running: {[t.name for t in extra]}"


class Recorder:
    """on_change: keeps every map it was given."""

    def __init__(self) -> None:
        self.calls: list[dict[TopicPartition, Leadership]] = []
        self._lock = threading.Lock()

    def __call__(self, led: dict[TopicPartition, Leadership]) -> None:
        with self._lock:
            self.calls.append(led)

    @property
    def last(self) -> dict[TopicPartition, Leadership]:
        with self._lock:
            return self.calls[-1]

    def snapshot(self) -> list[dict[TopicPartition, Leadership]]:
        with self._lock:
            return list(self.calls)

    def wait_for(self, predicate: Callable[[dict[TopicPartition, Leadership]], bool], what: str, timeout: float = WAIT_S) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.calls and predicate(self.calls[-1]):
                    return self.calls[-1]
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}; last map: {self.calls[-1] if self.calls else None}")


def led(*items: tuple[str, int, int]) -> dict[TopicPartition, Leadership]:
    return {TP(t, p): Leadership(e) for t, p, e in items}


@pytest.fixture
def zk_hosts(zookeeper_server) -> Iterator[str]:
    """A fresh chroot in the session's ZooKeeper: ``127.0.0.1:PORT/leadership-xxxx``."""
    root = f"/leadership-{uuid.uuid4().hex[:10]}"
    admin = KazooClient(hosts=zookeeper_server.hosts)
    admin.start(timeout=15)
    admin.ensure_path(root)
    yield f"{zookeeper_server.hosts}{root}"
    admin.delete(root, recursive=True)
    admin.stop()
    admin.close()


@pytest.fixture
def zk(zk_hosts) -> Iterator[KazooClient]:
    """A client inside the test's chroot, for writing znodes by hand."""
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def watchers() -> Iterator[list[Any]]:
    """Watchers registered here are stopped at teardown (before the brokers)."""
    started: list[Any] = []
    yield started
    for watcher in started:
        watcher.stop()


@pytest.fixture
def start_zk_watcher(zk_hosts, watchers) -> Callable[..., tuple[ZooKeeperLeadershipWatcher, Recorder]]:
    def start(broker_id: int, topic_filter: TopicFilter | None = None, **kwargs: Any) -> tuple[ZooKeeperLeadershipWatcher, Recorder]:
        watcher = ZooKeeperLeadershipWatcher(zk_hosts, broker_id, topic_filter or TopicFilter(), **kwargs)
        recorder = Recorder()
        watchers.append(watcher)
        watcher.start(recorder)
        return watcher, recorder

    return start


@pytest.fixture
def zk_broker(start_dev_broker, zk_hosts, tmp_path):
    """A development broker, node 1, registered in the test's chroot."""
    return start_dev_broker(tmp_path / "logs", zookeeper_connect=zk_hosts, node_id=1)


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([name], operation_timeout=30).values():
        future.result(timeout=30)


def compaction_warnings(caplog: pytest.LogCaptureFixture, topic: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER and f"topic {topic} " in r.getMessage() and "compact" in r.getMessage()]


# -- ZooKeeper mode ----------------------------------------------------------------------------


def test_initial_map_from_a_broker_with_two_topics(zk_broker, start_zk_watcher) -> None:
    bootstrap = zk_broker.broker.bootstrap_servers
    create_topic(bootstrap, "orders", 3)
    create_topic(bootstrap, "events", 2)

    watcher, seen = start_zk_watcher(1)
    expected = led(("orders", 0, 0), ("orders", 1, 0), ("orders", 2, 0), ("events", 0, 0), ("events", 1, 0))
    assert seen.calls == [expected]  # once at start, complete
    assert watcher.current() == expected

    _, other = start_zk_watcher(2)  # another broker's agent leads nothing here
    assert other.calls == [{}]


def test_leadership_moves_away_and_back(zk_broker, start_zk_watcher) -> None:
    create_topic(zk_broker.broker.bootstrap_servers, "orders", 2)
    registration = zk_broker.broker.zookeeper
    _, mine = start_zk_watcher(1)
    _, theirs = start_zk_watcher(7)
    assert mine.last == led(("orders", 0, 0), ("orders", 1, 0)) and theirs.last == {}

    assert registration.set_partition_leader("orders", 1, 7) == 1
    mine.wait_for(lambda m: TP("orders", 1) not in m, "orders-1 to move away")
    assert mine.last == led(("orders", 0, 0))
    theirs.wait_for(lambda m: m == led(("orders", 1, 1)), "broker 7 to lead orders-1")

    assert registration.set_partition_leader("orders", 1, 1) == 2
    mine.wait_for(lambda m: m == led(("orders", 0, 0), ("orders", 1, 2)), "orders-1 back with epoch 2")
    theirs.wait_for(lambda m: m == {}, "broker 7 to lose orders-1")
    # every map handed over was a real change, and none lost orders-0 on the way
    calls = mine.snapshot()
    assert all(a != b for a, b in zip(calls, calls[1:]))
    assert all(TP("orders", 0) in m for m in calls)


def test_topics_created_and_deleted_appear_and_disappear(zk_broker, start_zk_watcher) -> None:
    bootstrap = zk_broker.broker.bootstrap_servers
    create_topic(bootstrap, "orders", 1)
    _, seen = start_zk_watcher(1)
    assert seen.last == led(("orders", 0, 0))

    create_topic(bootstrap, "fresh", 3)
    seen.wait_for(lambda m: m == led(("orders", 0, 0), ("fresh", 0, 0), ("fresh", 1, 0), ("fresh", 2, 0)), "the new topic")

    delete_topic(bootstrap, "fresh")
    seen.wait_for(lambda m: m == led(("orders", 0, 0)), "the deleted topic to disappear")

    create_topic(bootstrap, "fresh", 1)  # the same name again: new znodes, new watches
    seen.wait_for(lambda m: m == led(("orders", 0, 0), ("fresh", 0, 0)), "the re-created topic")
    zk_broker.broker.zookeeper.set_partition_leader("fresh", 0, 1)
    seen.wait_for(lambda m: m.get(TP("fresh", 0)) == Leadership(1), "a leader epoch change on the re-created topic")


def test_compacted_topics_are_skipped_with_one_warning(zk_broker, start_zk_watcher, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    bootstrap = zk_broker.broker.bootstrap_servers
    create_topic(bootstrap, "changelog", 2, **{"cleanup.policy": "compact"})
    create_topic(bootstrap, "orders", 1, **{"cleanup.policy": "delete"})
    _, seen = start_zk_watcher(1)
    assert seen.last == led(("orders", 0, 0))

    create_topic(bootstrap, "table", 1, **{"cleanup.policy": "compact,delete"})
    create_topic(bootstrap, "marker", 1)  # created after: once it shows up, "table" was seen too
    seen.wait_for(lambda m: TP("marker", 0) in m, "the marker topic")
    for p in (0, 1):  # more changes to a compacted topic: still skipped, no new warning
        zk_broker.broker.zookeeper.set_partition_leader("changelog", p, 1)
    zk_broker.broker.zookeeper.set_partition_leader("marker", 0, 1)
    seen.wait_for(lambda m: m.get(TP("marker", 0)) == Leadership(1), "the marker's new epoch")

    assert seen.last == led(("orders", 0, 0), ("marker", 0, 1))
    assert not any(tp.topic in ("changelog", "table") for m in seen.snapshot() for tp in m)
    assert len(compaction_warnings(caplog, "changelog")) == 1
    assert len(compaction_warnings(caplog, "table")) == 1
    assert not compaction_warnings(caplog, "orders")


def test_include_and_exclude_filters(zk_broker, start_zk_watcher) -> None:
    bootstrap = zk_broker.broker.bootstrap_servers
    for name in ("orders", "orders-tmp", "events"):
        create_topic(bootstrap, name, 1)
    _, seen = start_zk_watcher(1, TopicFilter(include=["orders.*"], exclude=[".*-tmp"]))
    assert seen.last == led(("orders", 0, 0))

    for name in ("orders-eu-tmp", "payments", "orders-eu"):
        create_topic(bootstrap, name, 1)
    seen.wait_for(lambda m: TP("orders-eu", 0) in m, "orders-eu")
    assert seen.last == led(("orders", 0, 0), ("orders-eu", 0, 0))


def test_znodes_written_in_any_order(zk, start_zk_watcher) -> None:
    """No broker: the znodes written by hand, in the orders a controller may leave them:
    nothing under /brokers at start, a topic before its partitions, states before the config."""
    _, seen = start_zk_watcher(4)
    assert seen.calls == [{}]

    zk.create("/brokers/topics/manual", json.dumps({"version": 3, "partitions": {"0": [4], "1": [4]}}).encode(), makepath=True)
    zk.create("/brokers/topics/manual/partitions/0/state", json.dumps({"leader": 4, "leader_epoch": 3, "isr": [4]}).encode(), makepath=True)
    zk.create("/brokers/topics/manual/partitions/1/state", json.dumps({"leader": 5, "leader_epoch": 0, "isr": [5]}).encode(), makepath=True)
    time.sleep(0.3)
    assert seen.last == {}  # no /config/topics/manual yet: held back
    zk.create("/config/topics/manual", json.dumps({"version": 1, "config": {}}).encode(), makepath=True)
    seen.wait_for(lambda m: m == led(("manual", 0, 3)), "the topic once its config exists")

    zk.set("/brokers/topics/manual/partitions/1/state", json.dumps({"leader": 4, "leader_epoch": 1, "isr": [4]}).encode())
    seen.wait_for(lambda m: m == led(("manual", 0, 3), ("manual", 1, 1)), "partition 1 moving here")
    zk.set("/brokers/topics/manual/partitions/0/state", b"not json")  # a bad znode is ignored, not fatal
    seen.wait_for(lambda m: m == led(("manual", 1, 1)), "the malformed state to count as not led")

    zk.delete("/brokers/topics/manual/partitions", recursive=True)  # partitions go, topic stays
    seen.wait_for(lambda m: m == {}, "the partitions to disappear")
    zk.create("/brokers/topics/manual/partitions/2/state", json.dumps({"leader": 4, "leader_epoch": 9, "isr": [4]}).encode(), makepath=True)
    seen.wait_for(lambda m: m == led(("manual", 2, 9)), "the re-created partitions znode to be watched again")

    zk.set("/config/topics/manual", json.dumps({"version": 1, "config": {"cleanup.policy": "compact"}}).encode())
    seen.wait_for(lambda m: m == {}, "the topic turned compacted")
    zk.delete("/brokers/topics/manual", recursive=True)
    zk.delete("/config/topics/manual")
    zk.create("/brokers/topics/manual/partitions/0/state", json.dumps({"leader": 4, "leader_epoch": 0, "isr": [4]}).encode(), makepath=True)
    zk.create("/config/topics/manual", json.dumps({"version": 1, "config": {}}).encode())
    seen.wait_for(lambda m: m == led(("manual", 0, 0)), "the topic re-created by hand")


def test_an_expired_session_keeps_the_map_and_rebuilds_the_watches(zk_hosts, zk_broker, start_zk_watcher, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    bootstrap = zk_broker.broker.bootstrap_servers
    create_topic(bootstrap, "orders", 2)
    clients: list[KazooClient] = []

    def factory(hosts: str) -> KazooClient:
        client = KazooClient(hosts=hosts, timeout=4.0)
        clients.append(client)
        return client

    watcher, seen = start_zk_watcher(1, client_factory=factory)
    before = led(("orders", 0, 0), ("orders", 1, 0))
    assert seen.last == before

    # expire the watcher's session the way kazoo's own tests do: close it from a second
    # connection holding the same session id and password
    lost = threading.Event()
    clients[0].add_listener(lambda state: lost.set() if state == "LOST" else None)
    session_id, password = clients[0].client_id
    intruder = KazooClient(hosts=zk_hosts, client_id=(session_id, password))
    intruder.start(timeout=15)
    intruder.stop()
    intruder.close()
    assert lost.wait(WAIT_S), "the session did not expire"

    # changes after the loss are seen through the rebuilt watches
    zk_broker.broker.zookeeper.set_partition_leader("orders", 1, 8)
    seen.wait_for(lambda m: m == led(("orders", 0, 0)), "orders-1 moving away after the session loss")
    create_topic(bootstrap, "later", 1)
    seen.wait_for(lambda m: m == led(("orders", 0, 0), ("later", 0, 0)), "a topic created after the session loss")
    assert all(TP("orders", 0) in m for m in seen.snapshot()), "the map was emptied during the session loss"
    assert "session re-established" in caplog.text
    assert watcher.current() == seen.last


def test_zookeeper_start_fails_loudly_when_unreachable(watchers) -> None:
    watcher = ZooKeeperLeadershipWatcher("127.0.0.1:1", 0, TopicFilter(), connect_timeout_s=1.0)
    with pytest.raises(LeadershipError, match="cannot connect to ZooKeeper"):
        watcher.start(Recorder())
    watcher.stop()


# -- KRaft mode (the Admin API) ------------------------------------------------------------------


@pytest.fixture
def kraft_broker(start_dev_broker, tmp_path):
    """A development broker without ZooKeeper (node 0), as the Admin API sees a KRaft cluster."""
    return start_dev_broker(tmp_path / "kraft-logs")


def start_kraft_watcher(
    watchers: list, bootstrap: str, topic_filter: TopicFilter | None = None, *, broker_id: int = 0, **kwargs: Any
) -> tuple[KRaftLeadershipWatcher, Recorder]:
    watcher = KRaftLeadershipWatcher(bootstrap, broker_id, topic_filter or TopicFilter(), **kwargs)
    recorder = Recorder()
    watchers.append(watcher)
    watcher.start(recorder)
    return watcher, recorder


def test_kraft_mode_reads_leaders_and_configs_through_the_admin_api(kraft_broker, watchers, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    bootstrap = kraft_broker.broker.bootstrap_servers
    create_topic(bootstrap, "orders", 2)
    create_topic(bootstrap, "events", 1)
    create_topic(bootstrap, "orders-tmp", 1)
    create_topic(bootstrap, "changelog", 1, **{"cleanup.policy": "compact"})

    watcher, seen = start_kraft_watcher(watchers, bootstrap, TopicFilter(exclude=[".*-tmp"]), poll_interval_s=0.2)
    unknown = LEADER_EPOCH_UNKNOWN
    expected = led(("orders", 0, unknown), ("orders", 1, unknown), ("events", 0, unknown))
    assert seen.calls == [expected]

    create_topic(bootstrap, "fresh", 2)
    seen.wait_for(lambda m: TP("fresh", 1) in m, "the new topic")
    delete_topic(bootstrap, "events")
    seen.wait_for(lambda m: TP("events", 0) not in m, "the deleted topic")
    assert seen.last == led(("orders", 0, unknown), ("orders", 1, unknown), ("fresh", 0, unknown), ("fresh", 1, unknown))
    assert len(compaction_warnings(caplog, "changelog")) == 1  # many polls, one warning
    assert not any(tp.topic in ("changelog", "orders-tmp") for m in seen.snapshot() for tp in m)

    watcher.stop()
    _, elsewhere = start_kraft_watcher(watchers, bootstrap, poll_interval_s=60, broker_id=5)
    assert elsewhere.calls == [{}]  # broker 0 leads everything: nothing for broker 5


def test_kraft_poll_failure_keeps_the_previous_map(kraft_broker, watchers, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    bootstrap = kraft_broker.broker.bootstrap_servers
    create_topic(bootstrap, "orders", 2)
    watcher, seen = start_kraft_watcher(watchers, bootstrap, poll_interval_s=0.2, request_timeout_s=1.0)
    expected = led(("orders", 0, LEADER_EPOCH_UNKNOWN), ("orders", 1, LEADER_EPOCH_UNKNOWN))
    assert seen.calls == [expected]

    kraft_broker.stop()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len([r for r in caplog.records if "leadership poll" in r.getMessage()]) < 2:
        time.sleep(0.1)
    failures = [r for r in caplog.records if "leadership poll" in r.getMessage()]
    assert len(failures) >= 2 and all(r.levelno == logging.WARNING and "keeping the previous map" in r.getMessage() for r in failures)
    assert seen.calls == [expected]
    assert watcher.current() == expected


def test_kraft_start_fails_loudly_when_unreachable(watchers) -> None:
    watcher = KRaftLeadershipWatcher("127.0.0.1:1", 0, TopicFilter(), request_timeout_s=1.0)
    with pytest.raises(LeadershipError, match="cannot read partition leadership"):
        watcher.start(Recorder())
    watcher.stop()
