"""Leadership of a ZooKeeper-mode cluster from the controller's znodes, through kazoo watches
(the package docstring: znodes read, session loss, failed watches)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.leadership.watcher import (
    LEADER_EPOCH_UNKNOWN,
    Leadership,
    LeadershipError,
    OnChange,
    TopicFilter,
    TopicPartition,
    _Publisher,
    is_compacted,
    log,
)


@dataclass(eq=False)
class _PartitionState:
    leader: int
    leader_epoch: int


@dataclass(eq=False)
class _TopicView:
    name: str
    alive: bool = True
    config: dict[str, str] | None = None  # None: no /config/topics/{t} znode (yet)
    partitions: dict[int, object] = field(default_factory=dict)  # partition -> token of its state watch
    states: dict[int, _PartitionState] = field(default_factory=dict)


@dataclass(eq=False)
class _ZkView:
    """One generation of watches; a rebuild after a LOST session starts a new one."""

    alive: bool = True
    building: bool = True
    topics: dict[str, _TopicView] = field(default_factory=dict)


#: the pause between failed rebuilds of the watches (full jitter, doubling from base_s up to cap_s);
#: its ``attempts`` are not used: the watcher rebuilds for as long as it runs
REPAIR_BACKOFF = RetryPolicy(base_s=0.5, cap_s=30.0)


def _default_client_factory(hosts: str) -> Any:
    from kazoo.client import KazooClient

    return KazooClient(hosts=hosts, timeout=10.0)


class ZooKeeperLeadershipWatcher(_Publisher):
    """Leadership of a ZooKeeper-mode cluster from the controller's znodes, via kazoo watches.

    ``hosts`` is a kazoo/Kafka ``zookeeper.connect`` string and may carry a chroot
    (``"zk1:2181,zk2:2181/kafka"``); ``chroot`` is appended to it when given.
    ``client_factory(hosts)`` builds the kazoo client (tests inject their own).
    ``repair_backoff``: the pause between failed rebuilds after a failed watch (package docstring).
    """

    def __init__(
        self,
        hosts: str,
        broker_id: int,
        topic_filter: TopicFilter,
        *,
        chroot: str = "",
        client_factory: Callable[[str], Any] = _default_client_factory,
        connect_timeout_s: float = 15.0,
        default_cleanup_policy: str = "delete",
        repair_backoff: RetryPolicy = REPAIR_BACKOFF,
    ) -> None:
        super().__init__()
        if chroot:
            hosts = hosts.rstrip("/") + "/" + chroot.strip("/")
        self.hosts = hosts
        self.broker_id = broker_id
        self.topic_filter = topic_filter
        self.default_cleanup_policy = default_cleanup_policy
        self._client_factory = client_factory
        self._connect_timeout_s = connect_timeout_s
        self._client: Any = None
        self._view: _ZkView | None = None
        self._session_lost = False
        self._dirty = threading.Event()
        self._notifier: threading.Thread | None = None
        self._repair_backoff = repair_backoff
        self._repair = threading.Event()  # set: rebuild the whole view (a failed watch, a lost session)
        self._halt = threading.Event()  # set by stop(): cuts a backoff short
        self._repairer: threading.Thread | None = None
        self._session_renewed = False  # the next rebuild follows a lost session (what its log line says)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, on_change: OnChange) -> None:
        if self._client is not None:
            raise RuntimeError("ZooKeeperLeadershipWatcher.start() called twice")
        with self._lock:
            self._on_change = on_change
        self._client = self._client_factory(self.hosts)
        try:
            self._client.start(timeout=self._connect_timeout_s)
        except Exception as err:
            self._close_client()
            raise LeadershipError(f"cannot connect to ZooKeeper {self.hosts}: {err}") from err
        self._client.add_listener(self._on_session_state)
        try:
            self._build_view()
        except Exception as err:
            self._mark_stopped()
            self._close_client()
            raise LeadershipError(f"cannot read the leadership znodes from ZooKeeper {self.hosts}: {err}") from err
        self._deliver(self._compute, force=True)
        self._notifier = threading.Thread(target=self._notify_loop, name=f"leadership-zk-{self.broker_id}", daemon=True)
        self._notifier.start()
        self._repairer = threading.Thread(target=self._repair_loop, name=f"leadership-zk-repair-{self.broker_id}", daemon=True)
        self._repairer.start()  # a watch that failed during the first build is repaired at once
        log.info("watching partition leadership of broker %d in ZooKeeper %s", self.broker_id, self.hosts)

    def stop(self) -> None:
        if not self._mark_stopped():
            return
        with self._lock:
            if self._view is not None:
                self._view.alive = False
        self._halt.set()
        self._repair.set()
        self._close_client()
        self._dirty.set()
        for thread in (self._notifier, self._repairer):
            if thread is not None and thread is not threading.current_thread():
                thread.join(10)

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            client.remove_listener(self._on_session_state)
            client.stop()
            client.close()
        except Exception:
            log.debug("closing the ZooKeeper client failed", exc_info=True)

    def _notify_loop(self) -> None:
        while True:
            self._dirty.wait()
            self._dirty.clear()
            if self._stopped:
                return
            self._deliver(self._compute)

    def _changed(self, view: _ZkView) -> None:
        if view is self._view and not view.building:
            self._dirty.set()

    # -- session -------------------------------------------------------------------------
    def _on_session_state(self, state: str) -> None:
        """kazoo's connection listener: must not block (runs in kazoo's connection thread)."""
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost: keeping the last leadership map until the session is re-established")
            self._session_lost = True
            self._failed("ZooKeeper session lost: every watch is gone")
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended: keeping the last leadership map")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._session_renewed = True
            self._repair.set()

    def _watch_failed(self, path: str, err: BaseException) -> None:
        """A watch function raised: the view may lack what it should have recorded. Counted, and
        the whole view is rebuilt (``_repair_loop``; the package docstring)."""
        if self._stopped:
            return
        log.error(  # a kazoo error says enough; anything else is a bug: its traceback
            "leadership watch on %s failed (the map may be stale until the watches are rebuilt): %r", path, err, exc_info=None if type(err).__module__.startswith("kazoo.") else err
        )
        self._failed(f"ZooKeeper watch on {path} failed: {err!r}")
        self._repair.set()

    def _repair_loop(self) -> None:
        """Rebuild the view from fresh watches each time a watch failed or a session was lost,
        until a rebuild completes with no watch failing meanwhile; between failed rebuilds, the
        backoff of ``repair_backoff``. Publishes the rebuilt map and clears ``health()``."""
        failed_rebuilds = 0
        while True:
            self._repair.wait()
            if failed_rebuilds and self._halt.wait(self._repair_backoff.delay(failed_rebuilds)):
                return
            self._repair.clear()
            if self._stopped:
                return
            failures = self.health().failures
            try:
                self._build_view()
            except Exception as err:  # the /brokers/topics watch itself (kazoo gave up on its read)
                self._watch_failed("/brokers/topics", err)
            if self._stopped:
                return
            if self.health().failures != failures or self._session_lost:
                failed_rebuilds += 1
                continue
            failed_rebuilds = 0
            self._recovered()
            why, self._session_renewed = ("ZooKeeper session re-established" if self._session_renewed else "after a failed ZooKeeper watch"), False
            log.info("%s: leadership view rebuilt, the map follows the cluster again", why)
            self._dirty.set()

    # -- the watch tree ------------------------------------------------------------------
    def _build_view(self) -> None:
        """Watch everything afresh into a new view; publishing waits until it is complete
        (kazoo's recipes read synchronously when created, so it is complete on return)."""
        view = _ZkView()
        with self._lock:
            if self._stopped:
                return
            old, self._view = self._view, view
            if old is not None:
                old.alive = False
                for topic in old.topics.values():
                    topic.alive = False
        self._watch_children("/brokers/topics", lambda: view.alive, lambda topics: self._on_topics(view, topics))
        with self._lock:
            view.building = False

    def _arm(self, path: str, create: Callable[[], object]) -> None:
        """Create a kazoo watch on ``path`` (its first read happens now); a read kazoo gives up on
        is a failed watch of that path (``_watch_failed``), and the caller goes on with the others."""
        try:
            create()
        except Exception as err:
            self._watch_failed(path, err)

    def _watch_children(self, path: str, alive: Callable[[], bool], on_children: Callable[[list[str]], None]) -> None:
        """A ChildrenWatch on ``path`` that survives the node not existing yet, being deleted,
        and being recreated: a DataWatch on the node (re)creates the ChildrenWatch for each
        incarnation (czxid) of it; ``on_children([])`` while it does not exist."""
        from kazoo.recipe.watchers import ChildrenWatch, DataWatch

        client = self._client
        current: dict[str, Any] = {"czxid": None, "token": None}

        def on_node(data: bytes | None, stat: Any, event: Any = None) -> bool | None:
            if not alive():
                return False
            if stat is None:
                current["czxid"] = current["token"] = None
                on_children([])
                return None
            if current["czxid"] == stat.czxid:
                return None
            token = object()
            current["czxid"], current["token"] = stat.czxid, token

            def on_kids(children: list[str]) -> bool | None:
                if not alive() or current["token"] is not token:
                    return False
                on_children(children)
                return None

            self._arm(path, lambda: ChildrenWatch(client, path, _guarded_children(on_kids, path, self._watch_failed)))
            return None

        DataWatch(client, path, _guarded(on_node, path, self._watch_failed))

    def _on_topics(self, view: _ZkView, children: list[str]) -> None:
        with self._lock:
            if not view.alive:
                return
            names = set(children)
            for name in [t for t in view.topics if t not in names]:
                view.topics.pop(name).alive = False
            new = [
                _TopicView(name)
                for name in sorted(names)
                if name not in view.topics and self._topic_passes(self.topic_filter, name)
            ]
            for topic in new:
                view.topics[topic.name] = topic
            self._forget_topics(names)
        for topic in new:
            self._watch_topic(view, topic)
        self._changed(view)

    def _watch_topic(self, view: _ZkView, topic: _TopicView) -> None:
        from kazoo.recipe.watchers import DataWatch

        def alive() -> bool:
            return view.alive and topic.alive

        config_path = f"/config/topics/{topic.name}"

        def on_config(data: bytes | None, stat: Any, event: Any = None) -> bool | None:
            if not alive():
                return False
            config = None if data is None else _parse_topic_config(config_path, data)
            with self._lock:
                topic.config = config
            self._changed(view)
            return None

        self._arm(config_path, lambda: DataWatch(self._client, config_path, _guarded(on_config, config_path, self._watch_failed)))
        partitions_path = f"/brokers/topics/{topic.name}/partitions"
        self._arm(partitions_path, lambda: self._watch_children(partitions_path, alive, lambda children: self._on_partitions(view, topic, children)))

    def _on_partitions(self, view: _ZkView, topic: _TopicView, children: list[str]) -> None:
        from kazoo.recipe.watchers import DataWatch

        ids = set()
        for child in children:
            try:
                ids.add(int(child))
            except ValueError:
                log.warning("ignoring znode /brokers/topics/%s/partitions/%s: not a partition number", topic.name, child)
        with self._lock:
            if not (view.alive and topic.alive):
                return
            for p in [p for p in topic.partitions if p not in ids]:
                del topic.partitions[p]
                topic.states.pop(p, None)
            new = {p: object() for p in sorted(ids) if p not in topic.partitions}
            topic.partitions.update(new)
        for p, token in new.items():
            path = f"/brokers/topics/{topic.name}/partitions/{p}/state"

            def on_state(data: bytes | None, stat: Any, event: Any = None, p: int = p, token: object = token, path: str = path) -> bool | None:
                with self._lock:
                    if not (view.alive and topic.alive and topic.partitions.get(p) is token):
                        return False
                state = None if data is None else _parse_partition_state(path, data)
                with self._lock:
                    if state is None:
                        topic.states.pop(p, None)
                    else:
                        topic.states[p] = state
                self._changed(view)
                return None

            self._arm(path, lambda path=path, on_state=on_state: DataWatch(self._client, path, _guarded(on_state, path, self._watch_failed)))
        self._changed(view)

    def _compute(self) -> dict[TopicPartition, Leadership] | None:
        view = self._view
        if view is None or view.building:
            return None
        led: dict[TopicPartition, Leadership] = {}
        for name, topic in view.topics.items():
            mine = {p: s for p, s in topic.states.items() if s.leader == self.broker_id}
            if not mine:
                continue
            if topic.config is None:
                log.debug("topic %s has no /config/topics znode (being created or deleted): held back", name)
                continue
            policy = topic.config.get("cleanup.policy", self.default_cleanup_policy)
            compacted = is_compacted(policy)
            self._note_compacted(name, compacted, policy)
            if compacted:
                continue
            for p, state in mine.items():
                led[TopicPartition(name, p)] = Leadership(state.leader_epoch)
        return led


OnWatchFailure = Callable[[str, BaseException], None]


def _guarded(func: Callable[[Any, Any, Any], bool | None], path: str, on_failure: OnWatchFailure) -> Callable[..., bool | None]:
    """A DataWatch function that hands its errors to ``on_failure`` instead of raising them: kazoo
    calls a watch function again with two arguments when it raises TypeError, and re-raises
    anything else in its own thread."""

    def call(data: Any, stat: Any, event: Any = None) -> bool | None:
        try:
            return func(data, stat, event)
        except Exception as err:
            on_failure(path, err)
            return None

    return call


def _guarded_children(func: Callable[[list[str]], bool | None], path: str, on_failure: OnWatchFailure) -> Callable[[list[str]], bool | None]:
    """A ChildrenWatch function that hands its errors to ``on_failure`` instead of raising them."""

    def call(children: list[str]) -> bool | None:
        try:
            return func(children)
        except Exception as err:
            on_failure(path, err)
            return None

    return call


def _parse_partition_state(path: str, data: bytes) -> _PartitionState | None:
    try:
        value = json.loads(data)
        return _PartitionState(int(value["leader"]), int(value.get("leader_epoch", LEADER_EPOCH_UNKNOWN)))
    except (ValueError, TypeError, KeyError) as err:
        log.warning("ignoring malformed partition state %s: %s (%r)", path, err, data[:200])
        return None


def _parse_topic_config(path: str, data: bytes) -> dict[str, str]:
    try:
        config = json.loads(data).get("config") or {}
        return {str(k): str(v) for k, v in config.items()}
    except (ValueError, TypeError, AttributeError) as err:
        log.warning("malformed topic config %s (%s): assuming the broker defaults", path, err)
        return {}
