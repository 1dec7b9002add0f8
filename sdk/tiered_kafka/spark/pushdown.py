"""Filter pushdown of a ``tiered-kafka`` batch read: Spark's filters on ``topic``, ``partition``,
``offset`` and ``timestamp`` narrow what is planned, hence fetched (no pyspark import here).

PySpark (4.1+) hands ``DataSourceReader.pushFilters`` the conjuncts of the query's filter as
``pyspark.sql.datasource.Filter`` objects (``EqualTo``, ``GreaterThan``, ``GreaterThanOrEqual``,
``LessThan``, ``LessThanOrEqual``, ``In``, ``IsNull``, ``IsNotNull``, ``Not``, ``EqualNullSafe``,
``StringStartsWith``/``EndsWith``/``Contains``; an ``OR`` is never offered) and keeps evaluating
the ones it gets back. :func:`translate` reads them by class name and attribute, so this module is
pure and unit-tested without Spark.

Rules:

1. **What is used.** ``topic`` ``=``/``IN`` (strings); ``partition`` ``=``/``IN``/``<``/``<=``/``>``/``>=``
   and ``offset`` ``=``/``IN``/``<``/``<=``/``>``/``>=`` (integers, ``bool`` refused);
   ``timestamp`` ``=``/``<``/``<=``/``>``/``>=`` (``datetime`` values). Anything else (another
   column, ``Not``, a ``NULL`` or mistyped literal, ``EqualNullSafe``) is ignored and returned.
2. **What is returned to Spark** (Spark re-applies it to every row): every ``timestamp`` filter,
   every ``IN`` on ``offset`` (only its min and max are used) and every filter not used. Filters on
   ``topic``, ``partition`` and the ``offset`` comparisons are *consumed*: the plan applies them
   exactly (topics and partitions not read; each partition's [start, end) intersected with the
   offset bounds, and the executor drops rows outside [start, end), ``reading`` module doc).
3. **Timestamps.** Kafka timestamps are milliseconds; Spark's ``timestamp`` column is
   microseconds, so a record of t ms is t × 1000 µs. A bound X µs becomes, in ms:
   ``>= X`` → t >= ceil(X / 1000); ``> X`` → t >= floor(X / 1000) + 1;
   ``<= X`` → t <= floor(X / 1000); ``< X`` → t <= ceil(X / 1000) - 1. A ``datetime`` with a time
   zone is converted exactly; a naive one (``timestamp_ntz``) is read as UTC. A record without
   a timestamp (magic 0) has a NULL ``timestamp``, which no comparison keeps.
4. **Timestamps prune at the start, never dropping a matching record.** A partition's read
   starts at the first offset whose timestamp is >= the lower bound (the gateway's
   offsets-for-timestamp, Kafka's ``ListOffsets`` rule over the registry's per-segment max
   timestamps and the batch indexes; Spark's Kafka source does the same for
   ``startingTimestamp``): every record before it is older by definition. No remote record at or
   after the lower bound (offsets-for-timestamp answers none): nothing is read there. The cut is
   kept only when the time-ranges answer (asked after it) shows registered segments from the
   read's start on (its ``earliest_offset`` <= start; retention only raises it): otherwise
   (offsets deleted since they were resolved, a partition known only from an S3 listing) the read
   starts where it was resolved and meets the out-of-range / failOnDataLoss path, logged. A lower
   bound before 1970 cuts nothing (Kafka's ListOffsets sees no record stamped below 0; a stamp
   below -1 is a real one: ``tiered_kafka_agent.local_segments.MinTimestamp``).
5. **Timestamps skip segments, mid-partition too** (:func:`narrow_pieces`). Kafka timestamps are not
   monotonic within a partition (CreateTime is the producer's clock), so the first record newer
   than the upper bound says nothing of where the last match is. The segments do: the agent
   records each segment's exact smallest and largest record timestamps, and the gateway's
   time-ranges endpoint (``tiered_kafka_gateway.routes.time_ranges``) answers the spans of
   segments *proven* to hold no match (their [min, max] misses [lower, upper]). Decision: the
   read is [start, end) minus those spans, one slice per piece left, never an intersection with
   what the gateway says is there: an offset the answer says nothing of (deleted by retention
   since the offsets were resolved, a recorded gap, past the last segment) is read and meets the
   error an unpruned read meets. A segment whose minimum is not exact (registered before the
   agent recorded it exactly, or known only from an S3 listing) is not pruned by its minimum, so
   the read is never unsound, only larger (the endpoint lists them; they are logged).
   Under read_committed with an unknown remote last stable offset, a partition is read as one
   slice (``planning`` rule 4), so the read is the hull of the pieces (first to last). With the
   stable end known, pieces are read apart; a piece's transactions are decided by the markers
   read past its end (``reading``: the executor reads on to the markers), so a marker in a pruned
   segment still decides the records of a kept one (integration test).
6. **``tiered.timestampsOrdered=true``** is the caller's statement that timestamps never decrease
   within a partition (LogAppendTime topics; producers stamping in order): the end is then also
   cut at the first offset whose timestamp is > the upper bound, as Spark's Kafka source takes
   ``endingTimestamp`` (finer than segments, at batch level). Spark still applies the filter, so an
   over-read costs bytes, never rows; a wrong statement loses the out-of-order records past that
   end.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_kafka.client.gateway import GatewayClient

log = logging.getLogger(__name__)
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MICROSECOND = _dt.timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Pushdown:
    """The conjunction of the filters used: topics and partitions kept, offset bounds
    [offset_start, offset_end), timestamp bounds [timestamp_min, timestamp_max] in ms (inclusive).
    ``None`` is no bound."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_min: int = 0
    partition_max: int | None = None
    offset_start: int = 0
    offset_end: int | None = None
    timestamp_min: int | None = None
    timestamp_max: int | None = None

    @property
    def is_noop(self) -> bool:
        return self == Pushdown()

    def keeps(self, topic: str, partition: int) -> bool:
        """Whether rows of ``topic``-``partition`` may pass the filters."""
        if self.topics is not None and topic not in self.topics:
            return False
        if self.partitions is not None and partition not in self.partitions:
            return False
        return partition >= self.partition_min and (self.partition_max is None or partition <= self.partition_max)

    def offsets(self, start: int, end: int) -> tuple[int, int]:
        """[start, end) intersected with the offset bounds (empty: start >= end)."""
        return max(start, self.offset_start), end if self.offset_end is None else min(end, self.offset_end)

    @property
    def timestamps_empty(self) -> bool:
        return self.timestamp_min is not None and self.timestamp_max is not None and self.timestamp_min > self.timestamp_max


