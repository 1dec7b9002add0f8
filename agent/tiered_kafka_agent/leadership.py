"""Which partitions this broker leads: the agent uploads only those.

Three watchers share one interface (:class:`LeadershipWatcher`)::

    watcher.start(on_change)   # on_change(full map) once at start, then whenever the map changes
    watcher.current()          # the map last handed to on_change
    watcher.stop()             # no on_change call after stop() returns

The map holds the partitions that are led by this broker, whose topic passes the
:class:`TopicFilter`, and whose topic is not compacted. Its values are :class:`Leadership`.

- :class:`ZooKeeperLeadershipWatcher` (ZooKeeper-mode clusters) reads the znodes a Kafka
  controller writes (``kafka.zk.ZkData``), through kazoo watches, so it reacts within
  milliseconds of a change::

      /brokers/topics                                children: the topics
      /brokers/topics/{t}/partitions                 children: the partitions (may appear after {t})
      /brokers/topics/{t}/partitions/{p}/state       {"leader": N, "leader_epoch": E, "isr": [...], ...}
      /config/topics/{t}                             {"version": 1, "config": {"cleanup.policy": ...}}

- :class:`KRaftLeadershipWatcher` (KRaft clusters, where no ZooKeeper exists) polls the Admin
  API every ``poll_interval_s``: Metadata (``list_topics``) for the leaders, DescribeConfigs for
  ``cleanup.policy``.
- :class:`StaticLeadership`: a fixed map, changed with ``set()`` (local runs and tests).

Decisions:

- **Compacted topics** (``cleanup.policy`` containing ``compact``) are skipped: the cleaner
  rewrites their segments, so "upload each rotated segment once" does not describe them. A
  WARNING names each compacted topic once (again only if it stops and restarts being
  compacted), and only for topics this broker leads a partition of, so that a cluster's agents do
  not all warn about every compacted topic of the cluster.
- **Filtered-out topics** are skipped silently (one DEBUG line per topic). In ZooKeeper mode
  they are not watched at all.
- **Internal topics** (names starting with ``__``: ``__consumer_offsets``,
  ``__transaction_state``, ...) are excluded unless an include pattern explicitly names them,
  meaning the pattern itself starts with ``__`` (``"__consumer_offsets"`` or ``"__.*"``); the
  default ``".*"`` does not. Exclude patterns still win. (Kafka's own internal topics are
  compacted anyway.)
- **ZooKeeper, missing config znode**: Kafka writes ``/config/topics/{t}`` before
  ``/brokers/topics/{t}`` when it creates a topic, and deletes it after, so a topic without one is
  being created or deleted: it is held back until its config znode exists. A config without
  ``cleanup.policy`` means the broker default, ``default_cleanup_policy`` ("delete", Kafka's).
- **ZooKeeper, session loss**: while disconnected the last map stands (the broker's own session
  is independent of ours). kazoo's watch recipes re-read their znodes on every reconnection; after
  a LOST session (all server-side watches gone) the watcher also rebuilds its whole view from
  fresh watches and publishes it once, so nothing depends on the old watches having been
  re-established. ``on_change`` is called from a dedicated notifier thread, never from kazoo's
  threads, and bursts of znode events coalesce into one call.
- **KRaft, leader epoch**: ``-1`` (:data:`LEADER_EPOCH_UNKNOWN`). confluent-kafka's Python API
  exposes no leader epoch: ``list_topics`` gives ``PartitionMetadata(id, leader, replicas, isrs,
  error)`` and ``describe_topics`` gives ``TopicPartitionInfo(id, leader, replicas, isr)``
  (checked with confluent-kafka 2.16.1 / librdkafka 2.16.0). The uploader takes each segment's
  epochs from its batch headers (``partitionLeaderEpoch``) anyway.
- **KRaft, failures**: a failed poll logs a WARNING and keeps the previous map: a transient
  Admin API error never drops leadership. A topic whose config cannot be read keeps its cached
  policy; a topic never described yet is held back until a poll describes it. ``start()``
  polls once and raises :class:`LeadershipError` when that first poll fails (a wrong bootstrap
  address should be loud); ZooKeeper mode likewise raises when it cannot connect.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tiered_kafka.errors import ConfigError, TieredKafkaError

__all__ = [
    "LEADER_EPOCH_UNKNOWN",
    "KRaftLeadershipWatcher",
    "Leadership",
    "LeadershipError",
    "LeadershipWatcher",
    "StaticLeadership",
    "TopicFilter",
    "TopicPartition",
    "ZooKeeperLeadershipWatcher",
    "is_compacted",
]

log = logging.getLogger(__name__)

LEADER_EPOCH_UNKNOWN = -1
INTERNAL_TOPIC_PREFIX = "__"

OnChange = Callable[[dict["TopicPartition", "Leadership"]], None]


class LeadershipError(TieredKafkaError):
    """The leadership watcher could not obtain its initial view (ZooKeeper or the Admin API)."""

    retriable = True


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class Leadership:
    """What the watcher knows of a partition this broker leads."""

    leader_epoch: int = LEADER_EPOCH_UNKNOWN


# -- topic filter -------------------------------------------------------------------------------


class TopicFilter:
    """Include/exclude regexes over topic names, Pinterest's uploader semantics.

    A topic is accepted when it fully matches (``re.fullmatch``) at least one include pattern
    and no exclude pattern: exclude wins. Internal topics (``__`` prefix) additionally need an
    include pattern that itself starts with ``__`` (see the module docstring). An invalid
    regex raises :class:`~tiered_kafka.errors.ConfigError`.
    """

    def __init__(self, include: Sequence[str] = (".*",), exclude: Sequence[str] = ()) -> None:
        if isinstance(include, str) or isinstance(exclude, str):
            raise ConfigError("TopicFilter takes sequences of patterns, not a single string")
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self._include = [_compile(p, "include") for p in self.include]
        self._exclude = [_compile(p, "exclude") for p in self.exclude]
        self._internal_include = [rx for p, rx in zip(self.include, self._include) if p.removeprefix("^").startswith(INTERNAL_TOPIC_PREFIX)]

    def accepts(self, topic: str) -> bool:
        if any(rx.fullmatch(topic) for rx in self._exclude):
            return False
        candidates = self._internal_include if topic.startswith(INTERNAL_TOPIC_PREFIX) else self._include
        return any(rx.fullmatch(topic) for rx in candidates)

    def __repr__(self) -> str:
        return f"TopicFilter(include={list(self.include)!r}, exclude={list(self.exclude)!r})"


def _compile(pattern: str, kind: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as err:
        raise ConfigError(f"invalid topic {kind} pattern {pattern!r}: {err}") from err


def is_compacted(cleanup_policy: str | None) -> bool:
    """True when a ``cleanup.policy`` value ("compact", "compact,delete", "[delete, compact]") compacts."""
    if not cleanup_policy:
        return False
    return "compact" in (part.strip().lower() for part in cleanup_policy.strip("[] ").split(","))


# -- the interface and what the watchers share ------------------------------------------------


class LeadershipWatcher(ABC):
    """Knows which partitions this broker leads (see the module docstring).

    ``on_change`` receives the full current map (a fresh dict the callee may keep), once when
    ``start()`` runs and then each time the map changes; calls are serialized, never
    concurrent. It should return quickly (hand work to another thread) and must not call
    ``start()``; calling ``stop()`` from it is allowed. A watcher is started once; used as a
    context manager it is stopped on exit.
    """

    @abstractmethod
    def start(self, on_change: OnChange) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def current(self) -> dict[TopicPartition, Leadership]: ...

    def __enter__(self) -> LeadershipWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Publisher(LeadershipWatcher):
    """The on_change bookkeeping: deliver only real changes, serialized, never after stop()."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # the watcher's state
        self._deliver_lock = threading.RLock()  # serializes on_change calls
        self._on_change: OnChange | None = None
        self._published: dict[TopicPartition, Leadership] = {}
        self._stopped = False
        self._warned_compacted: set[str] = set()
        self._logged_filtered: set[str] = set()

    def current(self) -> dict[TopicPartition, Leadership]:
        with self._lock:
            return dict(self._published)

    def _deliver(self, compute: Callable[[], dict[TopicPartition, Leadership] | None], *, force: bool = False) -> None:
        """Compute the map (under the state lock) and hand it to on_change if it changed.
        ``compute`` returns None when there is nothing consistent to publish yet."""
        with self._deliver_lock:
            with self._lock:
                if self._stopped or self._on_change is None:
                    return
                led = compute()
                if led is None or (led == self._published and not force):
                    return
                self._published = led
                on_change = self._on_change
            _log_change(led)
            try:
                on_change(dict(led))
            except Exception:
                log.exception("leadership on_change callback failed")

    def _mark_stopped(self) -> bool:
        """Set the stopped flag; False if it was already set."""
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            return True

    def _topic_passes(self, topic_filter: TopicFilter, topic: str) -> bool:
        if topic_filter.accepts(topic):
            return True
        if topic not in self._logged_filtered:
            self._logged_filtered.add(topic)
            log.debug("topic %s is filtered out by %r", topic, topic_filter)
        return False

    def _note_compacted(self, topic: str, compacted: bool, cleanup_policy: str | None) -> None:
        """Warn once per topic that it is compacted (again if it stops being compacted and restarts)."""
        if not compacted:
            self._warned_compacted.discard(topic)
        elif topic not in self._warned_compacted:
            self._warned_compacted.add(topic)
            log.warning("topic %s has cleanup.policy=%s: compacted topics are not uploaded, skipping its partitions", topic, cleanup_policy)

    def _forget_topics(self, present: Iterable[str]) -> None:
        keep = set(present)
        self._warned_compacted &= keep
        self._logged_filtered &= keep


