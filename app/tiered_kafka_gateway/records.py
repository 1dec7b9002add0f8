"""Records as JSON, read from remote storage or proxied to Kafka, and the consumption-mode contract.

**Consumption modes** (DESIGN.md, contract 4) are decided by ``tiered_kafka.modes.decide``:

    REMOTE_ONLY       remote storage; an offset it does not hold is a 416
                      (offset_not_in_remote_storage past its end, offset_out_of_range below its start)
    KAFKA_ONLY        Kafka
    REMOTE_PREFERRED  remote when remote storage holds the offset (earliest <= offset <= latest),
                      else Kafka (the default)
    KAFKA_PREFERRED   Kafka; when Kafka answers OFFSET_OUT_OF_RANGE *below its log start*, remote

The handoff is exact: a read returns records of one source only, ending at ``next_offset``, and the
next read starts there (from whichever source the mode picks then), so there is no gap and no
duplicate. The rule itself is ``tiered_kafka.modes.decide``, shared with ``TieredConsumer``.

**Remote reads**: the read plan's batch-aligned ranges of one segment, then of the following
segments while ``max_bytes``/``max_records`` allow, are fetched server-side and decoded with the
format core (CRCs verified; a bad range is 502 corrupt_remote_data). Records below the requested
offset (the first batch may start before it) and control records are never returned.

**Bounded decoding** (issue 29): ``max_bytes`` counts compressed bytes, and one batch may inflate
to 256 MiB (``tiered_kafka.format.codecs``), so a response is bounded twice more (``DecodeBudget``):
decoding stops at the batch that brings ``max_records`` records at or past the offset asked, and
the records' *decompressed* bytes per request stay within ``max_decoded_bytes`` (setting, default
64 MiB). Before a compressed batch (magic 2) is decoded, an upper bound of its records block is
taken without inflating it (snappy's declared length, lz4's and zstd's frame and block headers;
gzip is inflated as a stream and counted, nothing kept); a batch that would pass the bound is not
decoded, and the response ends before it: what fits, with ``next_offset`` its base offset, so the
next read continues exactly there. An uncompressed batch counts its size; so does a legacy (magic
0/1) compressed wrapper, whose inflated size is not bounded here (those formats predate Kafka 0.11).
``/offsets`` (offsets for a timestamp) decodes the batches it searches under the same budget
(``DecodeBudget.charge``): it cannot answer part of an offset, so a batch that passes what is left
is 422 ``batch_too_large`` there (issue 36: it inflated whole batches without a bound).
Decision: when the *first* batch alone passes the bound, the answer is 422 ``batch_too_large``
naming its offset (Kafka's ``fetch.max.bytes`` would hand it over whole to make progress; a JSON
gateway holding 256 MiB per request for anyone who asks is the hole this closes): raise
``max_decoded_bytes``, or read that batch through ``/plan`` (the SDK decodes it client-side).

**read_committed over remote data** follows the one rule, ``tiered_kafka.transactions`` (KIP-98:
a transactional record belongs to the transaction its producer's next marker ends; COMMIT
delivers, ABORT drops; control records are never returned). Its inputs here:
  1. the ``.txnindex`` of every segment read (``tiered_kafka.format.txn_index``; uploaded by the
     agent when the broker wrote one): aborted transactions known in advance, as a broker's Fetch
     response lists them;
  2. the markers in the data read; when some fate is still open, the read looks further ahead for
     markers only (at most ``max_bytes_limit`` more bytes, remote data only, loading the
     ``.txnindex`` of the segments it passes; nothing past the requested window is returned).
  3. the partition's remote last stable offset (``ClusterSource.last_stable_offset``, from the
     producer snapshot of its last segment): nothing at or past it is returned, whatever the
     offset asked (a transaction opened before it and still open holds back what follows, as a
     broker's LSO does); unknown (no snapshot), the read relies on 1 and 2 only.
A record whose fate is still unknown (its marker is not in remote storage yet) or at or past the
remote LSO ends the response before it, and ``next_offset`` is its offset (never below the offset
asked): a read_committed reader never sees a record that may yet be aborted. Such a response says
so: ``last_stable_offset`` is the offset it stopped at (the first held offset; the remote LSO when
the offset asked is already past it, so it may be below ``offset``).

**Remote storage holds the offset but delivers nothing** (read_committed, held at the offset
asked): that is remote storage's end for this read, so ``tiered_kafka.modes.at_remote_end``
decides. READ_KAFKA (REMOTE_PREFERRED): the answer is Kafka's, read_committed at that offset
(Kafka holds the marker, or says by its own LSO that the transaction is still open). WAIT
(REMOTE_ONLY), Kafka not configured, or Kafka below its log start at that offset (KAFKA_PREFERRED
after its fallback: Kafka refused the offset already): 200 with no records, ``next_offset`` =
``offset`` and ``last_stable_offset`` set, an explicit "held behind an undecided transaction",
never a bare empty answer; the records come once the marker's segment is uploaded.

**Kafka reads** go through ``kafka_offsets.read`` (a pooled consumer, never in a group); with
read_committed the consumer's isolation.level is read_committed and Kafka filters aborted records.
"""

