"""Which partitions this broker leads: the agent uploads only those.

Three watchers share one interface (:class:`LeadershipWatcher`, ``watcher``)::

    watcher.start(on_change)   # on_change(full map) once at start, then whenever the map changes
    watcher.current()          # the map last handed to on_change
    watcher.health()           # LeadershipHealth: ok, failures counted since start, the problem
    watcher.stop()             # no on_change call after stop() returns

The map holds the partitions that are led by this broker, whose topic passes the
:class:`TopicFilter`, and whose topic is not compacted. Its values are :class:`Leadership`.

- :class:`ZooKeeperLeadershipWatcher` (ZooKeeper-mode clusters, ``zookeeper``) reads the znodes a Kafka
  controller writes (``kafka.zk.ZkData``), through kazoo watches, so it reacts within
  milliseconds of a change::

      /brokers/topics                                children: the topics
      /brokers/topics/{t}/partitions                 children: the partitions (may appear after {t})
      /brokers/topics/{t}/partitions/{p}/state       {"leader": N, "leader_epoch": E, "isr": [...], ...}
      /config/topics/{t}                             {"version": 1, "config": {"cleanup.policy": ...}}

- :class:`KRaftLeadershipWatcher` (KRaft clusters, where no ZooKeeper exists; ``kraft``) polls the Admin
  API every ``poll_interval_s``: Metadata (``list_topics``) for the leaders, DescribeConfigs for
  ``cleanup.policy``.
- :class:`StaticLeadership`: a fixed map, changed with ``set()`` (local runs and tests; ``watcher``).

The package logs through one logger, ``tiered_kafka_agent.leadership``.

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
- **ZooKeeper, a failed watch**: kazoo retries connection losses by itself; a watch function
  that raises all the same (a read kazoo gives up on, e.g. ``NoAuthError`` on a znode whose ACL
  shuts the agent out, or a bug) leaves the view without what that watch should have recorded:
  the map would go stale, silently. Such a failure is counted, makes ``health()`` not ok (the
  agent's ``tiered_kafka_agent_leadership_failures_total`` and ``..._leadership_healthy``), and
  the whole view is rebuilt from fresh watches, as after a lost session, with full-jitter backoff
  between failed rebuilds (``repair_backoff``, ``tiered_kafka.retry``) for as long as the watcher
  runs; the last map stands meanwhile and the rebuilt one is published once complete. A lost
  session counts alike. Not seen here: a read that fails when kazoo re-arms a DataWatch after an
  event runs in kazoo's own thread, which logs it; that watch is gone until the next rebuild.
- **KRaft, leader epoch**: ``-1`` (:data:`LEADER_EPOCH_UNKNOWN`). confluent-kafka's Python API
  exposes no leader epoch: ``list_topics`` gives ``PartitionMetadata(id, leader, replicas, isrs,
  error)`` and ``describe_topics`` gives ``TopicPartitionInfo(id, leader, replicas, isr)``
  (checked with confluent-kafka 2.16.1 / librdkafka 2.16.0). The uploader takes each segment's
  epochs from its batch headers (``partitionLeaderEpoch``) anyway.
- **KRaft, failures**: a failed poll logs a WARNING and keeps the previous map: a transient
  Admin API error never drops leadership; it counts in ``health()`` until a poll succeeds. A topic whose config cannot be read keeps its cached
  policy; a topic never described yet is held back until a poll describes it. ``start()``
  polls once and raises :class:`LeadershipError` when that first poll fails (a wrong bootstrap
  address should be loud); ZooKeeper mode likewise raises when it cannot connect.
"""

from tiered_kafka_agent.leadership.kraft import KRaftLeadershipWatcher
from tiered_kafka_agent.leadership.watcher import (
    LEADER_EPOCH_UNKNOWN,
    Leadership,
    LeadershipError,
    LeadershipHealth,
    LeadershipWatcher,
    StaticLeadership,
    TopicFilter,
    TopicPartition,
    is_compacted,
)
from tiered_kafka_agent.leadership.zookeeper import ZooKeeperLeadershipWatcher

__all__ = [
    "LEADER_EPOCH_UNKNOWN",
    "KRaftLeadershipWatcher",
    "Leadership",
    "LeadershipError",
    "LeadershipHealth",
    "LeadershipWatcher",
    "StaticLeadership",
    "TopicFilter",
    "TopicPartition",
    "ZooKeeperLeadershipWatcher",
    "is_compacted",
]
