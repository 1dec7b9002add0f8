"""Leadership watchers against a real ZooKeeper and Apache Kafka.

ZooKeeper mode: two Kafka 3.9 brokers (1 and 2) in one chroot of the session's ZooKeeper, shared
by the package's tests (``zookeeper_kafka``); each test creates its own topics (names ending in its
tag) and watches only those. Leadership moves are Kafka's own: a reassignment handed to the
controller, then a preferred-leader election. The znodes-by-hand test has a chroot of its own.
KRaft mode: Kafka 4.x, read through the Admin API (the session's shared broker, or a broker of its
own when the test stops it). Waits poll with a deadline and never assert on how fast a change arrived.
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
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from tests.support.agent_env import wait_for
from tests.support.kafka_clients import create_topic
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.leadership import (
    LEADER_EPOCH_UNKNOWN,
    KRaftLeadershipWatcher,
    Leadership,
    LeadershipError,
    LeadershipHealth,
    TopicFilter,
    TopicPartition,
    ZooKeeperLeadershipWatcher,
)
from tiered_kafka_agent.metrics import AgentMetrics

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
    """A fresh chroot in the session's ZooKeeper: ``127.0.0.1:PORT/leadership-xxxx`` (no broker in it)."""
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
def tag() -> str:
    """The suffix of this test's topic names: the brokers are shared, so each test watches only its own topics."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def name(tag) -> Callable[[str], str]:
    """``name("orders")``: this test's topic ``orders-<tag>``."""
    return lambda stem: f"{stem}-{tag}"


@pytest.fixture
def mine(tag) -> TopicFilter:
    """A topic filter accepting this test's topics only."""
    return TopicFilter(include=[f".*-{tag}"])


def _zk_watcher(watchers: list, hosts: str, broker_id: int, topic_filter: TopicFilter, **kwargs: Any) -> tuple[ZooKeeperLeadershipWatcher, Recorder]:
    watcher = ZooKeeperLeadershipWatcher(hosts, broker_id, topic_filter, **kwargs)
    recorder = Recorder()
    watchers.append(watcher)
    watcher.start(recorder)
    return watcher, recorder


@pytest.fixture
def start_zk_watcher(zookeeper_kafka, mine, watchers) -> Callable[..., tuple[ZooKeeperLeadershipWatcher, Recorder]]:
    """A watcher on the shared ZooKeeper-mode brokers' chroot (``zookeeper_kafka``), for this test's topics."""
    return lambda broker_id, topic_filter=None, **kwargs: _zk_watcher(watchers, zookeeper_kafka.zookeeper_connect, broker_id, topic_filter or mine, **kwargs)


@pytest.fixture
def start_chroot_watcher(zk_hosts, watchers) -> Callable[..., tuple[ZooKeeperLeadershipWatcher, Recorder]]:
    """A watcher on the test's own chroot, where znodes are written by hand."""
    return lambda broker_id, **kwargs: _zk_watcher(watchers, zk_hosts, broker_id, TopicFilter(), **kwargs)


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([name], operation_timeout=30).values():
        future.result(timeout=30)
    del admin


def compaction_warnings(caplog: pytest.LogCaptureFixture, topic: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER and f"topic {topic} " in r.getMessage() and "compact" in r.getMessage()]


# -- ZooKeeper mode: brokers 1 and 2 on Kafka 3.9 (``zookeeper_kafka``), leadership moved by Kafka's controller


def test_initial_map_from_a_broker_with_two_topics(zookeeper_kafka, name, start_zk_watcher) -> None:
    orders, events = name("orders"), name("events")
    zookeeper_kafka.create_topic(orders, [[1]] * 3)
    zookeeper_kafka.create_topic(events, [[1]] * 2)

    watcher, seen = start_zk_watcher(1)
    expected = led((orders, 0, 0), (orders, 1, 0), (orders, 2, 0), (events, 0, 0), (events, 1, 0))
    assert seen.calls == [expected]  # once at start, complete
    assert watcher.current() == expected

    _, other = start_zk_watcher(2)  # broker 2's agent leads nothing here
    assert other.calls == [{}]


