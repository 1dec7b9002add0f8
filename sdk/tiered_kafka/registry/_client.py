"""The :class:`Registry` client: the operations over a redis-py compatible client."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Union

from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.format.segment_names import parse_partition_dir_name, partition_dir_name
from tiered_kafka.registry import _scripts
from tiered_kafka.registry._entries import Coverage, CoverageStart, Gap, PartitionInfo, PartitionSummary, SegmentEntry, _gap_details, _parse_gap
from tiered_kafka.registry._migrate import MigrationReport, migrate
from tiered_kafka.registry._paged import PagedReads
from tiered_kafka.registry._store import READ_ATTEMPTS, Store, _redis_exceptions, translated as _translated
from tiered_kafka.registry._replicated import REPLICA_WAIT_MS, run_acknowledged
from tiered_kafka.registry._errors import (
    MalformedRegistryDataError,
    RegistryConflictError,
    RegistryError,
    RegistryUnavailableError,
    RegistryValueError,
    SegmentOverlapError,
)
from tiered_kafka.registry._layout import (
    DEFAULT_NAMESPACE,
    PartitionKeys,
    _check_names,
    _check_offset,
    _check_topic_partition,
    _decode_mapping,
    _int_field,
    _text,
    gap_member,
    partition_index_member,
    parse_gap_member,
    parse_segment_member,
    time_member_tail,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # the SDK does not depend on redis; only type checkers look here
    import redis

    RedisClient = Union[redis.Redis, redis.RedisCluster]
else:
    RedisClient = Any

# -- the registry ---------------------------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Registry:
    """The offset-range registry of one Kafka cluster, over a redis-py compatible client.

    ``client`` is a ``redis.Redis`` or ``redis.RedisCluster`` (or anything with the same command
    methods, ``register_script`` and ``pipeline``); ``decode_responses`` may be on or off.
    ``clock`` gives the milliseconds written as ``updated_ms`` and ``detected_ms``. On a Redis
    Cluster each write script (registration, deletion, gap, coverage start, expiry, files, clear)
    waits up to ``replica_wait_ms`` for a replica's acknowledgement (``_replicated``; 0 turns that off).
    Thread-safe as far as the client is (redis-py clients are).
    """

    def __init__(
        self,
        client: RedisClient,
        cluster: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        clock: Callable[[], int] = _now_ms,
        replica_wait_ms: int = REPLICA_WAIT_MS,
    ) -> None:
        _check_names(cluster, namespace)
        self.client = client
        self.cluster = cluster
        self.namespace = namespace
        self._store = Store(client, cluster, namespace)
        self._paged = PagedReads(self._store)
        self._clock = clock
        self.replica_wait_ms = replica_wait_ms  # on a Redis Cluster: WAIT 1 <ms> after each write script; 0: none
        self._register = client.register_script(_scripts._REGISTER_LUA)
        self._delete = client.register_script(_scripts._DELETE_LUA)
        self._gap = client.register_script(_scripts._GAP_LUA)
        self._clear = client.register_script(_scripts._CLEAR_LUA)
        self._coverage_start = client.register_script(_scripts._COVERAGE_START_LUA)
        self._raise = client.register_script(_scripts._RAISE_LUA)
        self._set_files = client.register_script(_scripts._SET_FILES_LUA)
        self._index = client.register_script(_scripts._INDEX_LUA)
        self._rewrite = client.register_script(_scripts._REWRITE_LUA)

    def __repr__(self) -> str:
        return f"Registry(cluster={self.cluster!r}, namespace={self.namespace!r})"

    def _write(self, script: Any, keys: Sequence[str], args: Sequence[str]) -> Any:
        """Run a write script; on a Redis Cluster, acknowledged by a replica (``_replicated``): every
        write script goes through here, so none is lost with a master that fails over."""
        return run_acknowledged(self.client, script, keys, args, self.replica_wait_ms)

    # -- keys --------------------------------------------------------------------------------------
    def keys(self, topic: str, partition: int) -> PartitionKeys:
        return self._store.keys(topic, partition)

    @property
    def partitions_key(self) -> str:
        return self._store.partitions_key

    @property
    def partition_index_key(self) -> str:
        return self._store.partition_index_key

    # -- writes ------------------------------------------------------------------------------------
    def register(self, entry: SegmentEntry) -> bool:
        """Register ``entry``: True if added, False if this very segment was registered already.

        Raises :class:`RegistryConflictError` (same base offset, other last offset, checksum or
        size) or :class:`SegmentOverlapError` (range overlaps another segment). Afterwards, also
        after a no-op, the partition is added to the cluster's partition set. The entry's
        ``sparse_index`` is not stored (layout 2, module doc).
        """
        keys, args = self._register_call(entry)
        with _translated(f"register {entry.topic}-{entry.partition} segment {entry.base_offset}"):
            # on a Redis Cluster, acknowledged by a replica before it counts (``_replicated``)
            reply = self._write(self._register, keys, args)
        added = self._registered(entry, reply)
        self.ensure_listed(entry.topic, entry.partition)
        return added

    def register_many(self, entries: Iterable[SegmentEntry], *, batch: int = 1000, progress: Callable[[int], None] | None = None) -> list[bool]:
        """Register ``entries`` in order, ``batch`` registration scripts to a pipelined round trip
        (and one listing of each partition a batch touched): :meth:`register`'s result for each.

        The first conflict or overlap is raised once its batch has run (the entries before it, and
        the others of that batch, are registered; registering them again is a no-op). ``progress``
        is called with the number of entries done after each batch. On a Redis Cluster each master's
        share of a batch is acknowledged by a replica with one WAIT at its end (``_pipelined``)."""
        if batch < 1:
            raise RegistryValueError(f"batch must be >= 1, got {batch!r}")
        out: list[bool] = []
        pending: list[SegmentEntry] = []

        def flush() -> None:
            calls = [self._register_call(e) for e in pending]
            with _translated(f"register {len(pending)} segments"):
                replies = self._pipelined(self._register, calls)
                pipe = self.client.pipeline(transaction=False)
                for topic, partition in dict.fromkeys((e.topic, e.partition) for e in pending):
                    self._list_in(pipe, topic, partition)
                pipe.execute()
            error: Exception | None = None
            for e, reply in zip(pending, replies, strict=True):
                try:
                    out.append(self._registered(e, reply))
                except (RegistryConflictError, SegmentOverlapError) as err:
                    out.append(False)
                    error = error or err
            pending.clear()
            if progress is not None:
                progress(len(out))
            if error is not None:
                raise error

        for entry in entries:
            pending.append(entry)
            if len(pending) >= batch:
                flush()
        if pending:
            flush()
        return out

    def _pipelined(self, script: Any, calls: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[Any]:
        """``script`` once per (keys, args) in one pipelined round trip (EVALSHA; loaded first when a
        node lacks it). Redis errors in replies are raised. On a Redis Cluster (whose pipelines refuse
        scripts) one pipeline per master, on that master's own connection, ending with one ``WAIT 1``
        when the slot has a replica (the batch acknowledged as ``_replicated`` acknowledges a write); a call
        whose slot moved meanwhile is handed to the cluster client, which follows it."""
        node_of = getattr(self.client, "get_node_from_key", None)
        if node_of is None:
            return self._pipelined_on(self.client, script, calls)
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, (keys, _) in enumerate(calls):
            node = node_of(keys[0])
            groups.setdefault(node.name, (node, []))[1].append(i)
        replies: list[Any] = [None] * len(calls)
        rx = _redis_exceptions()
        for node, indexes in groups.values():
            # the batch acknowledged by a replica with one WAIT at its end, on the same connection (``_replicated``)
            wait_ms = self.replica_wait_ms if self.replica_wait_ms > 0 and node_of(calls[indexes[0]][0][0], replica=True) is not None else 0
            try:
                done = self._pipelined_on(self.client.get_redis_connection(node), script, [calls[i] for i in indexes], wait_ms, node.name)
            except (rx.ConnectionError, rx.TimeoutError, rx.MovedError, rx.AskError, rx.TryAgainError, rx.ClusterDownError):
                done = [script(keys=calls[i][0], args=calls[i][1]) for i in indexes]
            for i, reply in zip(indexes, done, strict=True):
                replies[i] = reply
        return replies

    @staticmethod
    def _pipelined_on(client: Any, script: Any, calls: Sequence[tuple[Sequence[str], Sequence[str]]], wait_ms: int = 0, where: str = "") -> list[Any]:
        for _ in range(2):
            pipe = client.pipeline(transaction=False)
            for keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            if wait_ms > 0:
                pipe.execute_command("WAIT", 1, wait_ms)
            try:
                replies = list(pipe.execute())
                if wait_ms > 0 and int(replies.pop()) < 1:
                    log.warning("no replica of %s acknowledged %d registry writes within %d ms: they are on the master only", where, len(calls), wait_ms)
                return replies
            except Exception as err:
                rx = _redis_exceptions()
                if rx is None or not isinstance(err, rx.NoScriptError):
                    raise
                client.script_load(script.script)
        raise RegistryError("the registry's script could not be loaded")

    def _register_call(self, entry: SegmentEntry) -> tuple[list[str], list[str]]:
        keys = self.keys(entry.topic, entry.partition)
        flat = [part for item in entry.to_fields(sparse_index=False).items() for part in item]  # STORED_SEGMENT_FIELDS
        args = [
            entry.member,
            str(entry.first),
            str(entry.last_offset),
            str(entry.size),
            entry.checksum,
            str(self._clock()),
            str(entry.last_offset + 1),
            str(entry.base_offset),
            str(entry.max_timestamp),
            str(max(entry.records_in_range, 0)),
            time_member_tail(entry),
            *flat,
        ]
        return [keys.segments, keys.segment(entry.first), keys.info, keys.coverage, keys.times], args

    def _registered(self, entry: SegmentEntry, reply: Any) -> bool:
        """The register script's ``reply`` as :meth:`register` answers it (raising its errors)."""
        keys = self.keys(entry.topic, entry.partition)
        status = _text(reply[0])
        if status == "overlap":
            other = parse_segment_member(reply[1], key=keys.segments)
            raise SegmentOverlapError(entry.topic, entry.partition, (entry.first, entry.last_offset), other)
        if status == "conflict":
            existing_range = parse_segment_member(reply[1], key=keys.segments)
            try:
                existing: SegmentEntry | None = SegmentEntry.from_fields(
                    entry.topic, entry.partition, reply[2:], key=keys.segment(entry.first)
                )
            except MalformedRegistryDataError:
                existing = None
            raise RegistryConflictError(entry, existing, existing_range)
        if status not in ("registered", "noop"):
            raise MalformedRegistryDataError(f"unexpected reply {reply!r} from the register script", key=keys.segments)
        return status == "registered"

    def ensure_listed(self, topic: str, partition: int) -> None:
        """Add the partition to the cluster's partition set and partition index (SADD, ZADD; idempotent)."""
        name = _check_topic_partition(topic, partition)
        with _translated(f"list {name}"):
            pipe = self.client.pipeline(transaction=False)
            self._list_in(pipe, topic, partition)
            pipe.execute()

    def _list_in(self, pipe: Any, topic: str, partition: int) -> None:
        """Queue the partition's listing on ``pipe``: the partitions SET and the partition index (one slot)."""
        pipe.sadd(self.partitions_key, partition_dir_name(topic, partition))
        pipe.zadd(self.partition_index_key, {partition_index_member(topic, partition): 0})

    def record_gap(self, topic: str, partition: int, start: int, end: int, reason: str, *, detected_ms: int | None = None) -> bool:
        """Record offsets [start, end] as missing remotely for good; False if that range was recorded already."""
        keys = self.keys(topic, partition)
        _check_offset("gap start", start)
        _check_offset("gap end", end)
        if end < start:
            raise RegistryValueError(f"gap end {end} is below its start {start}")
        if not isinstance(reason, str) or not reason:
            raise RegistryValueError(f"gap reason must be a non-empty str, got {reason!r}")
        detected = self._clock() if detected_ms is None else detected_ms
        member = gap_member(start, end)
        with _translated(f"record gap {start}..{end} of {topic}-{partition}"):
            added = self._write(
                self._gap, [keys.gaps, keys.gap_details, keys.coverage], [member, str(start), _gap_details(reason, detected), str(end + 1)]
            )
        self.ensure_listed(topic, partition)
        return bool(int(added))

    def add_files(self, entry: SegmentEntry, kinds: Iterable[str], *, sparse_index: bytes | None = None) -> bool:
        """Add file kinds uploaded after registration (a backfilled batch index) to ``entry``'s
        ``files``. ``sparse_index`` is checked and not stored (layout 2 keeps no sparse index in
        Redis: module doc; the parameter stays for callers).

        Only while the registry still holds this very segment (same checksum); returns False when
        it does not (deleted by retention, or replaced). Idempotent."""
        added = dataclasses.replace(entry, files=(*entry.files, *kinds), sparse_index=sparse_index)  # validated, canonical order
        keys = self.keys(entry.topic, entry.partition)
        with _translated(f"set the files of {entry.topic}-{entry.partition} segment {entry.base_offset}"):
            done = self._write(self._set_files, [keys.segment(entry.first)], [entry.checksum, ",".join(added.files), ""])
        return bool(int(done))

    def delete_segment(self, topic: str, partition: int, first_offset: int) -> SegmentEntry | None:
        """Remove the segment registered from this offset (its ``first_offset``: the base offset unless
        it was registered from a later one); returns what was removed, or None if nothing was.

        The partition hash is recomputed (see the module doc for an emptied partition) and gaps that
        retention has moved past are forgotten. Deleting the oldest segment (what remote retention
        does) raises the coverage's ``expired_until`` to the new earliest offset.
        """
        keys = self.keys(topic, partition)
        what = f"delete {topic}-{partition} segment {first_offset}"
        with _translated(what):
            reply = self._write(
                self._delete,
                [keys.segments, keys.segment(first_offset), keys.info, keys.gaps, keys.gap_details, keys.coverage, keys.times],
                [str(first_offset), str(self._clock())],
            )
        if not reply:
            return None
        if len(reply) == 1:  # the member had no hash (never written by this module): removed all the same
            return None
        return SegmentEntry.from_fields(topic, partition, reply[1:], key=keys.segment(first_offset))

    def set_coverage_start(self, topic: str, partition: int, offset: int, *, observed_ms: int | None = None) -> CoverageStart:
        """Record where coverage of the partition begins, unless a start is recorded already.

        Atomic: of concurrent callers, the first wins and every caller gets the stored start back
        (compare it with ``offset`` to know whether this call set it). The partition is then
        listed (:meth:`ensure_listed`), so a partition with only a coverage start is known.
        """
        keys = self.keys(topic, partition)
        start = CoverageStart(offset, self._clock() if observed_ms is None else observed_ms)
        with _translated(f"set coverage start of {topic}-{partition}"):
            reply = self._write(self._coverage_start, [keys.coverage], [str(start.offset), str(start.observed_ms)])
        stored = _coverage_start_from(reply, keys.coverage)
        self.ensure_listed(topic, partition)
        return stored

    def record_expired(self, topic: str, partition: int, until: int) -> None:
        """Record that offsets below ``until`` were deleted by remote retention (monotonic).

        :meth:`delete_segment` does this by itself; rebuild uses it to restore the mark."""
        keys = self.keys(topic, partition)
        _check_offset("expired_until", until)
        with _translated(f"record expiry of {topic}-{partition}"):
            self._write(self._raise, [keys.coverage], ["expired_until", str(until)])

    def clear_partition(self, topic: str, partition: int) -> int:
        """Delete every key of the partition (segments, info, gaps, coverage); returns how many segments there were.

        Used by rebuild. Atomic within the partition; the partition is then removed from the cluster's
        partition set (a separate step).
        """
        return self.clear_partitions([(topic, partition)])[0]

    def clear_partitions(self, partitions: Sequence[tuple[str, int]]) -> list[int]:
        """:meth:`clear_partition` of each partition, pipelined (rebuild): one round trip reads their
        segment lists, one runs their clear scripts, one unlists them; a partition written to between
        the read and its script is read and cleared again. On a Redis Cluster each master's batch is
        acknowledged by a replica with one WAIT at its end (``_pipelined``, ``_replicated``)."""
        out: list[int] = [-1] * len(partitions)
        todo = list(range(len(partitions)))
        with _translated(f"clear {len(partitions)} partitions"):
            for _ in range(100):
                if not todo:
                    break
                all_keys = [self.keys(*partitions[i]) for i in todo]
                pipe = self.client.pipeline(transaction=False)
                for keys in all_keys:
                    pipe.zrange(keys.segments, 0, -1)
                calls = []
                for keys, found in zip(all_keys, pipe.execute(), strict=True):
                    members = [_text(m) for m in found]
                    seg_keys = [keys.segment(parse_segment_member(m, key=keys.segments)[0]) for m in members]
                    calls.append(([keys.segments, keys.info, keys.gaps, keys.gap_details, keys.coverage, keys.times, *seg_keys], members))
                counts = [int(c) for c in self._pipelined(self._clear, calls)]
                pipe = self.client.pipeline(transaction=False)
                for i, count in zip(todo, counts, strict=True):
                    if count >= 0:
                        out[i] = count
                        pipe.srem(self.partitions_key, partition_dir_name(*partitions[i]))
                        pipe.zrem(self.partition_index_key, partition_index_member(*partitions[i]))
                pipe.execute()
                todo = [i for i, count in zip(todo, counts, strict=True) if count < 0]
        if todo:
            raise RegistryUnavailableError(f"clear {partition_dir_name(*partitions[todo[0]])}: the partition kept changing under concurrent writes")
        return out

    def migrate(self, *, batch: int = 1000, progress: Callable[[int, int], None] | None = None) -> MigrationReport:
        """Migrate the registry in place to layout 2 (``_migrate``; resumable: run it again)."""
        return migrate(self, batch=batch, progress=progress)

    # -- reads -------------------------------------------------------------------------------------
    def find(self, topic: str, partition: int, offset: int) -> SegmentEntry | None:
        """The segment whose registered range [first_offset, last_offset] holds ``offset``; None in a gap or outside."""
        keys = self.keys(topic, partition)
        _check_offset("offset", offset)
        with _translated(f"find {topic}-{partition} offset {offset}"):
            for _ in range(READ_ATTEMPTS):
                found = self.client.zrevrangebyscore(keys.segments, offset, "-inf", start=0, num=1)
                if not found:
                    return None
                base, last = parse_segment_member(found[0], key=keys.segments)
                if last < offset:
                    return None
                entries = self._store.load(topic, partition, keys, [found[0]])
                if entries is not None:
                    return entries[0] if entries else None
        raise MalformedRegistryDataError("segment listed without its hash", key=keys.segments)

    def next_segment(self, topic: str, partition: int, offset: int) -> SegmentEntry | None:
        """The first segment with first_offset > ``offset`` (to read on past a gap); None if none.

        ``offset`` may be -1: the partition's first segment."""
        _check_offset("offset", offset, minimum=-1)
        entries = self._store.range(topic, partition, f"({offset}", "+inf", 1, what=f"next segment of {topic}-{partition} after {offset}")
        return entries[0] if entries else None

    def segments(self, topic: str, partition: int, *, from_offset: int | None = None, to_offset: int | None = None, limit: int | None = None) -> list[SegmentEntry]:
        """Segments by first offset (registered range; module doc): from the one holding ``from_offset``
        (or the next after it), through the last one starting at or before ``to_offset``, at most ``limit`` of them."""
        return self._store.segments(topic, partition, from_offset=from_offset, to_offset=to_offset, limit=limit)

    def partition_info(self, topic: str, partition: int) -> PartitionInfo | None:
        """The partition's extent, or None if nothing was ever registered for it."""
        keys = self.keys(topic, partition)
        with _translated(f"info of {topic}-{partition}"):
            fields = self.client.hgetall(keys.info)
        return PartitionInfo.from_fields(fields, key=keys.info) if fields else None

    def gaps(self, topic: str, partition: int) -> list[Gap]:
        """The partition's recorded gaps, by start offset."""
        keys = self.keys(topic, partition)
        with _translated(f"gaps of {topic}-{partition}"):
            details = self.client.hgetall(keys.gap_details)
        gaps = [_parse_gap(m, d, keys.gap_details) for m, d in _decode_mapping(details, keys.gap_details).items()]
        return sorted(gaps, key=lambda g: (g.start_offset, g.end_offset))

    def coverage_start(self, topic: str, partition: int) -> CoverageStart | None:
        """The partition's coverage start, or None when none was recorded."""
        keys = self.keys(topic, partition)
        with _translated(f"coverage start of {topic}-{partition}"):
            reply = self.client.hmget(keys.coverage, ["start_offset", "observed_ms"])
        return None if reply[0] is None else _coverage_start_from(reply, keys.coverage)

    def coverage(self, topic: str, partition: int) -> Coverage:
        """The partition's coverage marks (:class:`Coverage`).

        ``next_offset`` also accounts for segments and gaps registered before the mark existed."""
        keys = self.keys(topic, partition)
        with _translated(f"coverage of {topic}-{partition}"):
            fields = _decode_mapping(self.client.hgetall(keys.coverage), keys.coverage)
            last_gap = self.client.zrevrange(keys.gaps, 0, 0)
            last_segment = self.client.zrevrange(keys.segments, 0, 0)
        start = _coverage_start_from([fields.get("start_offset"), fields.get("observed_ms")], keys.coverage) if "start_offset" in fields else None
        marks = {name: _int_field(fields, name, keys.coverage) if name in fields else -1 for name in ("next_offset", "expired_until")}
        ends = [parse_gap_member(m, key=keys.gaps)[1] + 1 for m in last_gap] + [parse_segment_member(m, key=keys.segments)[1] + 1 for m in last_segment]
        return Coverage(start, max([marks["next_offset"], *ends]), marks["expired_until"])

    def partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition) in the cluster's partition set, sorted (the set may lag; module doc)."""
        return self._store.partitions()

    def topics(self) -> dict[str, list[int]]:
        """Topic → sorted partitions, from :meth:`partitions`."""
        out: dict[str, list[int]] = {}
        for topic, partition in self.partitions():
            out.setdefault(topic, []).append(partition)
        return out

    def discover_partitions(self) -> list[tuple[str, int]]:
        """The partitions that have an ``info``, ``gaps`` or ``coverage`` key, found by SCAN (slow:
        every key is visited).

        For repair jobs only, to re-add partitions the partition set missed (:meth:`ensure_listed`).
        """
        prefix = f"{self.namespace}:{{{self.cluster}/"
        found = set()
        with _translated(f"scan {self.cluster}"):
            for suffix in ("}:info", "}:gaps", "}:coverage"):
                pattern = f"{_glob_escape(self.namespace)}:{{{_glob_escape(self.cluster)}/*{_glob_escape(suffix)}"
                for raw in self.client.scan_iter(match=pattern, count=1000):
                    key = _text(raw)
                    if key.startswith(prefix) and key.endswith(suffix):
                        with contextlib.suppress(InvalidSegmentNameError):
                            found.add(parse_partition_dir_name(key[len(prefix) : -len(suffix)]))
        return sorted(found)

    def dump(self, topics: Iterable[str] | str | None = None, *, include_gaps: bool = True, include_updated_ms: bool = False) -> dict[str, Any]:
        """A canonical, comparable (and JSON-ready) dump of what is registered for the cluster.

        ``{"cluster": C, "partitions": {"T-P": {"info": {...} | None, "segments": [{...}, ...],
        "gaps": [{...}, ...], "coverage": {...}}}}`` for the partitions of the partition set
        (optionally only those of ``topics``), by (topic, partition); segments by base offset, gaps
        by start. ``updated_ms`` (when the registry was last written, not a fact about the data) is
        left out unless asked for; ``include_gaps=False`` leaves out the gaps and the coverage
        (whose ``next_offset`` the gaps move).
        """
        wanted = None if topics is None else {topics} if isinstance(topics, str) else set(topics)
        partitions: dict[str, Any] = {}
        for topic, partition in self.partitions():
            if wanted is not None and topic not in wanted:
                continue
            info = self.partition_info(topic, partition)
            item: dict[str, Any] = {
                "info": None if info is None else info.to_dict(include_updated_ms=include_updated_ms),
                "segments": [e.to_dict() for e in self.segments(topic, partition)],
            }
            if include_gaps:
                item["gaps"] = [g.to_dict() for g in self.gaps(topic, partition)]
                item["coverage"] = self.coverage(topic, partition).to_dict()
            partitions[partition_dir_name(topic, partition)] = item
        return {"cluster": self.cluster, "partitions": partitions}
    # -- paged reads (``_paged``) -------------------------------------------------------------------
    def summaries(self, partitions: Sequence[tuple[str, int]]) -> list[PartitionSummary | None]:
        return self._paged.summaries(partitions)

    def summary(self, topic: str, partition: int) -> PartitionSummary | None:
        return self._paged.summary(topic, partition)

    def segment_at_time(self, topic: str, partition: int, timestamp: int) -> SegmentEntry | None:
        return self._paged.segment_at_time(topic, partition, timestamp)

    def ranges_before_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        return self._paged.ranges_before_time(topic, partition, timestamp)

    def ranges_after_time(self, topic: str, partition: int, timestamp: int) -> list[tuple[int, int, int]]:
        return self._paged.ranges_after_time(topic, partition, timestamp)

    def segments_page(self, topic: str, partition: int, start: int, count: int) -> list[SegmentEntry]:
        return self._paged.segments_page(topic, partition, start, count)

    def partition_count(self, topic: str | None = None) -> int:
        return self._paged.partition_count(topic)

    def listed(self, partitions: Sequence[tuple[str, int]]) -> list[bool]:
        return self._paged.listed(partitions)

    def partitions_page(self, *, after: tuple[str, int] | None = None, start: int | None = None, limit: int = 1000, topic: str | None = None) -> list[tuple[str, int]]:
        return self._paged.partitions_page(after=after, start=start, limit=limit, topic=topic)


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _coverage_start_from(reply: Sequence[Any], key: str) -> CoverageStart:
    """The CoverageStart of an HMGET-like [start_offset, observed_ms] reply."""
    values = {name: _text(v) if v is not None else "" for name, v in zip(("start_offset", "observed_ms"), reply, strict=True)}
    offset, observed = (_int_field(values, name, key) for name in ("start_offset", "observed_ms"))
    try:
        return CoverageStart(offset, observed)
    except RegistryValueError as err:
        raise MalformedRegistryDataError(f"coverage hash holds an invalid start: {err}", key=key) from None