from __future__ import annotations

import base64
import enum
import zlib
from dataclasses import dataclass
from typing import Any

from tiered_kafka.format.codecs import lz4_bound, snappy_size, zstd_bound
from tiered_kafka.format.record_batch import HEADER_V2_SIZE, Codec, Record, RecordBatch, iter_batches
from tiered_kafka.format.txn_index import AbortedTxn
from tiered_kafka.modes import Action, Mode, Source, at_remote_end, decide
from tiered_kafka.read_on import Step, read_on_budget, read_on_for_markers
from tiered_kafka.read_plan import ByteRange
from tiered_kafka.client.remote_read import DecodedBatch, decode_batch
from tiered_kafka.transactions import CommittedFilter, Fate
from tiered_kafka_gateway import kafka_offsets
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, about
from tiered_kafka_gateway.models import GapOut, HeaderOut, RecordOut, RecordsResponse
from tiered_kafka_gateway.plans import out_of_range
from tiered_kafka_gateway.sources import ClusterSource

DEFAULT_MAX_RECORDS = 500
MAX_RECORDS_LIMIT = 10_000


class Encoding(str, enum.Enum):
    BASE64 = "base64"
    UTF8 = "utf8"


class IsolationLevel(str, enum.Enum):
    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


@dataclass(frozen=True)
class ReadRequest:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_records: int
    encoding: Encoding
    mode: Mode
    isolation_level: IsolationLevel


def read_records(cluster: ClusterSource, request: ReadRequest) -> RecordsResponse:
    info_cache: list[Any] = []

    def remote_holds() -> bool:
        if not info_cache:
            info_cache.append(cluster.partition_info(request.topic, request.partition))
        info = info_cache[0]
        return info is not None and not info.is_empty and info.earliest_offset <= request.offset <= info.latest_offset

    kafka_configured = bool(cluster.bootstrap_servers)
    source = decide(request.mode, remote_holds=remote_holds, kafka_configured=kafka_configured)
    watermarks: tuple[int | None, int | None] = (None, None)
    if source is Source.KAFKA:
        try:
            return _from_kafka(cluster, request)
        except GatewayError as err:
            if not _below_log_start(err, request.offset):
                raise
            watermarks = (err.details["log_start_offset"], err.details.get("high_watermark"))  # type: ignore[assignment]
            source = decide(request.mode, remote_holds=remote_holds, kafka_configured=kafka_configured, kafka_below_log_start=True)
            if source is Source.KAFKA:
                raise
    response = _from_remote(cluster, request)
    response.log_start_offset, response.high_watermark = watermarks
    held_here = not response.records and response.last_stable_offset is not None and response.next_offset == request.offset
    kafka_refused = watermarks[0] is not None  # Kafka answered OFFSET_OUT_OF_RANGE below its log start for this offset
    if held_here and kafka_configured and not kafka_refused and at_remote_end(request.mode) is Action.READ_KAFKA:
        try:  # read_committed holds the offset in remote storage: Kafka's answer (module doc)
            return _from_kafka(cluster, request)
        except GatewayError as err:
            if not _below_log_start(err, request.offset):
                raise
            response.log_start_offset, response.high_watermark = err.details.get("log_start_offset"), err.details.get("high_watermark")  # type: ignore[assignment]
    return response


def _below_log_start(err: GatewayError, offset: int) -> bool:
    """Whether Kafka refused ``offset`` as below its log start (OFFSET_OUT_OF_RANGE with ``log_start_offset``)."""
    low = err.details.get("log_start_offset")
    return err.error is ErrorCode.OFFSET_OUT_OF_RANGE and isinstance(low, int) and offset < low


