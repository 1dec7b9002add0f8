"""The registry's keys and the reads every other part builds on: :class:`Store` (one client, one cluster).

``Registry`` (``_client``: writes and lookups) and ``PagedReads`` (``_paged``: summaries, the time
index, pages) each hold the one ``Store`` and share nothing else; ``translated`` turns redis-py's
errors into registry errors for all of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Final

from tiered_kafka.errors import InvalidSegmentNameError, TieredKafkaError
from tiered_kafka.format.segment_names import parse_partition_dir_name
from tiered_kafka.registry._entries import SegmentEntry
from tiered_kafka.registry._errors import MalformedRegistryDataError, RegistryError, RegistryUnavailableError, RegistryValueError
from tiered_kafka.registry._layout import (
    PartitionKeys,
    _check_offset,
    _text,
    cluster_partitions_key,
    parse_segment_member,
    partition_index_key,
    partition_keys,
)
from tiered_kafka.retry import is_transient

READ_ATTEMPTS: Final = 3

# -- errors from the client -----------------------------------------------------------------------


def _redis_exceptions() -> Any:
    try:
        import redis.exceptions
    except ImportError:  # a compatible client without redis-py: leave its errors alone
        return None
    return redis.exceptions


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Turn redis-py's errors into registry errors: the transient ones (``tiered_kafka.retry.is_transient``,
    the one list) into RegistryUnavailableError, the others into RegistryError."""
    try:
        yield
    except TieredKafkaError:
        raise
    except Exception as err:
        rx = _redis_exceptions()
        if rx is None or not isinstance(err, rx.RedisError):
            raise
        if is_transient(err):
            raise RegistryUnavailableError(f"{what}: Redis unavailable: {err}") from err
        raise RegistryError(f"{what}: Redis error: {err}") from err


class Store:
    """The keys of one cluster's registry over one redis-py compatible client, and its segment reads."""

    def __init__(self, client: Any, cluster: str, namespace: str) -> None:
        self.client = client
        self.cluster = cluster
        self.namespace = namespace

    def keys(self, topic: str, partition: int) -> PartitionKeys:
        return partition_keys(self.cluster, topic, partition, self.namespace)

    @property
    def partitions_key(self) -> str:
        return cluster_partitions_key(self.cluster, self.namespace)

    @property
    def partition_index_key(self) -> str:
        return partition_index_key(self.cluster, self.namespace)

    def segments(
        self,
        topic: str,
        partition: int,
        *,
        from_offset: int | None = None,
        to_offset: int | None = None,
        limit: int | None = None,
    ) -> list[SegmentEntry]:
        """Segments by first offset (registered range; module doc): from the one holding ``from_offset``
        (or the next after it), through the last one starting at or before ``to_offset``, at most ``limit`` of them."""
        keys = self.keys(topic, partition)
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise RegistryValueError(f"limit must be a non-negative int, got {limit!r}")
        if limit == 0:
            return []
        low = "-inf"
        if from_offset is not None:
            _check_offset("from_offset", from_offset)
            with translated(f"segments of {topic}-{partition}"):
                found = self.client.zrevrangebyscore(keys.segments, from_offset, "-inf", start=0, num=1)
            low = f"({from_offset}"
            if found:
                base, last = parse_segment_member(found[0], key=keys.segments)
                if last >= from_offset:
                    low = str(base)
        high = "+inf" if to_offset is None else str(_check_offset("to_offset", to_offset))
        return self.range(topic, partition, low, high, limit, what=f"segments of {topic}-{partition}")

    def partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition) in the cluster's partition set, sorted (the set may lag; module doc)."""
        with translated(f"partitions of {self.cluster}"):
            names = self.client.smembers(self.partitions_key)
        out = []
        for name in names:
            try:
                out.append(parse_partition_dir_name(_text(name)))
            except InvalidSegmentNameError as err:
                raise MalformedRegistryDataError(f"member {_text(name)!r} is not 'topic-partition'", key=self.partitions_key) from err
        return sorted(out)


    def range(self, topic: str, partition: int, low: str, high: str, limit: int | None, *, what: str) -> list[SegmentEntry]:
        keys = self.keys(topic, partition)
        with translated(what):
            for _ in range(READ_ATTEMPTS):
                if limit is None:
                    members = self.client.zrangebyscore(keys.segments, low, high)
                else:
                    members = self.client.zrangebyscore(keys.segments, low, high, start=0, num=limit)
                entries = self.load(topic, partition, keys, members)
                if entries is not None:
                    return entries
        raise MalformedRegistryDataError("segments listed without their hashes", key=keys.segments)

    def load(self, topic: str, partition: int, keys: PartitionKeys, members: Sequence[Any]) -> list[SegmentEntry] | None:
        """The entries of these members, leaving out segments deleted meanwhile; None: read again
        (a member without its hash is still listed, which only a racing delete-and-re-register explains)."""
        if not members:
            return []
        bases = [parse_segment_member(m, key=keys.segments)[0] for m in members]
        pipe = self.client.pipeline(transaction=False)
        for base in bases:
            pipe.hgetall(keys.segment(base))
        hashes = pipe.execute()
        missing = [m for m, h in zip(members, hashes, strict=True) if not h]
        if missing:
            pipe = self.client.pipeline(transaction=False)
            for m in missing:
                pipe.zscore(keys.segments, m)
            if any(score is not None for score in pipe.execute()):
                return None
        return [
            SegmentEntry.from_fields(topic, partition, h, key=keys.segment(base))
            for base, h in zip(bases, hashes, strict=True)
            if h
        ]