def test_leadership_moves_away_and_back(zookeeper_kafka, name, start_zk_watcher) -> None:
    orders = name("orders")
    zookeeper_kafka.create_topic(orders, [[1, 2], [1, 2]])
    _, mine = start_zk_watcher(1)
    _, theirs = start_zk_watcher(2)
    assert mine.last == led((orders, 0, 0), (orders, 1, 0)) and theirs.last == {}

    # Kafka's controller bumps the leader epoch for the reassignment (leader still 1), then for the election
    away = zookeeper_kafka.move(orders, 1, [2, 1])
    assert (away["leader"], away["leader_epoch"]) == (2, 2)
    mine.wait_for(lambda m: TP(orders, 1) not in m, "orders-1 to move away")
    assert mine.last == led((orders, 0, 0))
    theirs.wait_for(lambda m: m == led((orders, 1, 2)), "broker 2 to lead orders-1")

    back = zookeeper_kafka.move(orders, 1, [1, 2])
    assert (back["leader"], back["leader_epoch"]) == (1, 4)
    mine.wait_for(lambda m: m == led((orders, 0, 0), (orders, 1, 4)), "orders-1 back with epoch 4")
    theirs.wait_for(lambda m: m == {}, "broker 2 to lose orders-1")
    # every map handed over was a real change, and none lost orders-0 on the way
    calls = mine.snapshot()
    assert all(a != b for a, b in zip(calls, calls[1:]))
    assert all(TP(orders, 0) in m for m in calls)


def test_topics_created_and_deleted_appear_and_disappear(zookeeper_kafka, name, start_zk_watcher) -> None:
    bootstrap = zookeeper_kafka.bootstrap_servers
    orders, fresh = name("orders"), name("fresh")
    zookeeper_kafka.create_topic(orders, [[1]])
    _, seen = start_zk_watcher(1)
    assert seen.last == led((orders, 0, 0))

    zookeeper_kafka.create_topic(fresh, [[1]] * 3)
    seen.wait_for(lambda m: m == led((orders, 0, 0), (fresh, 0, 0), (fresh, 1, 0), (fresh, 2, 0)), "the new topic")

    delete_topic(bootstrap, fresh)
    seen.wait_for(lambda m: m == led((orders, 0, 0)), "the deleted topic to disappear")

    wait_for(lambda: _created(zookeeper_kafka, fresh), timeout_s=60, what="the same name created again")  # new znodes, new watches
    seen.wait_for(lambda m: m == led((orders, 0, 0), (fresh, 0, 0)), "the re-created topic")
    state = zookeeper_kafka.move(fresh, 0, [1, 2])  # a second replica: the controller bumps the epoch, broker 1 still leads
    assert state["leader"] == 1 and state["leader_epoch"] > 0
    seen.wait_for(lambda m: m.get(TP(fresh, 0)) == Leadership(state["leader_epoch"]), "a leader epoch change on the re-created topic")


def _created(cluster, topic: str) -> bool:
    """Create ``topic`` again, once ZooKeeper-mode Kafka has finished deleting the old one
    (deletion is asynchronous there: TopicExistsException "marked for deletion" meanwhile)."""
    try:
        cluster.create_topic(topic, [[1]])
    except KafkaException as err:
        if err.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True