# -- Kafka ----------------------------------------------------------------------------------
_KAFKA_TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def _from_kafka(cluster: ClusterSource, request: ReadRequest) -> RecordsResponse:
    result = kafka_offsets.read(
        cluster,
        request.topic,
        request.partition,
        request.offset,
        request.max_records,
        request.max_bytes,
        isolation_level=request.isolation_level.value,
    )
    records = []
    for message in result.messages:
        ts_type, ts = message.timestamp()
        offset = message.offset()
        records.append(
            RecordOut(
                offset=offset,
                timestamp=ts if ts_type in _KAFKA_TIMESTAMP_TYPES else None,
                timestamp_type=_KAFKA_TIMESTAMP_TYPES.get(ts_type),
                key=_encode(message.key(), request.encoding, offset),
                value=_encode(message.value(), request.encoding, offset),
                headers=[HeaderOut(key=k, value=_encode(v, request.encoding, offset)) for k, v in (message.headers() or [])],
            )
        )
    # read_committed may skip aborted records and markers: result.next_offset is past them too
    return _response(cluster, request, Source.KAFKA, records, result.next_offset, high_watermark=result.high_watermark,
                     log_start_offset=result.log_start_offset)


def _response(cluster: ClusterSource, request: ReadRequest, source: Source, records: list[RecordOut], next_offset: int, **extra: Any) -> RecordsResponse:
    """A response of one source, from ``request.offset`` to ``next_offset``; ``extra``: the source's own fields."""
    return RecordsResponse(cluster=cluster.name, topic=request.topic, partition=request.partition, offset=request.offset, source=source.value,
                           records=records, next_offset=next_offset, **extra)


# -- remote storage -------------------------------------------------------------------------
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def _from_remote(cluster: ClusterSource, request: ReadRequest) -> RecordsResponse:
    committed = request.isolation_level is IsolationLevel.READ_COMMITTED
    info = cluster.partition_info(request.topic, request.partition)
    if info is None or info.is_empty:
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for {request.topic}-{request.partition} in cluster {cluster.name}")
    if not info.earliest_offset <= request.offset <= info.latest_offset:  # checked here: plans only see offsets the registry can hold
        raise out_of_range(request.topic, request.partition, request.offset, info.earliest_offset, info.latest_offset)
    stable_end = cluster.last_stable_offset(request.topic, request.partition, info) if committed else None
    if stable_end is not None and request.offset >= stable_end:  # nothing to read: it is all at or past the LSO
        return _remote_response(cluster, request, info, [], request.offset, None, last_stable_offset=stable_end)
    batches: list[DecodedBatch] = []
    aborted: list[AbortedTxn] = []
    seen_segments: set[str] = set()
    budget = request.max_bytes
    position = request.offset
    gap = None
    first = True
    decoding = DecodeBudget(request.offset, request.max_records, max_decoded_bytes(cluster.settings))
    while True:
        plan = cluster.plan(request.topic, request.partition, position, max(budget, 1))
        if first:
            gap, first = plan.gap, False
        for byte_range in plan.ranges:
            batches.extend(decoding.read(cluster, plan.segment.object_key, byte_range))
            budget -= byte_range.size
            if decoding.full:
                break
        if committed and plan.segment.object_key not in seen_segments:
            seen_segments.add(plan.segment.object_key)
            aborted.extend(cluster.aborted_txns(request.topic, request.partition, plan.segment))
        position = decoding.next_offset if decoding.full else plan.ranges[-1].last_offset + 1
        if decoding.full or budget <= 0 or position > info.latest_offset:
            break
        if stable_end is not None and position >= stable_end:
            break
    data_end = position

    delivered: list[DecodedBatch] = batches
    held: int | None = None
    if committed:
        delivered, held = committed_batches(
            cluster, request.topic, request.partition, batches, aborted, seen_segments, position, info.latest_offset, stable_end
        )

    records: list[RecordOut] = []
    next_offset = data_end if held is None else max(held, request.offset)
    done = False
    for batch in delivered:
        if batch.control is not None:
            continue
        for record in batch.records:
            if record.offset < request.offset:
                continue
            records.append(_remote_record(record, request.encoding))
            if len(records) >= request.max_records:
                next_offset, done = record.offset + 1, True
                break
        if done:
            break
    lso = held if held is not None and not done else None  # the response ends at the first held offset
    return _remote_response(cluster, request, info, records, next_offset, gap, last_stable_offset=lso)


def _remote_response(
    cluster: ClusterSource, request: ReadRequest, info: Any, records: list[RecordOut], next_offset: int, gap: Any, *, last_stable_offset: int | None = None
) -> RecordsResponse:
    return _response(
        cluster, request, Source.REMOTE, records, next_offset,
        remote_earliest_offset=info.earliest_offset,
        remote_latest_offset=info.latest_offset,
        gap=None if gap is None else GapOut(start_offset=gap.start_offset, end_offset=gap.end_offset, reason=gap.reason),
        last_stable_offset=last_stable_offset,
    )


