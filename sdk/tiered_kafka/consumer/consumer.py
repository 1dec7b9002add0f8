"""``TieredConsumer``: confluent_kafka.Consumer's interface over Kafka *and* remote storage.

How it works
------------
A confluent-kafka ``Consumer`` (the "inner" consumer) does everything Kafka does for us: group
membership and rebalances, committed offsets, watermarks, and the fetching of partitions whose
source is Kafka. Partitions whose source is remote storage are *not* in the inner consumer's
assignment, so librdkafka never fetches them (REMOTE_ONLY never fetches data from the brokers);
a ``RemoteReader`` reads them through the gateway's read plans and presigned URLs instead.

Each assigned partition has a ``Handoff`` (``tiered_kafka.consumer.handoff``): a state machine
without I/O that owns the position (the next offset the application gets) and the source, and
applies the modes' rules (``tiered_kafka.modes``, the one place for them).

``TieredConsumer`` is a facade over collaborators that each own their state, as aiokafka's consumer
delegates to its fetcher and subscription state (each one's docstring says what it owns):

- ``Assignment`` (``assignment``): the assigned partitions and the inner consumer's assignment
  (exactly the Kafka-source partitions, at their positions);
- ``KafkaDelivery`` (``kafka_delivery``): the Kafka messages fetched and not yet handed out, and
  Kafka's OFFSET_OUT_OF_RANGE events not yet handled;
- ``Positions`` (``positions``): where each partition reads from: it feeds the handoffs the events
  (assign, seek, reset, Kafka's OFFSET_OUT_OF_RANGE) and does what they decide; seek, position,
  watermarks, offsets_for_times;
- ``Membership`` (``membership``): subscribe/assign and the rebalance callbacks, pause/resume;
- ``RemoteDelivery`` (``delivery``): remote records handed out;
- ``Offsets`` (``offsets``): stored and committed offsets, commit, auto-commit;
- ``ErrorChannel`` (``channel``): the one error channel.

Their dependencies point one way, in the order they are built: ``Offsets``, ``ErrorChannel`` →
``Assignment`` → ``KafkaDelivery`` → ``Positions`` → ``Membership``, ``RemoteDelivery``; nothing is
attached after construction.

This class owns the configuration, the mode, the clients (the inner consumer, the gateway client)
and what remote readers share (data budget, thread pool), and runs ``poll``/``consume``.

Offsets: librdkafka runs with ``auto.offset.reset=error`` and ``enable.auto.offset.store=false``;
this class applies the application's ``auto.offset.reset`` (earliest: the earliest offset of the
tiers the mode reads; latest: the end), stores offsets as records are delivered, and commits them
itself (``enable.auto.commit`` every ``auto.commit.interval.ms``, on revoke and on close), for
partitions of either source. Committed offsets are ordinary Kafka group offsets: a plain
confluent-kafka consumer of the same group continues where a TieredConsumer stopped.

Errors: one channel, confluent-kafka's rule (``tiered_kafka.consumer.channel`` has the table).
What goes wrong with a partition's data is a Message whose ``error()`` is a ``KafkaError`` with
Kafka's code, returned by ``poll``/``consume`` like any record; the partition's position does not
move:
- TOPIC_AUTHORIZATION_FAILED (the gateway's 403): once per event; the partition then makes no
  further progress (nothing from remote storage, and in REMOTE_PREFERRED/KAFKA_PREFERRED nothing
  from Kafka past the data it could not read) until the application seeks it, assigns it again or
  changes the mode.
- _AUTO_OFFSET_RESET: auto.offset.reset=error, as librdkafka delivers it.
- OFFSET_OUT_OF_RANGE: a recorded gap under ``tiered.remote.gap.policy=error`` (the message names
  the offsets and the reason): the next read meets it again until the application seeks past it.
- _TRANSPORT (``retriable()``): a gateway or S3 failure that outlived ``tiered.remote.retries``;
  INVALID_MSG: corrupt remote data; UNKNOWN_TOPIC_OR_PART: the gateway knows no such partition.
  The next poll tries again from the position.
What concerns the call or the client is raised: configuration and usage errors (``ConfigError``,
``ValueError``, a closed consumer), failed commits, the application's rebalance callbacks'
exceptions, and failures of the other calls (``assign``, ``seek``, watermarks...).
Commits. The application's ``commit()`` raises ``KafkaException`` as confluent-kafka's does. The
commits this class makes by itself: the periodic auto-commit is asynchronous and its result goes to
the ``on_commit`` callback (librdkafka's offset_commit_cb) when one is configured, and a failed one
is sent again at the next interval. The synchronous commit on revoke (rebalance, ``unassign``,
``incremental_unassign``, ``unsubscribe``) and on ``close`` is the application's last chance to
save its progress, so a failure is never only logged: it raises ``KafkaException``, as
``commit(asynchronous=False)`` would, from the call that made it (``close``, ``unassign``...; for
a rebalance inside ``poll``, from that ``poll`` or the next). The revoke or close itself still
completes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from tiered_kafka import modes
from tiered_kafka.consumer.assignment import Assignment
from tiered_kafka.consumer.channel import ErrorChannel
from tiered_kafka.consumer.config import TieredConfig, parse_config
from tiered_kafka.consumer.delivery import RemoteDelivery
from tiered_kafka.consumer.kafka_delivery import KAFKA_SERVICE_INTERVAL_S, KafkaDelivery
from tiered_kafka.consumer.membership import Membership, raise_if
from tiered_kafka.consumer.offsets import Offsets
from tiered_kafka.consumer.positions import Positions, RemoteResources
from tiered_kafka.consumer.prefetch import ByteBudget, data_budget
from tiered_kafka.consumer.tallies import SourceCounts
from tiered_kafka.consumer.tiers import Tiers
from tiered_kafka.errors import ConfigError
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.modes import Mode

TP = tuple[str, int]
Callback = Callable[[Any, list[TopicPartition]], None]


class TieredConsumer:
    """A drop-in for ``confluent_kafka.Consumer`` reading Kafka and remote storage (module docstring).

    ``TieredConsumer({"bootstrap.servers": ..., "group.id": ..., "tiered.mode": "REMOTE_PREFERRED",
    "tiered.gateway.url": ..., "tiered.cluster": ...})``; see ``tiered_kafka.consumer.config``.
    """

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self._config: TieredConfig = parse_config({**config, **kwargs})
        self._mode = self._config.mode
        self._inner: Consumer | None = Consumer(dict(self._config.kafka)) if self._config.has_kafka else None
        self._gateway: GatewayClient | None = None
        if self._config.gateway_url and self._config.cluster:
            self._gateway = GatewayClient(
                self._config.gateway_url,
                self._config.cluster,
                token=self._config.gateway_token,
                timeout_s=self._config.gateway_timeout_s,
                retries=self._config.remote_retries,
                backoff_s=self._config.remote_retry_backoff_s,
                max_connections=self._config.prefetch_parallelism + 4,
            )
        self._budget = ByteBudget(data_budget(self._config.prefetch_max_bytes, self._config.prefetch_parallelism), self._config.prefetch_parallelism)
        self._pool = ThreadPoolExecutor(self._config.prefetch_parallelism, thread_name_prefix="tiered-fetch")
        self._wake = threading.Event()
        self._closed = False
        mode = self._current_mode
        self._errors = ErrorChannel()
        counts = self._counts = SourceCounts()
        self._offsets = Offsets(self._config, self._inner)
        self._assignment = Assignment(self._config, self._inner, mode)
        self._kafka = KafkaDelivery(self._inner, self._assignment, self._offsets, self._errors, counts)
        remote = RemoteResources(self._gateway, self._budget, self._pool, self._wake)
        self._positions = Positions(self._config, mode, Tiers(self._inner, self._gateway), remote, self._assignment, self._kafka, self._errors, self._require_kafka)
        self._membership = Membership(self, self._inner, mode, self._assignment, self._positions, self._kafka, self._offsets, self._errors)
        self._remote = RemoteDelivery(self._assignment, self._positions, self._kafka, self._offsets, self._errors, counts, self._check_open)

    # -- mode -----------------------------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return self._mode

    def _current_mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode | str) -> None:
        """Change the consumption mode now; each partition continues at its exact position."""
        try:
            mode = Mode(mode.value if isinstance(mode, Mode) else str(mode).upper())
        except ValueError:
            raise ConfigError(f"mode {mode!r} is not one of {', '.join(m.value for m in Mode)}") from None
        if modes.reads_remote(mode) and self._gateway is None:
            raise ConfigError(f"mode {mode.value} reads remote storage: this consumer has no tiered.gateway.url/tiered.cluster")
        if modes.reads_kafka(mode) and self._inner is None:
            raise ConfigError(f"mode {mode.value} reads from Kafka: this consumer has no bootstrap.servers")
        self._mode = mode
        self._positions.set_mode(mode)

    # -- poll and consume ----------------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> Message | None:
        message = self._remote.poll_fast()
        if message is not None:
            return message
        messages = self._consume(1, timeout)
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        if num_messages < 1:
            raise ValueError("num_messages must be at least 1")
        return self._consume(num_messages, timeout)

    def _consume(self, limit: int, timeout: float | None) -> list[Message]:
        self._check_open()
        errors = self._errors
        errors.raise_deferred()
        deadline = math.inf if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._membership.start_pending()
        out: list[Message] = []
        while True:
            now = time.monotonic()
            if not self._assignment.reading_remote() or self._kafka.service_due(now):
                self._kafka.serve(limit, 0)
            try:
                self._positions.handle_out_of_range()
                self._collect(out, limit)
            except Exception as err:
                if not out:
                    raise
                errors.defer(err)  # raised by the next call: these messages are delivered first
                return out
            if errors.deferred is not None:  # from a rebalance callback
                if not out:
                    errors.raise_deferred()
                return out
            self._offsets.auto_commit(now)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            if self._assignment.reading_remote():
                self._wake.wait(min(remaining, KAFKA_SERVICE_INTERVAL_S))
                self._wake.clear()
            else:
                self._kafka.serve(limit, min(remaining, 0.2))

    def _collect(self, out: list[Message], limit: int) -> None:
        """Ready messages into ``out``: errors first, then Kafka's, then remote ones round-robin,
        then the errors met on the way."""
        self._errors.take(out, limit)
        self._kafka.collect(out, limit)
        self._remote.collect(out, limit)
        self._errors.take(out, limit)

    def delivered_by_source(self) -> dict[TP, dict[str, int]]:
        """Records delivered so far per (topic, partition), by source: {"remote": n, "kafka": m}."""
        return self._counts.snapshot()

    # -- assignment (``Membership``) -------------------------------------------------------------------
    def subscribe(self, topics: list[str], on_assign: Callback | None = None, on_revoke: Callback | None = None, on_lost: Callback | None = None) -> None:
        self._membership.subscribe(self._require_kafka("subscribe"), topics, on_assign, on_revoke, on_lost)

    def unsubscribe(self) -> None:
        self._membership.unsubscribe(self._require_kafka("unsubscribe"))

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Replace the assignment; offsets may be absolute or logical (OFFSET_BEGINNING/END/STORED)."""
        self._membership.assign(partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._membership.incremental_assign(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._membership.incremental_unassign(partitions)

    def unassign(self) -> None:
        self._membership.unassign()

    def assignment(self) -> list[TopicPartition]:
        return self._assignment.assignment()

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._membership.set_paused(partitions, True)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._membership.set_paused(partitions, False)

    # -- positions (``Positions``) ----------------------------------------------------------------------
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return self._positions.position(partitions)

    def seek(self, partition: TopicPartition) -> None:
        self._positions.seek(partition)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        """(low, high): KAFKA_ONLY Kafka's; REMOTE_ONLY remote storage's (high = last + 1); else low
        is the earliest offset of either tier and high Kafka's high watermark."""
        return self._positions.get_watermark_offsets(partition, timeout, cached)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The first offset whose timestamp is >= each partition's ``offset`` field (ms), over the
        tiers the mode reads; -1 (OFFSET_END) when there is none, as in Kafka."""
        return self._positions.offsets_for_times(partitions, timeout)

    # -- offsets (``Offsets``) --------------------------------------------------------------------------
    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        """As librdkafka: only with enable.auto.offset.store=false, only for assigned partitions."""
        self._offsets.store_offsets(self._assignment, message, offsets)

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None, asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit a message's offset + 1, the given offsets, or (neither) the stored offsets of every partition."""
        return self._offsets.commit(self._require_kafka("commit"), message, offsets, asynchronous)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._require_kafka("committed").committed(partitions, timeout=-1 if timeout is None else timeout)

    # -- the rest of Consumer's interface: the inner consumer's ------------------------------------------
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._require_kafka("list_topics").list_topics(topic, timeout=timeout)

    def cluster_id(self, timeout: float = -1) -> str | None:
        return self._require_kafka("cluster_id").cluster_id(timeout)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        self._require_kafka("set_sasl_credentials").set_sasl_credentials(username, password)

    def memberid(self) -> str | None:
        return self._require_kafka("memberid").memberid()

    def consumer_group_metadata(self) -> Any:
        return self._require_kafka("consumer_group_metadata").consumer_group_metadata()

    # -- closing ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Commit stored offsets (with enable.auto.commit), leave the group, stop every thread.
        A failed final commit raises KafkaException once all that is done."""
        if self._closed:
            return
        error: KafkaException | None = None
        try:
            if self._inner is not None and self._config.auto_commit:
                try:
                    self._offsets.commit_stored()
                except KafkaException as err:
                    error = err
        finally:
            readers = self._assignment.stop_remote()
            try:
                if self._inner is not None:
                    self._inner.close()  # runs on_revoke, in which the application may still commit
            finally:
                self._closed = True
                for reader in readers:
                    reader.join(self._config.gateway_timeout_s)
                self._pool.shutdown(wait=True, cancel_futures=True)
                if self._gateway is not None:
                    self._gateway.close()
        raise_if(error)

    def __enter__(self) -> TieredConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_kafka(self, what: str) -> Consumer:
        self._check_open()
        if self._inner is None:
            raise ConfigError(f"{what} needs Kafka: set bootstrap.servers")
        return self._inner

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")
