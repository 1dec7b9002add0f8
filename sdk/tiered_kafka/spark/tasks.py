"""The units of a planned ``tiered-kafka`` read (``planning`` module doc, rules 1-5): offsets per
partition, planned ranges, the slices a Spark task reads (remote storage's, and Kafka's in the hybrid
modes: ``hybrid``, ``kafka_reading``), the task itself (picklable, shipped to the executors) and
the plan. No I/O; ``planning`` builds them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tiered_kafka.client.gateway import PlannedRange
from tiered_kafka.modes import Mode
from tiered_kafka.spark.kafka_options import DEFAULT_POLL_TIMEOUT_MS
from tiered_kafka.spark.options import ReadOptions

GapHandler = Callable[["OffsetRange", int, int, str], bool]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one Kafka partition to read; ``estimated_bytes`` from remote storage's extent.
    ``stable_end``: under read_committed, the remote last stable offset when the read was planned
    (``tiered_kafka.transactions``; None: unknown, or read_uncommitted)."""

    topic: str
    partition: int
    start: int
    end: int
    estimated_bytes: int = 0
    stable_end: int | None = None

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class RangeUnit:
    """One planned, batch-aligned range of a segment object, within the read of ``offsets``."""

    offsets: OffsetRange
    object_key: str
    planned: PlannedRange

    @property
    def size(self) -> int:
        return self.planned.size


@dataclass(frozen=True, slots=True)
class Slice:
    """Consecutive ranges of one Kafka partition read by one task; records outside [start, end) are dropped."""

    topic: str
    partition: int
    start: int
    end: int
    ranges: tuple[tuple[str, PlannedRange], ...]  # (object key, range)
    stable_end: int | None = None  # read_committed: no row at or past it (OffsetRange.stable_end)

    @property
    def size(self) -> int:
        return sum(r.size for _key, r in self.ranges)


@dataclass(frozen=True, slots=True)
class KafkaSlice:
    """Offsets [start, end) a task reads from Kafka in the hybrid modes (``hybrid``, ``kafka_reading``)."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class ReadTask:
    """What one Spark task reads: slices, and how to reach the gateway to re-plan an expired URL."""

    index: int
    gateway_url: str
    cluster: str
    token: str | None = field(repr=False)  # a secret: never in a repr
    include_headers: bool
    include_control_records: bool
    slices: tuple[Slice, ...]
    read_committed: bool = False
    kafka_slices: tuple[KafkaSlice, ...] = ()  # hybrid modes: read from Kafka with kafka_config (librdkafka)
    kafka_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold sasl.password
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    mode: Mode = Mode.REMOTE_ONLY
    kafka_group_id: str = ""

    @classmethod
    def of(cls, options: ReadOptions, index: int, slices: tuple[Slice, ...], kafka_slices: tuple[KafkaSlice, ...] = ()) -> ReadTask:
        """The task reading ``slices`` (and ``kafka_slices``) with ``options``' settings: the one constructor."""
        return cls(
            index=index,
            gateway_url=options.gateway_url,
            cluster=options.cluster,
            token=options.token,
            include_headers=options.include_headers,
            include_control_records=options.include_control_records,
            slices=slices,
            read_committed=options.read_committed,
            kafka_slices=kafka_slices,
            kafka_config=options.kafka_config,
            fail_on_data_loss=options.fail_on_data_loss,
            poll_timeout_ms=options.poll_timeout_ms,
            mode=options.mode,
            kafka_group_id=options.kafka_group_id,
        )

    @property
    def size(self) -> int:
        return sum(s.size for s in self.slices)


@dataclass
class SourcePlan:
    """The outcome of planning: offsets per partition, the tasks, and what was skipped."""

    offsets: list[OffsetRange]
    tasks: list[ReadTask]
    warnings: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(t.size for t in self.tasks)

    @property
    def range_count(self) -> int:
        return sum(len(s.ranges) for t in self.tasks for s in t.slices)
