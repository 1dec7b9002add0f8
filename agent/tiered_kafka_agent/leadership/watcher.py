"""What the three leadership watchers share: the interface, its values, the topic filter, and
the bookkeeping of publishing maps (the package docstring says what each watcher does)."""

from __future__ import annotations

import logging
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tiered_kafka.errors import ConfigError
from tiered_kafka_agent.errors import AgentError

log = logging.getLogger("tiered_kafka_agent.leadership")  # the package's one logger

LEADER_EPOCH_UNKNOWN = -1
INTERNAL_TOPIC_PREFIX = "__"

OnChange = Callable[[dict["TopicPartition", "Leadership"]], None]


class LeadershipError(AgentError):
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


@dataclass(frozen=True)
class LeadershipHealth:
    """What ``LeadershipWatcher.health()`` says. ``ok`` while the map follows the cluster: False
    from a failed ZooKeeper watch or a lost session until the rebuilt watches are complete, or
    from a failed KRaft poll until a poll succeeds (the last map stands meanwhile). ``failures``
    counts every failed watch, failed rebuild, lost session and failed poll since start (the
    agent's ``tiered_kafka_agent_leadership_failures_total``); ``problem`` names the last one while
    not ok."""

    ok: bool = True
    failures: int = 0
    problem: str | None = None


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

    def health(self) -> LeadershipHealth:
        """Whether the map can be trusted now, and the failures so far (:class:`LeadershipHealth`)."""
        return LeadershipHealth()

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
        self._failures = 0
        self._problem: str | None = None

    def current(self) -> dict[TopicPartition, Leadership]:
        with self._lock:
            return dict(self._published)

    def health(self) -> LeadershipHealth:
        with self._lock:
            return LeadershipHealth(ok=self._problem is None, failures=self._failures, problem=self._problem)

    def _failed(self, problem: str) -> None:
        """Count a failure; ``health()`` is not ok until ``_recovered()``."""
        with self._lock:
            self._failures += 1
            self._problem = problem

    def _recovered(self) -> None:
        with self._lock:
            self._problem = None

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