def _log_change(led: Mapping[TopicPartition, Leadership]) -> None:
    if log.isEnabledFor(logging.INFO):
        shown = ", ".join(str(tp) for tp in sorted(led)[:20]) + (" ..." if len(led) > 20 else "")
        log.info("this broker leads %d partition(s) to upload: %s", len(led), shown or "none")


# -- static ------------------------------------------------------------------------------------


class StaticLeadership(_Publisher):
    """A fixed map given at construction; ``set(mapping)`` replaces it and notifies if it changed."""

    def __init__(self, mapping: Mapping[TopicPartition, Leadership] | None = None) -> None:
        super().__init__()
        self._mapping: dict[TopicPartition, Leadership] = dict(mapping or {})
        with self._lock:
            self._published = dict(self._mapping)

    def start(self, on_change: OnChange) -> None:
        with self._lock:
            self._on_change = on_change
        self._deliver(self._snapshot, force=True)

    def set(self, mapping: Mapping[TopicPartition, Leadership]) -> None:
        with self._lock:
            self._mapping = dict(mapping)
            if self._on_change is None:
                self._published = dict(self._mapping)
        self._deliver(self._snapshot)

    def _snapshot(self) -> dict[TopicPartition, Leadership]:
        return dict(self._mapping)

    def stop(self) -> None:
        self._mark_stopped()