def test_compacted_topics_are_skipped_with_one_warning(zookeeper_kafka, name, start_zk_watcher, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    changelog, orders, table, marker = name("changelog"), name("orders"), name("table"), name("marker")
    zookeeper_kafka.create_topic(changelog, [[1, 2], [1, 2]], **{"cleanup.policy": "compact"})
    zookeeper_kafka.create_topic(orders, [[1]], **{"cleanup.policy": "delete"})
    _, seen = start_zk_watcher(1)
    assert seen.last == led((orders, 0, 0))

    zookeeper_kafka.create_topic(table, [[1]], **{"cleanup.policy": "compact,delete"})
    zookeeper_kafka.create_topic(marker, [[1, 2]])  # created after: once it shows up, the table was seen too
    seen.wait_for(lambda m: TP(marker, 0) in m, "the marker topic")
    for p in (0, 1):  # more changes to a compacted topic (new leader epochs): still skipped, no new warning
        zookeeper_kafka.move(changelog, p, [2, 1], elect=False)
    state = zookeeper_kafka.move(marker, 0, [2, 1], elect=False)
    seen.wait_for(lambda m: m.get(TP(marker, 0)) == Leadership(state["leader_epoch"]), "the marker's new epoch")

    assert seen.last == led((orders, 0, 0), (marker, 0, state["leader_epoch"]))
    assert not any(tp.topic in (changelog, table) for m in seen.snapshot() for tp in m)
    assert len(compaction_warnings(caplog, changelog)) == 1
    assert len(compaction_warnings(caplog, table)) == 1
    assert not compaction_warnings(caplog, orders)


def test_include_and_exclude_filters(zookeeper_kafka, name, tag, start_zk_watcher) -> None:
    for stem in ("orders", "orders-tmp", "events"):
        zookeeper_kafka.create_topic(name(stem), [[1]])
    _, seen = start_zk_watcher(1, TopicFilter(include=[f"orders.*-{tag}"], exclude=[f".*-tmp-{tag}"]))
    assert seen.last == led((name("orders"), 0, 0))

    for stem in ("orders-eu-tmp", "payments", "orders-eu"):
        zookeeper_kafka.create_topic(name(stem), [[1]])
    seen.wait_for(lambda m: TP(name("orders-eu"), 0) in m, "orders-eu")
    assert seen.last == led((name("orders"), 0, 0), (name("orders-eu"), 0, 0))


def test_znodes_written_in_any_order(zk, start_chroot_watcher) -> None:
    """No broker: the znodes written by hand, in the orders a controller may leave them:
    nothing under /brokers at start, a topic before its partitions, states before the config."""
    _, seen = start_chroot_watcher(4)
    assert seen.calls == [{}]

    zk.create("/brokers/topics/manual", json.dumps({"version": 3, "partitions": {"0": [4], "1": [4]}}).encode(), makepath=True)
    zk.create("/brokers/topics/manual/partitions/0/state", json.dumps({"leader": 4, "leader_epoch": 3, "isr": [4]}).encode(), makepath=True)
    zk.create("/brokers/topics/manual/partitions/1/state", json.dumps({"leader": 5, "leader_epoch": 0, "isr": [5]}).encode(), makepath=True)
    # a whole topic written after those states: once the map shows it, the watcher has read them
    # (one kazoo session sees znode changes in ZooKeeper's order; the reads that follow a change see it)
    write_topic(zk, "marker", leader=4)
    seen.wait_for(lambda m: TP("marker", 0) in m, "the marker topic written after manual's states")
    assert seen.last == led(("marker", 0, 0))  # no /config/topics/manual yet: held back
    zk.delete("/brokers/topics/marker", recursive=True)
    seen.wait_for(lambda m: m == {}, "the marker topic gone")
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


def write_topic(zk: KazooClient, topic: str, *, leader: int, epoch: int = 0, acl: list[Any] | None = None) -> None:
    """A one-partition topic's znodes by hand, its config first (as a controller writes them);
    ``acl`` is the config znode's own (its parents are open: kazoo's makepath would give them ``acl``)."""
    zk.ensure_path("/config/topics")
    zk.create(f"/config/topics/{topic}", json.dumps({"version": 1, "config": {}}).encode(), acl=acl, makepath=True)
    zk.create(f"/brokers/topics/{topic}/partitions/0/state", json.dumps({"leader": leader, "leader_epoch": epoch, "isr": [leader]}).encode(), makepath=True)


def test_a_failed_watch_is_counted_retried_and_the_map_recovers(zk, start_chroot_watcher, caplog) -> None:
    """A real ZooKeeper refusing a read: the config znode of a topic is readable by its creator
    only (a digest ACL), so the watch on it fails with NoAuthError. The failure is counted, the
    agent's health says so and the watches are rebuilt with backoff until the ACL lets the agent
    read: then the map holds the topic."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    watcher, seen = start_chroot_watcher(4, repair_backoff=RetryPolicy(base_s=0.05, cap_s=0.2))
    metrics = AgentMetrics()
    metrics.observe_leadership(watcher)
    assert seen.calls == [{}] and watcher.health() == LeadershipHealth(ok=True, failures=0)

    zk.add_auth("digest", "operator:secret")
    write_topic(zk, "locked", leader=4, epoch=2, acl=[make_digest_acl("operator", "secret", all=True)])
    write_topic(zk, "open", leader=4)
    try:
        wait_for(lambda: watcher.health().failures >= 3, timeout_s=WAIT_S, what="the failed watch counted, and its rebuilds retried")
        health = watcher.health()
        assert not health.ok and "/config/topics/locked" in (health.problem or "") and "NoAuth" in (health.problem or "")
        assert metrics.value("tiered_kafka_agent_leadership_failures_total") >= 3
        assert metrics.value("tiered_kafka_agent_leadership_healthy") == 0
        assert TP("locked", 0) not in watcher.current()  # not read: not uploaded
    finally:
        zk.set_acls("/config/topics/locked", OPEN_ACL_UNSAFE)  # the operator lets the agent read it

    seen.wait_for(lambda m: m == led(("locked", 0, 2), ("open", 0, 0)), "the map to recover once the znode is readable")
    wait_for(lambda: watcher.health().ok, timeout_s=WAIT_S, what="the watcher healthy again")
    assert metrics.value("tiered_kafka_agent_leadership_healthy") == 1
    assert metrics.value("tiered_kafka_agent_leadership_failures_total") == watcher.health().failures >= 3  # counted, never reset
    assert "after a failed ZooKeeper watch: leadership view rebuilt" in caplog.text

    zk.set("/brokers/topics/locked/partitions/0/state", json.dumps({"leader": 5, "leader_epoch": 3, "isr": [5]}).encode())
    seen.wait_for(lambda m: m == led(("open", 0, 0)), "a change seen through the rebuilt watches")


def test_an_expired_session_keeps_the_map_and_rebuilds_the_watches(zookeeper_kafka, name, start_zk_watcher, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    orders, later = name("orders"), name("later")
    zookeeper_kafka.create_topic(orders, [[1, 2], [1, 2]])
    clients: list[KazooClient] = []

    def factory(hosts: str) -> KazooClient:
        client = KazooClient(hosts=hosts, timeout=4.0)
        clients.append(client)
        return client

    watcher, seen = start_zk_watcher(1, client_factory=factory)
    before = led((orders, 0, 0), (orders, 1, 0))
    assert seen.last == before

    # expire the watcher's session the way kazoo's own tests do: close it from a second
    # connection holding the same session id and password
    lost = threading.Event()
    clients[0].add_listener(lambda state: lost.set() if state == "LOST" else None)
    session_id, password = clients[0].client_id
    intruder = KazooClient(hosts=zookeeper_kafka.zookeeper_connect, client_id=(session_id, password))
    intruder.start(timeout=15)
    intruder.stop()
    intruder.close()
    assert lost.wait(WAIT_S), "the session did not expire"

    # changes after the loss are seen through the rebuilt watches
    zookeeper_kafka.move(orders, 1, [2, 1])
    seen.wait_for(lambda m: m == led((orders, 0, 0)), "orders-1 moving away after the session loss")
    zookeeper_kafka.create_topic(later, [[1]])
    seen.wait_for(lambda m: m == led((orders, 0, 0), (later, 0, 0)), "a topic created after the session loss")
    assert all(TP(orders, 0) in m for m in seen.snapshot()), "the map was emptied during the session loss"
    assert "session re-established" in caplog.text
    assert watcher.current() == seen.last


def test_zookeeper_start_fails_loudly_when_unreachable(watchers) -> None:
    watcher = ZooKeeperLeadershipWatcher("127.0.0.1:1", 0, TopicFilter(), connect_timeout_s=1.0)
    with pytest.raises(LeadershipError, match="cannot connect to ZooKeeper"):
        watcher.start(Recorder())
    watcher.stop()


# -- KRaft mode (the Admin API) ------------------------------------------------------------------


def start_kraft_watcher(
    watchers: list, bootstrap: str, topic_filter: TopicFilter, *, broker_id: int, **kwargs: Any
) -> tuple[KRaftLeadershipWatcher, Recorder]:
    watcher = KRaftLeadershipWatcher(bootstrap, broker_id, topic_filter, **kwargs)
    recorder = Recorder()
    watchers.append(watcher)
    watcher.start(recorder)
    return watcher, recorder


def test_kraft_mode_reads_leaders_and_configs_through_the_admin_api(kafka_server, name, tag, watchers, caplog) -> None:
    """The session's shared KRaft broker (Kafka 4.x, node 1): this test's topics only."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    bootstrap, node = kafka_server.bootstrap_servers, kafka_server.node_id
    orders, events, tmp, changelog, fresh = (name(stem) for stem in ("orders", "events", "orders-tmp", "changelog", "fresh"))
    create_topic(bootstrap, orders, 2)
    create_topic(bootstrap, events, 1)
    create_topic(bootstrap, tmp, 1)
    create_topic(bootstrap, changelog, 1, **{"cleanup.policy": "compact"})

    only_mine = TopicFilter(include=[f".*-{tag}"], exclude=[f".*-tmp-{tag}"])
    watcher, seen = start_kraft_watcher(watchers, bootstrap, only_mine, broker_id=node, poll_interval_s=0.2)
    unknown = LEADER_EPOCH_UNKNOWN
    expected = led((orders, 0, unknown), (orders, 1, unknown), (events, 0, unknown))
    assert seen.calls == [expected]

    create_topic(bootstrap, fresh, 2)
    seen.wait_for(lambda m: TP(fresh, 1) in m, "the new topic")
    delete_topic(bootstrap, events)
    seen.wait_for(lambda m: TP(events, 0) not in m, "the deleted topic")
    assert seen.last == led((orders, 0, unknown), (orders, 1, unknown), (fresh, 0, unknown), (fresh, 1, unknown))
    assert len(compaction_warnings(caplog, changelog)) == 1  # many polls, one warning
    assert not any(tp.topic in (changelog, tmp) for m in seen.snapshot() for tp in m)

    watcher.stop()
    _, elsewhere = start_kraft_watcher(watchers, bootstrap, only_mine, poll_interval_s=60, broker_id=node + 4)
    assert elsewhere.calls == [{}]  # node 1 leads everything: nothing for node 5


def test_kraft_poll_failure_keeps_the_previous_map(start_kafka, watchers, caplog, tmp_path) -> None:
    """A KRaft broker of its own (Kafka 4.x), killed under the watcher."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    broker = start_kafka(tmp_path / "kraft-logs")
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "orders", 2)
    watcher, seen = start_kraft_watcher(watchers, bootstrap, TopicFilter(), broker_id=broker.node_id, poll_interval_s=0.2, request_timeout_s=1.0)
    expected = led(("orders", 0, LEADER_EPOCH_UNKNOWN), ("orders", 1, LEADER_EPOCH_UNKNOWN))
    assert seen.calls == [expected]

    broker.kill()  # unreachable at once (a controlled shutdown would first publish its partitions leaderless)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len([r for r in caplog.records if "leadership poll" in r.getMessage()]) < 2:
        time.sleep(0.1)
    failures = [r for r in caplog.records if "leadership poll" in r.getMessage()]
    assert len(failures) >= 2 and all(r.levelno == logging.WARNING and "keeping the previous map" in r.getMessage() for r in failures)
    assert seen.calls == [expected]
    assert watcher.current() == expected
    health = watcher.health()  # the agent's health says the map is held, not followed
    assert not health.ok and health.failures >= 2 and "leadership poll" in (health.problem or "")


def test_kraft_start_fails_loudly_when_unreachable(watchers) -> None:
    watcher = KRaftLeadershipWatcher("127.0.0.1:1", 0, TopicFilter(), request_timeout_s=1.0)
    with pytest.raises(LeadershipError, match="cannot read partition leadership"):
        watcher.start(Recorder())
    watcher.stop()
