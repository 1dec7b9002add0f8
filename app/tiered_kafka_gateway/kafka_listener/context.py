"""One cluster's listener state: its source, its Kafka, the topics it serves and their ids.

**Topics** the listener serves, by the mode (``tiered_kafka.modes``): the topics remote storage
holds (``ClusterSource.topics``) when the mode reads remote storage, and Kafka's (``upstream``
Metadata, internal ``__`` topics left out) when it reads Kafka. A partition count is the larger of
Kafka's and one past the highest partition remote storage holds.

**Topic ids** (KIP-516): Kafka's own id where Kafka knows the topic, so a KIP-848 assignment from
Kafka's coordinator (which names topic ids) and the listener's Metadata agree; for a topic only
remote storage holds, a stable id derived from the cluster and topic names (UUID v5), the same in
every replica and across restarts.

**Watermarks**: Kafka's log start and high watermark per partition (ListOffsets), remembered for
``WATERMARK_TTL_S``, so a Fetch served from S3 reports Kafka's high watermark (consumer lag and
"end of partition" stay right) without a Kafka call per Fetch.

Blocking calls on the source (Redis, S3) run in the listener's own thread pool (``blocking``),
never on the event loop.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tiered_kafka.modes import Mode, reads_kafka, reads_remote
from tiered_kafka.registry import PartitionInfo
from tiered_kafka_gateway.deps import Access
from tiered_kafka_gateway.kafka_listener.metrics import ListenerMetrics
from tiered_kafka_gateway.kafka_listener.read_ahead import ReadAhead
from tiered_kafka_gateway.kafka_listener.settings import KafkaListenerSettings
from tiered_kafka_gateway.kafka_listener.upstream import Upstream, KafkaUpstreamError
from tiered_kafka_gateway.sources import ClusterSource

T = TypeVar("T")
WATERMARK_TTL_S = 1.0
TOPIC_ID_NAMESPACE = uuid.UUID("6f1c3c1e-35a0-4c57-9a56-6b2f0a0f3535")


def stable_topic_id(cluster: str, topic: str) -> bytes:
    return uuid.uuid5(TOPIC_ID_NAMESPACE, f"{cluster}/{topic}").bytes


@dataclass
class Listing:
    partitions: dict[str, int]  # topic -> partition count
    ids: dict[str, bytes]
    by_id: dict[bytes, str]
    cluster_id: str
    leader_epochs: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class ListenerContext:
    name: str
    source: ClusterSource
    settings: KafkaListenerSettings
    upstream: Upstream | None
    metrics: ListenerMetrics
    authenticate: Callable[[str], Access | None] | None  # None: auth disabled, every caller reads everything
    pool: ThreadPoolExecutor
    advertised: tuple[str, int] = ("127.0.0.1", 0)
    ahead: ReadAhead | None = None
    infos: dict[tuple[str, int], PartitionInfo | None] = field(default_factory=dict)  # the extent each partition's last read saw
    # read_committed: the remote last stable offset each partition's last read saw, and whether no segment from there on has aborts
    txn_meta: dict[tuple[str, int], tuple[int, bool]] = field(default_factory=dict)
    _watermarks: dict[tuple[str, int, int], tuple[float, int]] = field(default_factory=dict)
    _listing: tuple[float, Listing] | None = None

    def __post_init__(self) -> None:
        if self.ahead is None and self.settings.read_ahead_bytes and self.settings.read_ahead_capacity:
            self.ahead = ReadAhead(self.settings.read_ahead_capacity)

    @property
    def mode(self) -> Mode:
        return self.settings.mode

    @property
    def node_id(self) -> int:
        return self.settings.node_id

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def listing(self, *, refresh: bool = False) -> Listing:
        """The topics served, with partition counts and ids (module docstring), cached for a second."""
        cached = self._listing
        if cached is not None and not refresh and time.monotonic() - cached[0] < 1.0:
            return cached[1]
        partitions: dict[str, int] = {}
        ids: dict[str, bytes] = {}
        epochs: dict[tuple[str, int], int] = {}
        cluster_id = self.name
        if reads_remote(self.mode):
            remote, _complete = await self.blocking(self.source.topics)
            for topic, parts in remote.items():
                if parts:
                    partitions[topic] = max(parts) + 1
        if self.upstream is not None:
            try:
                meta = await self.upstream.metadata(refresh=refresh)
            except KafkaUpstreamError:
                meta = None  # Kafka down: remote topics are still served, with their stable ids
            if meta is not None:
                cluster_id = meta.cluster_id or cluster_id
                for topic, found in meta.topics.items():
                    if topic.startswith("__") or found.error_code:
                        continue
                    if topic in partitions or reads_kafka(self.mode):
                        partitions[topic] = max(partitions.get(topic, 0), len(found.partitions))
                        ids[topic] = found.topic_id
                        for p, (_leader, epoch) in found.partitions.items():
                            epochs[(topic, p)] = epoch
        for topic in partitions:
            ids.setdefault(topic, stable_topic_id(self.name, topic))
        listing = Listing(partitions, ids, {v: k for k, v in ids.items()}, cluster_id, epochs)
        self._listing = (time.monotonic(), listing)
        return listing

    async def kafka_offset(self, topic: str, partition: int, which: int, isolation_level: int = 0) -> int | None:
        """Kafka's earliest (-2) or latest (-1) offset, remembered for WATERMARK_TTL_S; when Kafka cannot
        answer, the last one it gave (older, never beyond Kafka's: watermarks only grow); None when Kafka is
        not read or never answered."""
        if self.upstream is None or not reads_kafka(self.mode):
            return None
        key = (topic, partition, which * 2 + isolation_level)
        found = self._watermarks.get(key)
        if found is not None and time.monotonic() - found[0] < WATERMARK_TTL_S:
            return found[1]
        stale = None if found is None else found[1]
        try:
            error, offset, _ts, _epoch = await self.upstream.list_offset(topic, partition, which, isolation_level)
        except KafkaUpstreamError:
            return stale
        if error:
            return stale
        if len(self._watermarks) > 100_000:
            self._watermarks.clear()
        self._watermarks[key] = (time.monotonic(), offset)
        return offset