def committed_batches(
    cluster: ClusterSource,
    topic: str,
    partition: int,
    batches: list[DecodedBatch],
    aborted: list[AbortedTxn],
    seen_segments: set[str],
    position: int,
    latest: int,
    stable_end: int | None = None,
) -> tuple[list[DecodedBatch], int | None]:
    """The batches of a window (``batches``, read up to ``position``) that read_committed delivers,
    and the first offset held (undecided), or None.

    ``tiered_kafka.transactions.CommittedFilter`` decides, from ``aborted`` (the ``.txnindex``
    entries of the segments in ``seen_segments``) and the markers in the window; while a
    transaction stays undecided it reads on from ``position`` for markers only, up to ``latest``
    (``tiered_kafka.read_on``: a response that stops at its first held offset, so at most
    ``max_bytes_limit`` more bytes, plans of at most ``range_bytes``; it loads the ``.txnindex`` of
    the segments it passes; nothing past the window is returned).
    ``stable_end``: the remote LSO; no batch at or past it is delivered (None: unknown)."""
    rule: CommittedFilter[Any] = CommittedFilter(aborted, stable_end=stable_end)
    delivered = [b for batch in batches for b, fate in rule.push_decisions(batch) if fate is Fate.DELIVER]
    segment_key = [""]

    def plan(offset: int, max_bytes: int) -> Step[ByteRange] | None:
        if offset > latest:
            return None
        found = cluster.plan(topic, partition, offset, max_bytes)
        segment_key[0] = found.segment.object_key
        if found.segment.object_key not in seen_segments:
            seen_segments.add(found.segment.object_key)
            rule.add_aborted(cluster.aborted_txns(topic, partition, found.segment))
        return Step(found.ranges, found.ranges[-1].last_offset + 1)

    settings = cluster.settings
    read_on_for_markers(rule, position, plan, lambda byte_range: _read_batches(cluster, segment_key[0], byte_range, markers_only=True),
                        budget=read_on_budget(stable_end, resumable=True, limit=settings.max_bytes_limit), plan_bytes=settings.range_bytes)
    delivered.extend(b for b, fate in rule.take_released() if fate is Fate.DELIVER)
    return delivered, rule.first_held_offset


def _range_bytes(cluster: ClusterSource, key: str, byte_range: ByteRange) -> bytes | memoryview:
    """A planned range's bytes, exactly its size (else 502 ``corrupt_remote_data`` naming ``key``)."""
    data = cluster.read_range(key, byte_range)
    if len(data) != byte_range.size:
        raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"{key}: asked {byte_range.size} bytes at {byte_range.start}, got {len(data)}")
    return data


def _read_batches(cluster: ClusterSource, key: str, byte_range: ByteRange, markers_only: bool = False) -> list[DecodedBatch]:
    """The batches of a planned range, CRC-checked (a bad one: 502 ``corrupt_remote_data`` naming ``key``; ``errors.ANSWERS``)."""
    data = _range_bytes(cluster, key, byte_range)
    with about(key):
        return [decode_batch(batch, with_records=not markers_only) for batch in iter_batches(data, position=byte_range.start)]


def max_decoded_bytes(settings: Any) -> int:
    """The ``max_decoded_bytes`` setting (module doc)."""
    return int(settings.max_decoded_bytes)


