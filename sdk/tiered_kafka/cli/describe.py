"""``tiered-kafka topics`` and ``tiered-kafka describe TOPIC``: what remote storage and Kafka hold, as
text or ``--json``, from the gateway's read-only endpoints (``GatewayClient.topics``, ``.partition``,
``.record_for_timestamp``) and, when bootstrap servers are known, Kafka's metadata and watermarks.

``topics``: the topics with remote data the token may read (the gateway lists no other), and with
bootstrap servers Kafka's topics too (internal ``__*`` topics left out, as ``kafka-topics --list
--exclude-internal``), each with its partition count and remote bytes, segments and offsets; a
Kafka topic the token may not read says TOPIC_AUTHORIZATION_FAILED instead of its remote figures.
Remote offsets count the offsets between each partition's earliest and latest remote offset:
records, plus the control records of transactions and the offsets compaction removed.

``describe``: per partition the remote range, Kafka's range (the gateway's view of its Kafka, else
the CLI's own bootstrap servers), where remote coverage starts, the recorded gaps with their
reasons, the remote bytes and the oldest remote timestamp (that of the first remote record stamped
at or after 0: Kafka's ListOffsets over remote storage). A topic neither remote storage nor Kafka
knows exits 1 with UNKNOWN_TOPIC_OR_PART; a topic the token may not read with
TOPIC_AUTHORIZATION_FAILED (the gateway's 403, also when Kafka lists the topic): never an empty
answer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO, TypeVar

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tiered_kafka.cli import Refused
from tiered_kafka.cli.settings import Connection
from tiered_kafka.errors import GatewayRequestError, TopicAuthorizationError
from tiered_kafka.client.gateway import GatewayClient, PartitionExtent, PlanGap

T = TypeVar("T")
R = TypeVar("R")

#: gateway requests in flight at once (one per partition)
PARALLELISM = 8
#: seconds for one Kafka metadata or ListOffsets request
KAFKA_TIMEOUT_S = 10.0
#: partitions probed at most when only the gateway's Kafka knows a topic (Kafka's partitions are 0..n-1)
MAX_PROBED_PARTITIONS = 10_000


@dataclass(frozen=True)
class PartitionView:
    """One partition as ``describe`` shows it."""

    partition: int
    extent: PartitionExtent | None  # None: the gateway knows nothing of it (Kafka does)
    kafka: tuple[int, int] | None  # (log start offset, high watermark)
    oldest_timestamp_ms: int | None

    def as_json(self) -> dict[str, Any]:
        remote = None if self.extent is None else self.extent.remote
        return {
            "partition": self.partition,
            "remote": None if remote is None else {
                "earliest_offset": remote.earliest_offset, "latest_offset": remote.latest_offset, "segments": remote.segment_count,
                "bytes": remote.total_bytes, "last_stable_offset": remote.last_stable_offset,
            },
            "kafka": None if self.kafka is None else {"log_start_offset": self.kafka[0], "high_watermark": self.kafka[1]},
            "coverage_start_offset": None if self.extent is None else self.extent.coverage_start_offset,
            "gaps": [{"start_offset": g.start_offset, "end_offset": g.end_offset, "reason": g.reason} for g in self.gaps],
            "oldest_timestamp_ms": self.oldest_timestamp_ms,
        }

    @property
    def gaps(self) -> tuple[PlanGap, ...]:
        return () if self.extent is None else self.extent.gaps


class KafkaView:
    """Kafka's metadata and watermarks through one confluent-kafka Consumer (no group joined), closed on exit."""

    def __init__(self, connection: Connection) -> None:
        config = {**connection.kafka, "bootstrap.servers": connection.bootstrap_servers, "group.id": "tiered-kafka-cli", "enable.auto.commit": False}
        self._consumer = Consumer(config)

    def __enter__(self) -> KafkaView:
        return self

    def __exit__(self, *exc: object) -> None:
        self._consumer.close()

    def topics(self) -> dict[str, int]:
        """Kafka's topics (internal ``__*`` ones left out) and their partition counts."""
        metadata = self._consumer.list_topics(timeout=KAFKA_TIMEOUT_S)
        return {name: len(t.partitions) for name, t in metadata.topics.items() if not name.startswith("__") and t.error is None}

    def partitions(self, topic: str) -> list[int] | None:
        """The topic's partitions; None when Kafka does not know it. TOPIC_AUTHORIZATION_FAILED: ``Refused``."""
        found = self._consumer.list_topics(topic, timeout=KAFKA_TIMEOUT_S).topics.get(topic)
        if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return None
        if found.error is not None:
            raise Refused(f"{found.error.name()}: Kafka refused the metadata of topic {topic!r}: {found.error.str()}")
        return sorted(found.partitions)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=KAFKA_TIMEOUT_S, cached=False)
        return int(low), int(high)


