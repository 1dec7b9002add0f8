"""Hybrid reads (``tiered.mode`` REMOTE_PREFERRED / KAFKA_PREFERRED) of the Spark source: the driver's side.

Which tier serves each offset of a partition's [start, end) is decided by :func:`split`, a pure
function over the two tiers' bounds that drives TieredConsumer's ``Handoff``
(``tiered_kafka.consumer.handoff``) with the events its readers would meet: the same rules
(``tiered_kafka.modes``) and the same sequence of handoffs, written nowhere else. It walks the
range from ``start``: each step reads one tier up to where the handoff hands over (remote storage's
end, Kafka's log start for KAFKA_PREFERRED's ``switch_back_at``), so the pieces are contiguous,
disjoint, and cover [start, end) exactly: no gap and no duplicate at a handoff. Offsets no tier
holds (below both starts: the handoff's ``Reset``, retention; between remote storage's end and
Kafka's log start: its ``Skip``, ``modes.Action.GAP``) are a *lost* piece, handled by
``failOnDataLoss`` (error, or a warning and the read goes on after it), as Spark's Kafka source
handles offsets Kafka no longer has. A recorded gap inside remote storage: :func:`gap_pieces`,
``Handoff.gap`` likewise.

The driver learns Kafka's side once per plan with confluent-kafka's ``AdminClient.list_offsets``
(:class:`KafkaView`): the log start (``OffsetSpec.earliest``), the end (``OffsetSpec.latest``, the
high watermark, or the last stable offset under ``kafka.isolation.level=read_committed``: Kafka's
``ListOffsets`` with ``READ_COMMITTED``), and offsets for timestamps (``OffsetSpec.for_timestamp``).
In the hybrid modes the source's bounds are both tiers': ``earliest`` is the first offset a tier the
mode reads holds, ``latest`` Kafka's end (streams: ``latestOffset`` = Kafka's end, so a
REMOTE_PREFERRED stream reads history from remote storage, then live records from Kafka). A
timestamp resolves to the smaller of both tiers' offsets for it (``hybrid_planning`` module doc).
The partitions read are the union of the gateway's and Kafka's (``list_topics``), so a partition
with nothing remote yet (new) is read from Kafka.

Remote pieces are planned as REMOTE_ONLY plans them (``planning.plan_tasks``: byte-balanced,
batch-aligned, recorded gaps under ``failOnDataLoss``); Kafka pieces become ``KafkaSlice`` s of at
most ``KAFKA_SLICE_OFFSETS`` offsets, one task each, read by ``kafka_reading``.
Recorded gaps inside remote storage: ``hybrid_planning`` (Kafka reads what it still holds).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tiered_kafka import modes
from tiered_kafka.consumer.handoff import Decision, Handoff, ReadFrom, Reset, Skip
from tiered_kafka.errors import KafkaMetadataError, OffsetNotRemoteError, RemoteGapError
from tiered_kafka.client.gateway import GatewayClient, PartitionExtent
from tiered_kafka.modes import Mode, Source
from tiered_kafka.spark.options import ReadOptions, TopicPartition
from tiered_kafka.spark.tasks import KafkaSlice

log = logging.getLogger(__name__)

KAFKA_SLICE_OFFSETS = 500_000
"""At most this many offsets per Kafka slice (one Spark task each)."""
DEFAULT_RECORD_BYTES = 1024
"""Bytes per record assumed for a Kafka piece's estimate when remote storage holds nothing to average."""
METADATA_TIMEOUT_S = 30.0
MAX_SPLIT_STEPS = 64
"""A split takes a handful of handoff events (each tier entered at most twice): more is a bug."""
BELOW_LOG_START = "remote storage ends below Kafka's log start"
RETENTION = "not in remote storage nor in Kafka (retention)"


@dataclass(frozen=True, slots=True)
class Piece:
    """Offsets [start, end) of one partition served by ``source``; ``source`` None: no tier the
    mode reads holds them (``reason`` says why)."""

    source: Source | None
    start: int
    end: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class KafkaBounds:
    """What Kafka reported for a partition: its log start and its end (high watermark or LSO)."""

    log_start: int
    end: int