class DecodeBudget:
    """What one response may still decode (module doc, "Bounded decoding"): records at or past
    ``offset`` up to ``max_records``, decompressed bytes up to ``limit``. ``full``: stop;
    ``next_offset``: the offset after the last batch decoded (where the response continues). Batches
    wholly below ``offset`` (a plan may start early) are skipped undecoded: they are never returned."""

    def __init__(self, offset: int, max_records: int, limit: int) -> None:
        self.offset, self.max_records, self.limit = offset, max_records, limit
        self.records = 0
        self.spent = 0  # decompressed bytes of the records decoded so far
        self.batches = 0
        self.full = False
        self.next_offset = offset

    def read(self, cluster: ClusterSource, key: str, byte_range: ByteRange) -> list[DecodedBatch]:
        """The batches of ``byte_range`` this budget lets decode, in order (CRC-checked, as ``_read_batches``)."""
        data = _range_bytes(cluster, key, byte_range)
        out: list[DecodedBatch] = []
        with about(key):
            for batch in iter_batches(data, position=byte_range.start):
                if self.full:
                    break
                if batch.last_offset < self.offset:  # a plan may start batches before the offset asked: never returned, not decoded
                    continue
                bound = decoded_size_bound(batch, self.limit - self.spent)
                if self.spent + bound > self.limit:
                    if self.batches == 0:
                        raise _too_large(batch, self.limit, "/records response")
                    self.full = True
                    break
                decoded = decode_batch(batch)
                self.batches += 1
                self.spent += bound if batch.magic < 2 or batch.codec == Codec.NONE else sum(_record_bytes(r) for r in decoded.records)
                self.next_offset = decoded.last_offset + 1
                if decoded.control is None:
                    self.records += sum(1 for r in decoded.records if r.offset >= self.offset)
                out.append(decoded)
                if self.records >= self.max_records:
                    self.full = True
        return out


    def charge(self, batch: RecordBatch, what: str) -> None:
        """Count ``batch``'s decompressed bound (``decoded_size_bound``) before it is inflated, for a
        path that cannot answer "what fits" (``/offsets``: one offset, or none): past what is left,
        422 ``batch_too_large``. Every path of the gateway that decodes records counts against one
        ``max_decoded_bytes`` budget per request (module doc; issue 36)."""
        bound = decoded_size_bound(batch, self.limit - self.spent)
        if self.spent + bound > self.limit:
            raise _too_large(batch, self.limit, what)
        self.spent += bound
        self.batches += 1


def _too_large(batch: RecordBatch, limit: int, what: str) -> GatewayError:
    return GatewayError(
        ErrorCode.BATCH_TOO_LARGE,
        f"the batch at offset {batch.base_offset} decompresses to more than the {limit} bytes a {what} "
        "may decode (max_decoded_bytes): read it through /plan, or raise max_decoded_bytes",
        offset=batch.base_offset,
        max_decoded_bytes=limit,
    )


_RECORD_OVERHEAD = 32  # bytes charged per record beyond its key, value and headers (its varints, a generous upper bound)


def _record_bytes(record: Record) -> int:
    """A decoded record's share of its batch's decompressed records block (at least)."""
    headers = sum(len(k) + len(v or b"") for k, v in record.headers)
    return _RECORD_OVERHEAD + len(record.key or b"") + len(record.value or b"") + headers


def decoded_size_bound(batch: RecordBatch, limit: int) -> int:
    """An upper bound of the bytes ``batch``'s records take once decompressed, without inflating
    it (module doc); above ``limit`` it may stop counting and answer anything above ``limit``."""
    if batch.magic < 2 or batch.codec == Codec.NONE:
        return batch.size
    payload = batch.buffer[HEADER_V2_SIZE:]
    codec = batch.codec
    if codec == Codec.GZIP:
        return _gzip_size(payload, limit)
    if codec == Codec.SNAPPY:
        return snappy_size(payload)
    if codec == Codec.LZ4:
        return lz4_bound(payload)
    return zstd_bound(payload) if codec == Codec.ZSTD else batch.size  # an unknown codec: the decoder rejects it


def _gzip_size(payload: memoryview, limit: int) -> int:
    """The inflated size of gzip member(s) (RFC 1952), counted as a stream and discarded; stops past ``limit``.
    A truncated or malformed stream counts what inflated: the decoder rejects it."""
    rest = bytes(payload)
    total = 0
    while rest:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = rest
        try:
            while not stream.eof:
                out = stream.decompress(pending, 2**20)
                total += len(out)
                if total > limit:
                    return total
                pending = stream.unconsumed_tail
                if not out and not pending:
                    return total
        except zlib.error:
            return total
        rest = stream.unused_data
    return total


def _remote_record(record: Any, encoding: Encoding) -> RecordOut:
    offset = record.offset
    timestamp_type = _TIMESTAMP_TYPES.get(record.timestamp_type) if record.timestamp is not None else None
    return RecordOut(
        offset=offset,
        timestamp=record.timestamp,
        timestamp_type=timestamp_type,
        key=_encode(record.key, encoding, offset),
        value=_encode(record.value, encoding, offset),
        headers=[HeaderOut(key=k, value=_encode(v, encoding, offset)) for k, v in record.headers],
    )


def _encode(data: bytes | None, encoding: Encoding, offset: int) -> str | None:
    if data is None:
        return None
    if encoding is Encoding.BASE64:
        return base64.b64encode(data).decode("ascii")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"record at offset {offset} is not valid UTF-8; use encoding=base64", offset=offset
        ) from None