def topics_command(args: argparse.Namespace, connection: Connection, out: TextIO) -> int:
    """``tiered-kafka topics``: exit 0 with the topics; 1 with a note on stderr when there are none
    (never silently empty). A listing the gateway cut short (its S3 listing bound) is said on stderr
    and as ``"complete": false`` in ``--json``."""
    with GatewayClient(str(connection.gateway), str(connection.cluster), token=connection.token) as gateway:
        listing = gateway.topic_listing()
        remote = listing.topics
        kafka: dict[str, int] = {}
        if connection.bootstrap_servers:
            with KafkaView(connection) as view:
                kafka = view.topics()
        pairs = [(t, p) for t, ps in remote.items() for p in ps]
        extents = dict(zip(pairs, _parallel(lambda tp: _extent(gateway, *tp), pairs), strict=True))
        kafka_only = sorted(kafka.keys() - remote.keys())
        refused = {t for t, ok in zip(kafka_only, _parallel(lambda t: _authorized(gateway, t), kafka_only), strict=True) if not ok}
    rows = []
    for name in sorted(remote.keys() | kafka.keys()):
        held = [e.remote for (t, _p), e in extents.items() if t == name and e is not None and e.remote is not None]
        rows.append({
            "name": name,
            "remote_error": "TOPIC_AUTHORIZATION_FAILED" if name in refused else None,
            "partitions": max(kafka.get(name, 0), len(remote.get(name, ()))),
            "remote_partitions": len(held),
            "remote_bytes": sum(r.total_bytes for r in held),
            "remote_segments": sum(r.segment_count for r in held),
            "remote_offsets": sum(r.latest_offset - r.earliest_offset + 1 for r in held),
            "in_kafka": (name in kafka) if connection.bootstrap_servers else None,
        })
    if not listing.complete:
        print(f"tiered-kafka: topics: cluster {connection.cluster}: the gateway's S3 listing stopped at its bound: topics may be missing", file=sys.stderr)
    if not rows:
        where = "remote storage holds no topic this token may read" + (", and Kafka has none" if connection.bootstrap_servers else " (give --bootstrap-servers to list Kafka's too)")
        print(f"tiered-kafka: topics: cluster {connection.cluster}: {where}", file=sys.stderr)
    found = 0 if rows else 1
    if args.json:
        json.dump({"cluster": connection.cluster, "complete": listing.complete, "topics": rows}, out, indent=2)
        out.write("\n")
        return found
    header = ("TOPIC", "PARTITIONS", "REMOTE PARTITIONS", "REMOTE BYTES", "SEGMENTS", "REMOTE OFFSETS") + (("IN KAFKA",) if connection.bootstrap_servers else ())
    table = [[r["name"], r["partitions"], *(["-", r["remote_error"], "-", "-"] if r["remote_error"] else [r["remote_partitions"], _size(r["remote_bytes"]), r["remote_segments"], r["remote_offsets"]])]
             + ([] if r["in_kafka"] is None else ["yes" if r["in_kafka"] else "no"]) for r in rows]
    _print_table(header, table, out)
    return found