def split(mode: Mode, start: int, end: int, remote: tuple[int, int] | None, kafka_log_start: int, stable: int | None = None) -> list[Piece]:
    """[start, end) cut into the pieces each tier serves under ``mode`` (module doc): TieredConsumer's
    ``Handoff`` driven over a model of the two tiers, the one implementation of the sequence.

    ``remote``: remote storage's (earliest, end exclusive), None when it holds nothing;
    ``kafka_log_start``: Kafka's log start. Offsets >= the log start are Kafka's up to ``end``
    (the caller's end is at most Kafka's end). ``stable``: under read_committed, remote storage's
    last stable offset, its *held* point: a remote read reaching it hands over to Kafka there
    (``Handoff.remote_end(held)``); when Kafka no longer holds it (``kafka_out_of_range`` with
    remote storage's real end answers READ_REMOTE), remote storage reads on past it (its reader
    holds back what it cannot decide, with a warning: never a gap).

    The events fed to the handoff are those the consumer's readers would meet: Kafka's
    OFFSET_OUT_OF_RANGE below its log start, remote storage's end or start, the held point, the
    records delivered. Its decisions become pieces: ``ReadFrom`` a read of that tier up to where the
    next event comes, ``Skip`` (Kafka's ``between tiers`` gap) and ``Reset`` (auto.offset.reset
    forward, to the first offset a tier holds: retention) a lost piece."""
    if mode not in (Mode.REMOTE_PREFERRED, Mode.KAFKA_PREFERRED):
        raise ValueError(f"split is for the hybrid modes, not {mode.value}")
    held = None if remote is None or remote[1] <= remote[0] else remote

    def holds(offset: int) -> bool:
        return held is not None and held[0] <= offset < held[1]

    handoff = Handoff(mode, kafka_configured=True, gap_skip=True)
    pieces: list[Piece] = []
    decision: Decision | None = handoff.start(start, lambda: holds(start))
    refused = False  # the remote read follows Kafka's OFFSET_OUT_OF_RANGE: it reads past the held point
    for _step in range(MAX_SPLIT_STEPS):
        if isinstance(decision, Skip):  # the handoff moved its position past the skipped offsets
            if decision.read is None:
                raise RuntimeError(f"split: a skip without a read at {decision.start}")
            pieces.append(Piece(None, decision.start, min(end, decision.end + 1), f"{decision.reason}: {BELOW_LOG_START}"))
            decision = decision.read
            continue
        at = handoff.position
        if at is None:
            raise RuntimeError("split: the handoff has no position")
        if at >= end:
            break
        if isinstance(decision, Reset):  # auto.offset.reset forward: the first offset a tier holds
            target = min([end, *(o for o in (kafka_log_start, None if held is None else held[0]) if o is not None and o > at)])
            pieces.append(Piece(None, at, target, RETENTION))
            if target >= end:
                break
            decision = handoff.start(target, lambda t=target: holds(t))  # type: ignore[misc]
            continue
        if not isinstance(decision, ReadFrom) or decision.offset != at:
            raise RuntimeError(f"split: unexpected decision {decision!r} at {at}")
        if decision.source is Source.KAFKA:
            if at < kafka_log_start:  # Kafka answers OFFSET_OUT_OF_RANGE
                decision = handoff.kafka_out_of_range(at, kafka_log_start, None if held is None else (held[0], held[1] - 1))
                refused = isinstance(decision, ReadFrom) and decision.source is Source.REMOTE
                continue
            pieces.append(Piece(Source.KAFKA, at, end))  # once on Kafka a read stays there (no event moves it back)
            break
        if held is None or not holds(at):  # remote storage cannot serve `at`: which event
            decision = handoff.remote_end() if held is not None and at >= held[1] else handoff.remote_below_start()
            continue
        hold = stable if stable is not None and not refused and stable < held[1] else None
        if hold is not None and at >= hold:  # the remote reader holds `at` behind an open transaction
            decision = handoff.remote_end(hold)
            continue
        back = handoff.switch_back_at  # KAFKA_PREFERRED returns to Kafka at its log start
        stop = min(end, held[1], end if back is None else back, end if hold is None else hold)
        pieces.append(Piece(Source.REMOTE, at, stop))
        refused = False
        decision = handoff.delivered(Source.REMOTE, stop)
        if decision is None and stop < end:
            decision = handoff.remote_end(hold)
    else:
        raise RuntimeError(f"split of [{start}, {end}) did not end after {MAX_SPLIT_STEPS} steps")
    return _merged(pieces)