def translate(filters: Sequence[Any]) -> tuple[Pushdown, list[Any]]:
    """(what the filters allow, the filters Spark must still apply: rule 2), for ``pushFilters``.
    The returned filters are the very objects given (PySpark matches them by identity)."""
    pushed = Pushdown()
    remaining: list[Any] = []
    for f in filters:
        narrowed, consumed = _one(pushed, f)
        if narrowed is None:
            remaining.append(f)
            continue
        pushed = narrowed
        if not consumed:
            remaining.append(f)
    return pushed, remaining


def _one(pushed: Pushdown, f: Any) -> tuple[Pushdown | None, bool]:
    """(``pushed`` narrowed by ``f``, whether ``f`` is applied exactly); (None, False): not used."""
    kind = type(f).__name__
    attribute = getattr(f, "attribute", None)
    if attribute is None or len(attribute) != 1:
        return None, False
    column = attribute[0]
    value = getattr(f, "value", None)
    if column == "topic":
        values = _values(kind, value, str)
        if values is None:
            return None, False
        topics = values if pushed.topics is None else pushed.topics & values
        return replace(pushed, topics=topics), True
    if column == "partition":
        return _integer_bounds(pushed, kind, value, "partition")
    if column == "offset":
        return _integer_bounds(pushed, kind, value, "offset")
    if column == "timestamp":
        return _timestamp_bounds(pushed, kind, value), False
    return None, False


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _values(kind: str, value: Any, of: type) -> frozenset[Any] | None:
    check = _is_int if of is int else (lambda v: isinstance(v, of))
    if kind == "EqualTo" and check(value):
        return frozenset((value,))
    if kind == "In" and isinstance(value, (tuple, list)) and all(check(v) for v in value):
        return frozenset(value)
    return None


