"""The partitions of one cluster's keyspace found by listing S3 (buckets in Pinterest's layout).

A bucket written by Pinterest's uploader has no registry: its partitions are the
``{topic}-{partition}/`` directories under ``{prefix}/{entropy}/{cluster}/`` (``tiered_kafka.keyspace``).
They are found with delimited LIST calls (``ListObjectsV2`` with ``Delimiter='/'``: one call returns
up to 1,000 directories, never the objects inside them):

1. with prefix entropy (N bits), the entropy directories that exist under ``{prefix}/`` (at most
   2**N, usually fewer: only those some partition hashed to);
2. under each, ``{cluster}/``'s directories; a directory counts when its name parses as
   ``topic-partition`` and the partition's own entropy names that directory (another keyspace's
   directory, or a stray one, is skipped).

The work is bounded: at most :data:`MAX_LISTING_REQUESTS` LIST calls and
:data:`MAX_LISTED_PARTITIONS` partitions; a listing cut short says so (``complete`` False) rather
than passing for the whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.format.segment_names import parse_partition_dir_name
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_gateway.errors import ErrorCode, GatewayError

MAX_LISTING_REQUESTS = 1024
MAX_LISTED_PARTITIONS = 100_000


@dataclass(frozen=True)
class PartitionListing:
    partitions: set[tuple[str, int]]
    complete: bool  # False: a bound stopped the listing


class _Bounded(Exception):
    """A listing reached one of its bounds."""


def list_partitions(s3: Any, bucket: str, keyspace: Keyspace) -> PartitionListing:
    """(topic, partition) of every partition directory of ``keyspace`` in ``bucket``.

    Raises ``GatewayError`` 503 ``storage_unavailable`` when S3 fails.
    """
    requests = 0

    def directories(prefix: str) -> Iterator[str]:
        nonlocal requests
        token: str | None = None
        while True:
            if requests >= MAX_LISTING_REQUESTS:
                raise _Bounded
            requests += 1
            params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
            if token:
                params["ContinuationToken"] = token
            page = s3.list_objects_v2(**params)
            for common in page.get("CommonPrefixes", ()):
                yield common["Prefix"][len(prefix) : -1]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    base = "/".join(p for p in keyspace.prefix.split("/") if p)
    base = f"{base}/" if base else ""
    found: set[tuple[str, int]] = set()
    try:
        if keyspace.entropy_bits:
            bits = keyspace.entropy_bits
            cluster_prefixes = [f"{base}{d}/{keyspace.cluster}/" for d in directories(base) if len(d) == bits and set(d) <= {"0", "1"}]
        else:
            cluster_prefixes = [f"{base}{keyspace.cluster}/"]
        for cluster_prefix in cluster_prefixes:
            for name in directories(cluster_prefix):
                try:
                    topic, partition = parse_partition_dir_name(name)
                except InvalidSegmentNameError:
                    continue
                if f"{cluster_prefix}{name}/" != keyspace.partition_prefix(topic, partition):
                    continue
                found.add((topic, partition))
                if len(found) >= MAX_LISTED_PARTITIONS:
                    raise _Bounded
    except _Bounded:
        return PartitionListing(found, complete=False)
    except (ClientError, BotoCoreError) as err:
        raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 listing of cluster {keyspace.cluster}'s partitions failed: {err}") from err
    return PartitionListing(found, complete=True)
