"""Hybrid reads (``tiered.mode`` REMOTE_PREFERRED / KAFKA_PREFERRED) of the Spark source: the driver's side.

Which tier serves each offset of a partition's [start, end) is decided by :func:`split`, a pure
function over the two tiers' bounds that asks ``tiered_kafka.modes`` at every position (``decide``,
``at_remote_end``, ``below_remote_start``, ``kafka_out_of_range``, ``switch_back_at``): the same
rules and handoff points as ``TieredConsumer``'s ``Handoff``, written nowhere else. It walks the
range from ``start``: each step reads one tier up to where the mode hands over (remote storage's
end, Kafka's log start for KAFKA_PREFERRED's ``switch_back_at``), so the pieces are contiguous,
disjoint, and cover [start, end) exactly: no gap and no duplicate at a handoff. Offsets no tier
holds (below both starts: retention; between remote storage's end and Kafka's log start:
``modes.Action.GAP``) are a *lost* piece, handled by ``failOnDataLoss`` (error, or a warning and
the read goes on after it), as Spark's Kafka source handles offsets Kafka no longer has.

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
from tiered_kafka.errors import KafkaMetadataError, OffsetNotRemoteError, RemoteGapError
from tiered_kafka.gateway_client import GatewayClient, PartitionExtent
from tiered_kafka.modes import Action, Mode, Source
from tiered_kafka.spark.options import ReadOptions, TopicPartition
from tiered_kafka.spark.tasks import KafkaSlice

log = logging.getLogger(__name__)

KAFKA_SLICE_OFFSETS = 500_000
"""At most this many offsets per Kafka slice (one Spark task each)."""
DEFAULT_RECORD_BYTES = 1024
"""Bytes per record assumed for a Kafka piece's estimate when remote storage holds nothing to average."""
METADATA_TIMEOUT_S = 30.0


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
    """[start, end) cut into the pieces each tier serves under ``mode`` (module doc).

    ``remote``: remote storage's (earliest, end exclusive), None when it holds nothing;
    ``kafka_log_start``: Kafka's log start. Offsets >= the log start are Kafka's up to ``end``
    (the caller's end is at most Kafka's end). ``stable``: under read_committed, remote storage's
    last stable offset, its *held* point: a remote read reaching it hands over to Kafka there
    (``Handoff.remote_end(held)``); when Kafka no longer holds it (``kafka_out_of_range`` with
    remote storage's real end answers READ_REMOTE), remote storage reads on past it (its reader
    holds back what it cannot decide, with a warning: never a gap)."""
    if mode not in (Mode.REMOTE_PREFERRED, Mode.KAFKA_PREFERRED):
        raise ValueError(f"split is for the hybrid modes, not {mode.value}")
    held = None if remote is None or remote[1] <= remote[0] else remote
    between = "between tiers: remote storage ends below Kafka's log start"
    pieces: list[Piece] = []
    at = start
    while at < end:
        holds = held is not None and held[0] <= at < held[1]
        refused = False  # Kafka refused `at` and remote storage serves it: read past the held point
        source: Source | None = modes.decide(mode, remote_holds=lambda: holds, kafka_configured=True, kafka_below_log_start=at < kafka_log_start)
        if source is Source.REMOTE and holds and stable is not None and at >= stable:  # read_committed: Handoff.remote_end(held)
            source = Source.KAFKA if modes.at_remote_end(mode) is Action.READ_KAFKA else None
        elif source is Source.REMOTE and not holds:  # remote storage cannot serve `at`: which event
            past_end = held is not None and at >= held[1]
            action = modes.at_remote_end(mode) if past_end else modes.below_remote_start(mode, at, kafka_log_start)
            source = Source.KAFKA if action is Action.READ_KAFKA else None
        if source is Source.KAFKA and at < kafka_log_start:  # Kafka answers OFFSET_OUT_OF_RANGE
            action = modes.kafka_out_of_range(mode, at, kafka_log_start, None if held is None else (held[0], held[1] - 1))
            if action is Action.GAP:
                stop = min(end, kafka_log_start)
                pieces.append(Piece(None, at, stop, between))
                at = stop
                continue
            source = Source.REMOTE if action is Action.READ_REMOTE else None
            refused = source is Source.REMOTE
        if source is None:  # no tier the mode reads holds `at`: reset forward to the first offset one does
            stop = min([end, *(o for o in (kafka_log_start, None if held is None else held[0]) if o is not None and o > at)])
            pieces.append(Piece(None, at, stop, "not in remote storage nor in Kafka (retention)"))
        elif source is Source.REMOTE:
            assert held is not None and holds
            back = modes.switch_back_at(mode, kafka_log_start)  # KAFKA_PREFERRED returns to Kafka at its log start
            hold = stable if stable is not None and stable > at and not refused else end
            stop = min(end, held[1], back if back is not None and back > at else end, hold)
            pieces.append(Piece(source, at, stop))
        else:  # once on Kafka a read stays there (Handoff: no event moves it back to remote storage)
            stop = end
            pieces.append(Piece(source, at, stop))
        at = stop
    return _merged(pieces)


def gap_pieces(mode: Mode, first: int, last: int, end: int, kafka_log_start: int, reason: str) -> list[Piece] | None:
    """A recorded gap ``first..last`` met by a remote piece ending at ``end``: the pieces of
    [first, min(last + 1, end)) Kafka serves and those lost (Kafka's log start inside the gap,
    ``modes.gap_kafka_rest``), as ``Handoff.gap`` decides; None when Kafka holds none of it
    (REMOTE_ONLY's handling: ``failOnDataLoss``)."""
    stop = min(last + 1, end)
    if modes.at_gap(mode, first, first, last, kafka_log_start) is Action.READ_KAFKA:
        return [Piece(Source.KAFKA, first, stop)]
    rest = modes.gap_kafka_rest(mode, first, last, kafka_log_start)
    if rest is None:
        return None
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