def _integer_bounds(pushed: Pushdown, kind: str, value: Any, column: str) -> tuple[Pushdown | None, bool]:
    """Bounds [low, high] (inclusive) on ``partition`` or ``offset``."""
    values = _values(kind, value, int)
    if values is not None:
        if column == "partition":
            return replace(pushed, partitions=values if pushed.partitions is None else pushed.partitions & values), True
        low, high = (min(values), max(values)) if values else (1, 0)
        return _offset_bounds(pushed, low, high), kind == "EqualTo"
    if not _is_int(value):
        return None, False
    low, high = {
        "GreaterThan": (value + 1, None),
        "GreaterThanOrEqual": (value, None),
        "LessThan": (None, value - 1),
        "LessThanOrEqual": (None, value),
    }.get(kind, (None, None))
    if low is None and high is None:
        return None, False
    if column == "partition":
        return replace(
            pushed,
            partition_min=max(pushed.partition_min, low if low is not None else 0),
            partition_max=high if pushed.partition_max is None else pushed.partition_max if high is None else min(high, pushed.partition_max),
        ), True
    return _offset_bounds(pushed, low, high), True


def _offset_bounds(pushed: Pushdown, low: int | None, high: int | None) -> Pushdown:
    start = pushed.offset_start if low is None else max(pushed.offset_start, low)
    end = pushed.offset_end if high is None else (high + 1 if pushed.offset_end is None else min(pushed.offset_end, high + 1))
    return replace(pushed, offset_start=max(0, start), offset_end=None if end is None else max(0, end))