# -- ZooKeeper mode ----------------------------------------------------------------------------


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


def _default_client_factory(hosts: str) -> Any:
    from kazoo.client import KazooClient

    return KazooClient(hosts=hosts, timeout=10.0)


class ZooKeeperLeadershipWatcher(_Publisher):
    """Leadership of a ZooKeeper-mode cluster from the controller's znodes, via kazoo watches.

    ``hosts`` is a kazoo/Kafka ``zookeeper.connect`` string and may carry a chroot
    (``"zk1:2181,zk2:2181/kafka"``); ``chroot`` is appended to it when given.
    ``client_factory(hosts)`` builds the kazoo client (tests inject their own).
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
        log.info("watching partition leadership of broker %d in ZooKeeper %s", self.broker_id, self.hosts)

    def stop(self) -> None:
        if not self._mark_stopped():
            return
        with self._lock:
            if self._view is not None:
                self._view.alive = False
        self._close_client()
        self._dirty.set()
        notifier = self._notifier
        if notifier is not None and notifier is not threading.current_thread():
            notifier.join(10)

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
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended: keeping the last leadership map")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            client = self._client
            if client is not None:
                client.handler.spawn(self._rebuild_after_session_loss)

    def _rebuild_after_session_loss(self) -> None:
        try:
            self._build_view()
        except Exception:
            if not self._stopped:
                log.exception("rebuilding the ZooKeeper leadership view after session loss failed; retrying on the next reconnection")
                self._session_lost = True
            return
        log.info("ZooKeeper session re-established: leadership view rebuilt")
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

            ChildrenWatch(client, path, _guarded_children(on_kids, path))
            return None

        DataWatch(client, path, _guarded(on_node, path))

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

        DataWatch(self._client, config_path, _guarded(on_config, config_path))
        partitions_path = f"/brokers/topics/{topic.name}/partitions"
        self._watch_children(partitions_path, alive, lambda children: self._on_partitions(view, topic, children))

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

            DataWatch(self._client, path, _guarded(on_state, path))
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


def _guarded(func: Callable[[Any, Any, Any], bool | None], path: str) -> Callable[..., bool | None]:
    """A DataWatch function that logs its errors instead of raising them: kazoo calls a watch
    function again with two arguments when it raises TypeError, and re-raises anything else
    in its own thread."""

    def call(data: Any, stat: Any, event: Any = None) -> bool | None:
        try:
            return func(data, stat, event)
        except Exception:
            log.exception("leadership watch on %s failed", path)
            return None

    return call


def _guarded_children(func: Callable[[list[str]], bool | None], path: str) -> Callable[[list[str]], bool | None]:
    """A ChildrenWatch function that logs its errors instead of raising them."""

    def call(children: list[str]) -> bool | None:
        try:
            return func(children)
        except Exception:
            log.exception("leadership watch on %s failed", path)
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


# -- KRaft mode --------------------------------------------------------------------------------


class KRaftLeadershipWatcher(_Publisher):
    """Leadership from the Admin API (any cluster; the only way in KRaft mode), polled.

    Every ``poll_interval_s``: ``list_topics`` (Metadata) gives each partition's leader;
    ``describe_configs`` gives ``cleanup.policy`` of the topics with a partition led here,
    cached per topic and refreshed on every poll. ``admin_config`` is merged into the
    AdminClient's configuration (security settings, ...).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        broker_id: int,
        topic_filter: TopicFilter,
        *,
        poll_interval_s: float = 10.0,
        admin_config: dict[str, Any] | None = None,
        request_timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        if poll_interval_s <= 0:
            raise ConfigError(f"poll_interval_s must be positive, got {poll_interval_s}")
        self.bootstrap_servers = bootstrap_servers
        self.broker_id = broker_id
        self.topic_filter = topic_filter
        self.poll_interval_s = poll_interval_s
        self.request_timeout_s = request_timeout_s
        self._admin_config = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": f"tiered-kafka-agent-{broker_id}-leadership",
            "logger": logging.getLogger(f"{__name__}.librdkafka"),
            **(admin_config or {}),
        }
        self._admin: Any = None
        self._policies: dict[str, str | None] = {}  # topic -> cleanup.policy, from the last successful describe
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_change: OnChange) -> None:
        if self._admin is not None:
            raise RuntimeError("KRaftLeadershipWatcher.start() called twice")
        from confluent_kafka.admin import AdminClient

        with self._lock:
            self._on_change = on_change
        self._admin = AdminClient(self._admin_config)
        try:
            led = self._poll()
        except Exception as err:
            self._mark_stopped()
            self._admin = None
            raise LeadershipError(f"cannot read partition leadership from {self.bootstrap_servers}: {err}") from err
        self._deliver(lambda: led, force=True)
        self._thread = threading.Thread(target=self._poll_loop, name=f"leadership-kraft-{self.broker_id}", daemon=True)
        self._thread.start()
        log.info("polling partition leadership of broker %d from %s every %ss", self.broker_id, self.bootstrap_servers, self.poll_interval_s)

    def stop(self) -> None:
        if not self._mark_stopped():
            return
        self._wakeup.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.request_timeout_s * 3 + 10)
        self._admin = None

    def poll_now(self) -> None:
        """Poll at once instead of waiting for the interval (the next poll follows ``poll_interval_s`` later)."""
        self._wakeup.set()

    def _poll_loop(self) -> None:
        while True:
            self._wakeup.wait(self.poll_interval_s)
            self._wakeup.clear()
            if self._stopped:
                return
            try:
                led = self._poll()
            except Exception as err:
                if not self._stopped:
                    log.warning("leadership poll of %s failed, keeping the previous map: %s", self.bootstrap_servers, err)
                continue
            self._deliver(lambda led=led: led)

    def _poll(self) -> dict[TopicPartition, Leadership]:
        admin = self._admin
        metadata = admin.list_topics(timeout=self.request_timeout_s)
        admin.poll(0)  # serve librdkafka's log callbacks
        mine: dict[str, list[int]] = {}
        for name, topic in metadata.topics.items():
            if not self._topic_passes(self.topic_filter, name):
                continue
            partitions = sorted(p for p, meta in topic.partitions.items() if meta.leader == self.broker_id)
            if partitions:
                mine[name] = partitions
        policies = self._describe_policies(sorted(mine))
        led: dict[TopicPartition, Leadership] = {}
        with self._lock:
            self._forget_topics(metadata.topics)
            for name in list(self._policies):
                if name not in metadata.topics:
                    del self._policies[name]
            self._policies.update(policies)
            for name, partitions in mine.items():
                if name not in self._policies:
                    continue  # never described yet: held back until a poll describes it
                policy = self._policies[name]
                compacted = is_compacted(policy)
                self._note_compacted(name, compacted, policy)
                if not compacted:
                    for p in partitions:
                        led[TopicPartition(name, p)] = Leadership(LEADER_EPOCH_UNKNOWN)
        return led

    def _describe_policies(self, topics: list[str]) -> dict[str, str | None]:
        """cleanup.policy of each topic whose DescribeConfigs succeeded (None: not reported)."""
        if not topics:
            return {}
        from confluent_kafka.admin import ConfigResource, ResourceType

        resources = [ConfigResource(ResourceType.TOPIC, name) for name in topics]
        futures = self._admin.describe_configs(resources, request_timeout=self.request_timeout_s)
        policies: dict[str, str | None] = {}
        for resource, future in futures.items():
            try:
                entries = future.result(timeout=self.request_timeout_s * 2)
            except Exception as err:
                log.warning("cannot read the config of topic %s (keeping what was known): %s", resource.name, err)
                continue
            entry = entries.get("cleanup.policy")
            policies[resource.name] = None if entry is None else entry.value
        return policies