def gap_pieces(mode: Mode, first: int, last: int, end: int, kafka_log_start: int, reason: str) -> list[Piece] | None:
    """A recorded gap ``first..last`` met by a remote piece ending at ``end``: the pieces of
    [first, min(last + 1, end)) Kafka serves and those lost (Kafka's log start inside the gap), as
    ``Handoff.gap`` decides them (the handoff knowing Kafka's log start, as after an
    OFFSET_OUT_OF_RANGE); None when Kafka holds none of it (REMOTE_ONLY's handling: ``failOnDataLoss``)."""
    stop = min(last + 1, end)
    handoff = Handoff(mode, kafka_configured=True, gap_skip=True)
    handoff.start(first, lambda: True)
    handoff.kafka_log_start = kafka_log_start
    decision = handoff.gap(first, last, reason)
    if isinstance(decision, ReadFrom) and decision.source is Source.KAFKA:
        return [Piece(Source.KAFKA, first, stop)]
    if not isinstance(decision, Skip):
        raise RuntimeError(f"gap_pieces: unexpected decision {decision!r}")
    if decision.read is None:
        return None
    rest = decision.read.offset
    lost = Piece(None, first, min(rest, stop), f"in a recorded gap of remote storage ({reason}) and no longer in Kafka")
    return [p for p in (lost, Piece(Source.KAFKA, rest, stop)) if p.start < p.end]


