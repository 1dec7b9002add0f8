"""A cluster's partitions as listings and coverage pages read them: paged, never the whole cluster per request.

The registry keeps a lexically ordered partition index (``tiered_kafka.registry``, "Listings"):
members ``"{topic} {partition:010d}"``, read a page at a time (after a cursor, or from a rank).
Partitions the registry does not know but S3 holds (a bucket in Pinterest's layout: ``s3_listing``)
are merged in from a listing that is refreshed **off the request path**: the first request of a
gateway waits for the first listing (once), later ones are answered from the last listing while a
stale one (older than ``cache.listing_ttl_s``) is refreshed in the background. Of that listing only
the partitions the registry's index lacks are kept (sorted), so a page is the merge of two sorted
reads of at most ``limit`` partitions each: its cost is the page's, whatever the cluster's size.

The cursor (``after``) is the last partition of the previous page, ``"{topic}/{partition}"`` on the
wire (a topic name holds no ``/``); a listing ends when a page comes back shorter than asked
(``next_after`` None). ``complete`` is False when the S3 listing stopped at a bound
(``s3_listing``): partitions may be missing, and the answer says so.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tiered_kafka.registry import Registry, partition_index_member
from tiered_kafka_gateway.caches import BackgroundLoads
from tiered_kafka_gateway.s3_listing import PartitionListing

log = logging.getLogger(__name__)

Partition = tuple[str, int]


@dataclass(frozen=True)
class ListingPage:
    """A page of a cluster's partitions, in (topic, partition) order."""

    partitions: list[Partition]
    next_after: Partition | None  # the cursor of the next page; None: this was the last
    total: int  # partitions in the whole listing (of the topic, when one was asked)
    complete: bool  # False: the S3 listing stopped at its bound
    topic_totals: dict[str, int] = field(default_factory=dict)  # each listed topic's partition count


def format_cursor(partition: Partition) -> str:
    return f"{partition[0]}/{partition[1]}"


def parse_cursor(text: str) -> Partition:
    """A wire cursor ``"{topic}/{partition}"``; ValueError when it is not one."""
    topic, sep, number = text.rpartition("/")
    if not sep or not topic or not number.isdigit():
        raise ValueError(f"cursor {text!r} is not 'topic/partition'")
    return topic, int(number)


class PartitionLister:
    """Paged partition listings of one cluster (module doc)."""

    def __init__(self, registry: Registry, list_s3: Callable[[], PartitionListing], ttl_s: float, loads: BackgroundLoads, name: str) -> None:
        self.registry = registry
        self._list_s3 = list_s3
        self._ttl_s = ttl_s
        self._loads = loads
        self._name = name
        self._lock = threading.Lock()
        self._first = threading.Lock()  # the first listing: one at a time, the others wait for it
        self._listed: tuple[float, list[Partition], bool] | None = None  # (when, S3-only partitions sorted by index member, complete)

    def _refresh(self) -> None:
        listing = self._list_s3()
        if not listing.complete:
            log.warning("the S3 listing of cluster %s stopped at its bound (%d partitions found)", self._name, len(listing.partitions))
        found = sorted(listing.partitions, key=lambda tp: partition_index_member(*tp))
        known = self._registered(found)
        only = [tp for tp, registered in zip(found, known, strict=True) if not registered]
        with self._lock:
            self._listed = (time.monotonic(), only, listing.complete)

    def _registered(self, partitions: list[Partition]) -> list[bool]:
        """Whether the registry's index lists each (``Registry.listed``: pipelined, in the background)."""
        return self.registry.listed(partitions)

    def s3_only(self) -> tuple[list[Partition], bool]:
        """The partitions only S3 knows (sorted) and whether that listing is complete (module doc)."""
        with self._lock:
            current = self._listed
        if current is None:
            with self._first:  # the first request waits for the first listing, once
                with self._lock:
                    current = self._listed
                if current is None:
                    self._refresh()
                    with self._lock:
                        current = self._listed
        elif time.monotonic() - current[0] >= self._ttl_s:
            self._loads.submit(("partition-listing", self._name), self._refresh)
        assert current is not None
        return current[1], current[2]

    def page(self, *, after: Partition | None = None, start: int | None = None, limit: int = 1000, topic: str | None = None) -> ListingPage:
        """Up to ``limit`` partitions after the cursor ``after`` (or from rank ``start``), of ``topic`` or all."""
        only, complete = self.s3_only()
        if topic is not None:
            only = _of_topic(only, topic)
        total = self.registry.partition_count(topic) + len(only)
        if start is not None and only:
            # a rank in the merged listing: read the registry up to it (only with S3-only partitions: a Pinterest-layout bucket)
            merged = sorted(set(self.registry.partitions_page(limit=start + limit, topic=topic)) | set(only), key=lambda tp: partition_index_member(*tp))
            shown = merged[start : start + limit]
        else:
            registered = self.registry.partitions_page(after=after, start=start, limit=limit, topic=topic)
            if after is not None:
                cut = bisect.bisect_right(only, partition_index_member(*after), key=lambda tp: partition_index_member(*tp))
                only = only[cut:]
            shown = sorted(set(registered) | set(only[:limit]), key=lambda tp: partition_index_member(*tp))[:limit]
        everything, _ = self.s3_only()
        totals = {t: total if topic is not None else self.registry.partition_count(t) + len(_of_topic(everything, t)) for t in dict.fromkeys(t for t, _ in shown)}
        return ListingPage(shown, shown[-1] if len(shown) == limit else None, total, complete, totals)


def _of_topic(only: list[Partition], topic: str) -> list[Partition]:
    """The partitions of ``topic`` in a sorted S3-only list (bisect: the topic's run)."""
    low = bisect.bisect_left(only, partition_index_member(topic, 0), key=lambda tp: partition_index_member(*tp))
    out = []
    for tp in only[low:]:
        if tp[0] != topic:
            break
        out.append(tp)
    return out


def topic_map(partitions: list[Partition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return out


