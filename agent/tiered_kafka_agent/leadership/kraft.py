"""Leadership of any cluster (KRaft mode's only way) from the Admin API, polled (the package docstring)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from tiered_kafka.errors import ConfigError
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
            "logger": logging.getLogger(f"{log.name}.librdkafka"),
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
                    self._failed(f"leadership poll of {self.bootstrap_servers} failed: {err}")
                continue
            self._recovered()
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