def _merged(pieces: Sequence[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for piece in pieces:
        if out and out[-1].source is piece.source and out[-1].end == piece.start and out[-1].reason == piece.reason:
            out[-1] = dataclasses.replace(out[-1], end=piece.end)
        else:
            out.append(piece)
    return out


def kafka_slices(topic: str, partition: int, start: int, end: int, per_slice: int = KAFKA_SLICE_OFFSETS) -> list[KafkaSlice]:
    """[start, end) of Kafka cut into slices of at most ``per_slice`` offsets."""
    return [KafkaSlice(topic, partition, a, min(end, a + per_slice)) for a in range(start, end, per_slice)]


def lost_piece(options: ReadOptions, tp: TopicPartition, piece: Piece, warnings: list[str]) -> None:
    """A piece no tier holds: ``failOnDataLoss`` raises ``RemoteGapError``, else a warning."""
    message = f"{tp[0]}-{tp[1]}: offsets {piece.start}..{piece.end - 1} are {piece.reason}"
    if options.fail_on_data_loss:
        raise RemoteGapError(f"{message}; set failOnDataLoss=false to skip them", topic=tp[0], partition=tp[1], start_offset=piece.start, end_offset=piece.end - 1, reason=piece.reason)
    log.warning("tiered-kafka: %s; skipped (failOnDataLoss=false)", message)
    warnings.append(f"{message}; skipped (failOnDataLoss=false)")


def remote_bounds(extent: PartitionExtent | None) -> tuple[int, int] | None:
    remote = None if extent is None else extent.remote
    if remote is None or remote.segment_count == 0:
        return None
    return remote.earliest_offset, remote.latest_offset + 1


def record_bytes(extent: PartitionExtent | None) -> int:
    """Average bytes per record remote storage holds of the partition (a Kafka piece's estimate)."""
    bounds = remote_bounds(extent)
    if bounds is None or extent is None or extent.remote is None:
        return DEFAULT_RECORD_BYTES
    return max(1, extent.remote.total_bytes // max(1, bounds[1] - bounds[0]))


class KafkaView:
    """The driver's questions to Kafka (module doc), through one confluent-kafka ``AdminClient``."""

    def __init__(self, kafka_config: tuple[tuple[str, str], ...], read_committed: bool) -> None:
        from confluent_kafka.admin import AdminClient

        from tiered_kafka.spark.kafka_options import kafka_client

        self.read_committed = read_committed
        self.admin = kafka_client(AdminClient, dict(kafka_config))

    def partitions(self) -> dict[str, list[int]]:
        """Kafka's topics (internal ones left out) → their partitions."""
        metadata = self.admin.list_topics(timeout=METADATA_TIMEOUT_S)
        return {name: sorted(t.partitions) for name, t in metadata.topics.items() if t.error is None and not name.startswith("__")}

    def bounds(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, KafkaBounds]:
        """Log start and end (high watermark, or LSO under read_committed) of each partition."""
        from confluent_kafka.admin import OffsetSpec

        starts = self._list({tp: OffsetSpec.earliest() for tp in partitions})
        ends = self._list({tp: OffsetSpec.latest() for tp in partitions})
        return {tp: KafkaBounds(starts[tp], ends[tp]) for tp in partitions}

    def offsets_for_timestamp(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """The first offset with a timestamp >= each one (None: no such record; Kafka answers -1)."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list({tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()})
        return {tp: (None if offset < 0 else offset) for tp, offset in found.items()}

    def _list(self, specs: Mapping[TopicPartition, Any]) -> dict[TopicPartition, int]:
        from confluent_kafka import IsolationLevel, KafkaException
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        if not specs:
            return {}
        level = IsolationLevel.READ_COMMITTED if self.read_committed else IsolationLevel.READ_UNCOMMITTED
        requests = {KafkaTopicPartition(t, p): spec for (t, p), spec in specs.items()}
        futures = self.admin.list_offsets(requests, isolation_level=level, request_timeout=METADATA_TIMEOUT_S)
        out: dict[TopicPartition, int] = {}
        for ktp, future in futures.items():
            try:
                out[(ktp.topic, ktp.partition)] = future.result().offset
            except KafkaException as err:
                raise KafkaMetadataError(f"{ktp.topic}-{ktp.partition}: Kafka's ListOffsets failed: {err.args[0]}") from err
        return out


def earliest_of(mode: Mode, remote: tuple[int, int] | None, kafka: KafkaBounds) -> int:
    """The source's ``earliest`` for a partition: the first offset a tier the mode reads holds
    (both hybrid modes read both tiers; an empty Kafka log's start is its end)."""
    first = modes.earliest(mode, kafka.log_start, None if remote is None else remote[0])
    return kafka.log_start if first is None else first


def resolve_start(options: ReadOptions, tp: TopicPartition, offset: int, earliest: int, end: int, warnings: list[str]) -> int:
    """A specific starting (or ending) offset checked against both tiers' bounds [earliest, end]."""
    name = f"{tp[0]}-{tp[1]}"
    if offset > end:
        raise OffsetNotRemoteError(f"{name}: offset {offset} is past Kafka's end {end}", offset=offset, earliest=earliest, latest=end - 1)
    if offset < earliest:
        message = f"{name}: offset {offset} is below the earliest offset {earliest} of remote storage and Kafka: offsets {offset}..{earliest - 1} are lost"
        if options.fail_on_data_loss:
            raise OffsetNotRemoteError(f"{message} (set failOnDataLoss=false to read what remains)", offset=offset, earliest=earliest, latest=end - 1)
        log.warning("tiered-kafka: %s; reading from %d (failOnDataLoss=false)", message, earliest)
        warnings.append(message)
        return earliest
    return offset


def gateway_extent(client: GatewayClient, tp: TopicPartition, remote_topics: Mapping[str, list[int]]) -> PartitionExtent | None:
    """The gateway's extent of a partition, None when the gateway lists nothing of it."""
    return client.partition(*tp) if tp[1] in remote_topics.get(tp[0], ()) else None