def describe_command(args: argparse.Namespace, connection: Connection, out: TextIO) -> int:
    """``tiered-kafka describe TOPIC``: exit 0 with every partition, or ``Refused`` (module doc)."""
    topic = args.topic
    with GatewayClient(str(connection.gateway), str(connection.cluster), token=connection.token) as gateway, contextlib.ExitStack() as stack:
        view = stack.enter_context(KafkaView(connection)) if connection.bootstrap_servers else None
        partitions = set(gateway.topics().get(topic, ()))
        partitions |= set((None if view is None else view.partitions(topic)) or ())
        if not partitions:
            partitions = set(_probe(gateway, topic, kafka_known=view is not None))
        views = _parallel(lambda p: _partition_view(gateway, view, topic, p), sorted(partitions))
    if args.json:
        json.dump({"cluster": connection.cluster, "topic": topic, "partitions": [v.as_json() for v in views]}, out, indent=2)
        out.write("\n")
        return 0
    remote = [v.extent.remote for v in views if v.extent is not None and v.extent.remote is not None]
    out.write(f"Topic: {topic}  Partitions: {len(views)}  Remote: {_size(sum(r.total_bytes for r in remote))} in {sum(r.segment_count for r in remote)} segments "
              f"({len(remote)} of {len(views)} partitions)\n")
    header = ("PARTITION", "REMOTE OFFSETS", "KAFKA OFFSETS", "COVERAGE FROM", "REMOTE BYTES", "SEGMENTS", "OLDEST REMOTE TIMESTAMP")
    rows: list[list[Any]] = []
    for v in views:
        r = None if v.extent is None else v.extent.remote
        coverage = None if v.extent is None else v.extent.coverage_start_offset
        rows.append([
            v.partition,
            "-" if r is None else f"{r.earliest_offset}..{r.latest_offset}",
            "-" if v.kafka is None else (f"{v.kafka[0]}..{v.kafka[1] - 1}" if v.kafka[1] > v.kafka[0] else f"empty at {v.kafka[1]}"),
            "-" if coverage is None else coverage,
            "-" if r is None else _size(r.total_bytes),
            "-" if r is None else r.segment_count,
            "-" if v.oldest_timestamp_ms is None else _timestamp(v.oldest_timestamp_ms),
        ])
    _print_table(header, rows, out)
    for v in views:
        for gap in v.gaps:
            out.write(f"gap: partition {v.partition} offsets {gap.start_offset}..{gap.end_offset}: {gap.reason}\n")
    return 0


def _probe(gateway: GatewayClient, topic: str, *, kafka_known: bool) -> list[int]:
    """The partitions of a topic the gateway does not list (no remote data) and the CLI's Kafka does
    not know (or is not given): those the gateway's Kafka answers for, from 0 up. A 403 is raised
    (TOPIC_AUTHORIZATION_FAILED); none at all: ``Refused`` with UNKNOWN_TOPIC_OR_PART."""
    found: list[int] = []
    for partition in range(MAX_PROBED_PARTITIONS):
        if _extent(gateway, topic, partition) is None:
            break
        found.append(partition)
    if not found:
        where = "remote storage, the gateway's Kafka" + (" and Kafka at the bootstrap servers" if kafka_known else "")
        raise Refused(f"UNKNOWN_TOPIC_OR_PART: topic {topic!r} is unknown to {where}")
    return found


def _partition_view(gateway: GatewayClient, kafka: KafkaView | None, topic: str, partition: int) -> PartitionView:
    extent = _extent(gateway, topic, partition)
    watermarks = None
    if extent is not None and extent.kafka_high_watermark is not None and extent.kafka_log_start_offset is not None:
        watermarks = (extent.kafka_log_start_offset, extent.kafka_high_watermark)
    elif kafka is not None:
        watermarks = kafka.watermarks(topic, partition)
    oldest = None
    if extent is not None and extent.remote is not None:
        found = gateway.record_for_timestamp(topic, partition, 0)
        oldest = None if found is None else found[1]
    return PartitionView(partition, extent, watermarks, oldest)


def _authorized(gateway: GatewayClient, topic: str) -> bool:
    """Whether the token may read ``topic`` (a Kafka topic the gateway does not list: no remote data, or
    not the token's): the gateway's 403 on its partition 0 says which."""
    try:
        _extent(gateway, topic, 0)
    except TopicAuthorizationError:
        return False
    return True


def _extent(gateway: GatewayClient, topic: str, partition: int) -> PartitionExtent | None:
    """The gateway's view of the partition; None for its 404 (it knows nothing of it). A 403 is raised."""
    try:
        return gateway.partition(topic, partition)
    except GatewayRequestError as err:
        if err.code == "unknown_topic_or_partition":
            return None
        raise


def _parallel(call: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``call`` over ``items`` on a few threads (the gateway client is thread-safe), results in order."""
    items = list(items)
    if len(items) <= 1:
        return [call(i) for i in items]
    with ThreadPoolExecutor(max_workers=PARALLELISM, thread_name_prefix="tiered-kafka-cli") as pool:
        return list(pool.map(call, items))


def _size(n: int) -> str:
    """Bytes for a reader: ``512 B``, ``1.5 MiB`` (binary units, as Kafka's tools)."""
    if n < 1024:
        return f"{n} B"
    value, unit = float(n), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}"


def _timestamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _print_table(header: tuple[str, ...], rows: list[list[Any]], out: TextIO) -> None:
    cells = [list(header)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")