def _timestamp_bounds(pushed: Pushdown, kind: str, value: Any) -> Pushdown | None:
    """Rule 3: the filter's bound in ms, inclusive."""
    if not isinstance(value, _dt.datetime):
        return None
    micros = epoch_micros(value)
    low = high = None
    if kind == "EqualTo":
        if micros % 1000:
            low, high = 1, 0  # no millisecond record equals it
        else:
            low = high = micros // 1000
    elif kind == "GreaterThanOrEqual":
        low = -((-micros) // 1000)  # ceil
    elif kind == "GreaterThan":
        low = micros // 1000 + 1
    elif kind == "LessThanOrEqual":
        high = micros // 1000
    elif kind == "LessThan":
        high = -((-micros) // 1000) - 1
    else:
        return None
    return replace(
        pushed,
        timestamp_min=pushed.timestamp_min if low is None else low if pushed.timestamp_min is None else max(low, pushed.timestamp_min),
        timestamp_max=pushed.timestamp_max if high is None else high if pushed.timestamp_max is None else min(high, pushed.timestamp_max),
    )


def epoch_micros(value: _dt.datetime) -> int:
    """Microseconds since the epoch, exactly (a naive ``datetime`` is UTC: rule 3)."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=_dt.UTC)
    return (aware - EPOCH) // _MICROSECOND


def described(pushed: Pushdown) -> Iterable[str]:
    """The bounds, for logs and ``__repr__``."""
    if pushed.topics is not None:
        yield f"topic in {sorted(pushed.topics)}"
    if pushed.partitions is not None:
        yield f"partition in {sorted(pushed.partitions)}"
    if pushed.partition_min or pushed.partition_max is not None:
        yield f"partition in [{pushed.partition_min}, {pushed.partition_max}]"
    if pushed.offset_start or pushed.offset_end is not None:
        yield f"offset in [{pushed.offset_start}, {pushed.offset_end})"
    if pushed.timestamp_min is not None or pushed.timestamp_max is not None:
        yield f"timestamp ms in [{pushed.timestamp_min}, {pushed.timestamp_max}]"


def narrow(pushed: Pushdown, client: GatewayClient, topic: str, partition: int, start: int, end: int, *, ordered: bool = False) -> tuple[int, int]:
    """A partition's [start, end) to read under ``pushed`` (rules 2 and 4); start >= end: nothing.
    Asks the gateway's offsets-for-timestamp for a lower timestamp bound (one at or after 1970:
    Kafka's rule sees no record stamped before, rule 4) and, when ``ordered``
    (``tiered.timestampsOrdered``), for one past the upper bound. The start cut is proven only
    over the segments the gateway had: :func:`narrow_pieces` checks it."""
    if not pushed.keeps(topic, partition) or pushed.timestamps_empty:
        return start, start
    start, end = pushed.offsets(start, end)
    if start < end and pushed.timestamp_min is not None and pushed.timestamp_min >= 0:
        first = client.offset_for_timestamp(topic, partition, pushed.timestamp_min)
        start = end if first is None else max(start, first)  # None: no remote record at or after the lower bound
    if start < end and ordered and pushed.timestamp_max is not None and pushed.timestamp_max >= -1:
        after = client.offset_for_timestamp(topic, partition, pushed.timestamp_max + 1)
        if after is not None:
            end = min(end, after)
    return start, max(start, end)


MIN_TIMESTAMP = -(2**63)
MAX_TIMESTAMP = 2**63 - 1


def narrow_pieces(
    pushed: Pushdown, client: GatewayClient, topic: str, partition: int, start: int, end: int, *, ordered: bool = False, whole: bool = False
) -> list[tuple[int, int]]:
    """The [start, end) pieces of a partition to read under ``pushed`` (rules 2, 4, 5 and 6), in
    offset order, none empty; ``whole``: at most one piece, the hull (rule 5, read_committed).
    The pieces are [start, end) minus what is *proven* to hold no match: offsets before the start
    cut (when the time-ranges answer shows it was computed over every segment from ``start`` on)
    and the pruned spans; every other offset is read, and meets the errors an unpruned read meets."""
    if not pushed.keeps(topic, partition) or pushed.timestamps_empty:
        return []
    start, end = pushed.offsets(start, end)
    if start >= end:
        return []
    if pushed.timestamp_min is None and pushed.timestamp_max is None:
        return [(start, end)]
    cut_start, cut_end = narrow(pushed, client, topic, partition, start, end, ordered=ordered)
    low = MIN_TIMESTAMP if pushed.timestamp_min is None else pushed.timestamp_min
    high = MAX_TIMESTAMP if pushed.timestamp_max is None else pushed.timestamp_max
    pruned, inexact, earliest = client.time_ranges(topic, partition, low, high)
    if cut_start > start and (earliest is None or earliest > start):
        log.warning(
            "tiered-kafka: %s-%d: the start cut to %d is not proven (remote data now begins at %s, the read at %d): reading from %d",
            topic, partition, cut_start, earliest, start, start,
        )  # fmt: skip
        cut_start = start  # offsets deleted since they were resolved, or a partition known only from a listing: read, not skipped
    if inexact:
        log.info("tiered-kafka: %s-%d: %d segment(s) kept without an exact minimum timestamp (registered before it was recorded)", topic, partition, len(inexact))
    pieces = subtract(cut_start, cut_end, pruned)
    if whole and pieces:
        return [(pieces[0][0], pieces[-1][1])]
    return pieces


def subtract(start: int, end: int, spans: Iterable[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """[start, end) minus ``spans`` ((first, last inclusive, bytes), in offset order): the pieces left, none empty."""
    pieces: list[tuple[int, int]] = []
    cursor = start
    for first, last, _size in spans:
        if first >= end:
            break
        if last < cursor:
            continue
        if first > cursor:
            pieces.append((cursor, first))
        cursor = last + 1
    if cursor < end:
        pieces.append((cursor, end))
    return pieces
