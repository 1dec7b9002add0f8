"""What the gateway reads a cluster through: the ``ClusterSource`` protocol, and the one factory.

Two sources implement it side by side, neither deriving from the other:

* ``remote.ClusterReader``: our agent's layout (the Redis registry, segment objects in S3, a
  Pinterest-layout bucket found by listing);
* ``rsm_reader.RsmClusterReader``: a KIP-405 bucket written by Aiven's RemoteStorageManager.

The routes, ``records``, ``kafka_offsets``, ``metrics`` and the coverage page ask only what the
protocol names. The clients a source reads through (Redis, S3) are made once per cluster when the
app is created (``app.create_app`` -> ``build_sources`` -> the kind's ``connect``) and handed to the
source's constructor: a unit test builds a source over fakes of them (tests/unit/gateway).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from tiered_kafka.format.txn_index import AbortedTxn
from tiered_kafka.read_plan import ByteRange
from tiered_kafka.registry import CoverageStart, Gap, PartitionInfo, SegmentEntry
from tiered_kafka_gateway.caches import LRU, RemoteSegment
from tiered_kafka_gateway.config import ClusterSettings, GatewaySettings
from tiered_kafka_gateway.plans import Plan


class ClusterSource(Protocol):
    """One cluster's remote data, as every part of the gateway reads it."""

    name: str
    settings: GatewaySettings
    bootstrap_servers: str | None

    @property
    def s3_gets(self) -> int: ...

    @property
    def presigns(self) -> int: ...

    @property
    def caches(self) -> list[LRU[Any, Any]]: ...

    def close(self) -> None: ...

    def wait_for_background_loads(self, timeout_s: float = 30.0) -> bool: ...

    def check(self) -> dict[str, str]:
        """Readiness: each dependency's "ok" or why not (``/readyz``)."""

    # -- partitions
    def topics(self) -> tuple[dict[str, list[int]], bool]:
        """Topic -> sorted partitions with remote data; and whether that list is complete."""

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None: ...

    def coverage_start(self, topic: str, partition: int) -> CoverageStart | None: ...

    def gaps(self, topic: str, partition: int) -> list[Gap]: ...

    def segments(self, topic: str, partition: int) -> list[SegmentEntry]: ...

    def last_stable_offset(self, topic: str, partition: int, info: PartitionInfo | None = None) -> int | None:
        """The partition's remote last stable offset (``tiered_kafka.transactions``); None when unknown."""

    # -- plans and bytes
    def plan(self, topic: str, partition: int, offset: int, max_bytes: int, *, range_bytes: int | None = None) -> Plan: ...

    def read_range(self, key: str, byte_range: ByteRange) -> bytes:
        """A planned range's original bytes (the broker's ``.log``), read by the gateway itself."""

    def batches_reaching(self, segment: RemoteSegment | SegmentEntry, timestamp: int) -> Iterator[ByteRange]: ...

    def aborted_txns(self, topic: str, partition: int, segment: RemoteSegment | SegmentEntry) -> list[AbortedTxn]:
        """The segment's aborted transactions (its ``.txnindex``), cached; [] when it has none."""


def build_source(name: str, cluster: ClusterSettings, settings: GatewaySettings) -> ClusterSource:
    """The source of a cluster by its ``kind`` (``config``), its clients connected by the kind's
    ``connect`` (the only places that make a Redis or S3 client for the gateway)."""
    if cluster.kind == "kip405":
        from tiered_kafka_gateway.rsm_reader import RsmClusterReader

        return RsmClusterReader.connect(name, cluster, settings)
    from tiered_kafka_gateway.remote import ClusterReader

    return ClusterReader.connect(name, cluster, settings)


def build_sources(settings: GatewaySettings) -> dict[str, ClusterSource]:
    """Every configured cluster's source (``app.create_app``)."""
    return {name: build_source(name, cluster, settings) for name, cluster in settings.clusters.items()}
