"""Options of the ``tiered-kafka`` Spark data source: parsing and validation (no pyspark, no network).

The names and meanings are those of Spark's Kafka source (Structured Streaming + Kafka
integration guide, batch queries), so a job switches between ``format("kafka")`` and
``format("tiered-kafka")`` by changing the format and adding the ``tiered.*`` options. Option
names are case-insensitive, as in Spark. Every error is an :class:`OptionError` naming the option.

Which topics (exactly one of):
    ``subscribe``         comma-separated topic names
    ``subscribePattern``  a Java-style regex; topics whose whole name matches (Spark: ``matches()``)
    ``assign``            JSON ``{"topicA":[0,1],"topicB":[2]}``

Where to start and end (defaults ``earliest`` and ``latest``; ending offsets are exclusive):
    ``startingOffsets`` / ``endingOffsets``   ``earliest``, ``latest`` or JSON
                          ``{"topicA":{"0":23,"1":-2}}``, -2 = earliest, -1 = latest
    ``startingTimestamp`` / ``endingTimestamp``   ms since the epoch, for every partition
    ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``   JSON ``{"topicA":{"0":1700000000000}}``
    ``startingOffsetsByTimestampStrategy``   ``error`` (default) or ``latest``: what to do when no
                          remote record has a timestamp >= the starting timestamp
  Precedence, as in Spark: ``*Timestamp`` > ``*OffsetsByTimestamp`` > ``*Offsets``.
  Batch rules, as in Spark: ``startingOffsets`` cannot be ``latest`` (nor -1 for a partition) and
  ``endingOffsets`` cannot be ``earliest`` (nor -2). A JSON of offsets or timestamps must name every
  partition read (Spark: "you must specify all TopicPartitions"), and only those.
  A timestamp resolves to the first remote offset whose timestamp is >= it (the gateway's
  ``/offsets``); an ending timestamp with no such offset means ``latest``.

Reading:
    ``minPartitions``        at least this many Spark partitions (default: one per Kafka partition
                             read); they are balanced by bytes, see ``planning``
    ``maxBytesPerPartition`` ours: at most about this many bytes per Spark partition (default 128 MiB;
                             accepts a plain byte count or k/m/g suffixes)
    ``failOnDataLoss``       ``true`` (default): offsets below remote storage's earliest, or a gap in
                             remote storage, fail the read; ``false``: log a warning, read what exists
    ``includeHeaders``       ``true`` adds the ``headers`` column (default ``false``), as in Spark

Ours (the gateway that plans the reads):
    ``tiered.gateway.url``   e.g. ``http://gateway:8080`` (required)
    ``tiered.cluster``       the Kafka cluster's name in the gateway (required)
    ``tiered.gateway.token`` bearer token, when the gateway has auth enabled
    ``tiered.mode``          ``REMOTE_ONLY`` (default), ``REMOTE_PREFERRED``, ``KAFKA_PREFERRED`` and their
                             Kafka options: ``kafka_options`` module doc; the hybrid reads: ``hybrid``
    ``tiered.includeControlRecords``  internal (used by the backfill's row-count check): ``true``
                             adds a string column ``skipped`` and emits one row (key/value null)
                             per record a read leaves out: ``control`` (a marker), ``aborted``
                             and ``undecided`` (read_committed); data rows have ``skipped`` null
    ``tiered.timestampsOrdered`` ``true``: the caller states timestamps never decrease within a
                             partition, so a ``timestamp`` filter also cuts the read's end (``pushdown``)

Decisions:
- REMOTE_ONLY reads remote storage only: ``earliest`` is the first offset held remotely and
  ``latest`` is one past the last one held remotely (not Kafka's log start or high watermark).
  A specific ending offset past remote storage's end fails (the data is not remote yet); a
  specific starting offset below remote storage's start is data loss (``failOnDataLoss``).
- In REMOTE_ONLY, options of Spark's Kafka source that configure the Kafka consumer (``kafka.*``)
  are accepted and ignored, so a job switches formats unchanged, except ``kafka.isolation.level``:
  ``read_uncommitted`` (the default, as Kafka's) or ``read_committed`` (aborted transactions left out by ``tiered_kafka.transactions``; what a task
  does at its slice's end is in the ``reading`` module doc). Control records are never rows.
  Streaming-only options are ignored in batch reads, as Spark does (streams: ``streaming`` module). Other unknown options are
  ignored with a warning naming them (a typo would otherwise silently change nothing).
- An unknown topic or partition (not served by the gateway) is an error, also for ``subscribe``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tiered_kafka.errors import ConfigError
from tiered_kafka.modes import Mode
from tiered_kafka.properties import parse_bool
from tiered_kafka.spark.kafka_options import DEFAULT_POLL_TIMEOUT_MS, group_id, kafka_settings, parse_mode, poll_timeout_ms
from tiered_kafka.topic_names import TOPIC_NAME_RULE, is_legal_topic_name

log = logging.getLogger(__name__)

EARLIEST = -2
"""Spark's and Kafka's code for the earliest offset in an offsets JSON."""
LATEST = -1
"""Spark's and Kafka's code for the latest offset in an offsets JSON."""

DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
TopicPartition = tuple[str, int]

#: every option this source reads, lower-cased (Spark hands options over lower-cased)
KNOWN_OPTIONS = frozenset(
    name.lower()
    for name in (
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "minPartitions",
        "maxBytesPerPartition",
        "failOnDataLoss",
        "includeHeaders",
        "tiered.gateway.url",
        "tiered.cluster",
        "tiered.gateway.token",
        "tiered.includeControlRecords",
        "tiered.mode",
        "tiered.timestampsOrdered",
        "kafkaConsumer.pollTimeoutMs",
        "groupIdPrefix",
    )
)
#: Spark Kafka options that do not apply to a batch read of remote storage (ignored, as Spark ignores them)
IGNORED_OPTIONS = frozenset(
    name.lower()
    for name in (
        "path",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "maxRecordsPerPartition",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
    )
)


class OptionError(ConfigError, ValueError):
    """An option of the data source is missing, malformed or not allowed; the message names it."""


# -- offset specifications -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Earliest:
    """The first offset held in remote storage."""


@dataclass(frozen=True, slots=True)
class Latest:
    """One past the last offset held in remote storage."""


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """Per partition: an offset, or ``EARLIEST`` (-2) / ``LATEST`` (-1)."""

    offsets: dict[TopicPartition, int]
    option: str


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    """One timestamp (ms) for every partition."""

    timestamp_ms: int
    option: str


@dataclass(frozen=True, slots=True)
class SpecificTimestamps:
    """Per partition: a timestamp (ms)."""

    timestamps: dict[TopicPartition, int]
    option: str


OffsetSpec = Earliest | Latest | SpecificOffsets | GlobalTimestamp | SpecificTimestamps


# -- topic selection ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    pattern: str


@dataclass(frozen=True, slots=True)
class Assign:
    partitions: dict[str, tuple[int, ...]]


TopicSelection = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True)
class ReadOptions:
    """The parsed, validated options of one read (picklable: shipped to Spark's Python workers)."""

    gateway_url: str
    cluster: str
    token: str | None = field(repr=False)  # a secret: never in a repr
    selection: TopicSelection
    starting: OffsetSpec
    ending: OffsetSpec
    no_match_start: Literal["error", "latest"] = "error"
    min_partitions: int | None = None
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    fail_on_data_loss: bool = True
    include_headers: bool = False
    include_control_records: bool = False
    timestamps_ordered: bool = False  # tiered.timestampsOrdered (pushdown module doc, rule 4)
    read_committed: bool = False
    ignored: tuple[str, ...] = field(default=())
    mode: Mode = Mode.REMOTE_ONLY  # tiered.mode; the hybrid modes: kafka_config (librdkafka settings), poll_timeout_ms
    kafka_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold sasl.password
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    kafka_group_id: str = ""  # the hybrid modes' consumers' group.id (kafka_options.group_id)

    def topic_partitions(self, available: Mapping[str, list[int]], *, strict: bool = True, both_tiers: bool = False) -> list[TopicPartition]:
        """The partitions to read, sorted, given the gateway's ``topics()`` (topic → partitions;
        ``both_tiers``: the hybrid modes' union of the gateway's and Kafka's, named so in errors).

        Unknown topics or partitions raise :class:`OptionError` naming the option. ``strict=False``
        (a running stream discovering partitions): they are left out, and the offsets JSON is not
        checked against the partitions (new ones start at earliest, as in Spark's Kafka source)."""
        selection, cluster = self.selection, repr(self.cluster)
        holds = f"neither Kafka nor the gateway (cluster {cluster}) has" if both_tiers else f"the gateway serves no remote data in cluster {cluster} for"
        if not strict:
            if isinstance(selection, Assign):
                return sorted((t, p) for t, ps in selection.partitions.items() for p in ps if p in available.get(t, ()))
            wanted = selection.topics if isinstance(selection, Subscribe) else [t for t in available if re.fullmatch(selection.pattern, t)]
            return sorted((t, p) for t in wanted for p in available.get(t, ()))
        if isinstance(selection, Subscribe):
            missing = [t for t in selection.topics if t not in available]
            if missing:
                raise OptionError(
                    f"option 'subscribe': unknown topic(s) {', '.join(map(repr, missing))}: {holds} them (topics: {_listing(available)})"
                )
            chosen = [(t, p) for t in selection.topics for p in available[t]]
        elif isinstance(selection, SubscribePattern):
            regex = re.compile(selection.pattern)
            topics = [t for t in available if regex.fullmatch(t)]
            if not topics:
                raise OptionError(
                    f"option 'subscribePattern': {selection.pattern!r} matches no topic {'of Kafka or' if both_tiers else 'with remote data in'} "
                    f"{'the gateway (cluster ' + cluster + ')' if both_tiers else 'cluster ' + cluster} (topics: {_listing(available)})"
                )
            chosen = [(t, p) for t in topics for p in available[t]]
        else:
            chosen = []
            for topic, partitions in selection.partitions.items():
                if topic not in available:
                    raise OptionError(
                        f"option 'assign': unknown topic {topic!r}: {holds} it (topics: {_listing(available)})"
                    )
                unknown = sorted(set(partitions) - set(available[topic]))
                if unknown:
                    raise OptionError(
                        f"option 'assign': unknown partition(s) {unknown} of topic {topic!r} ({'Kafka and the gateway have' if both_tiers else 'the gateway has'} partitions {sorted(available[topic])})"
                    )
                chosen.extend((topic, p) for p in partitions)
        chosen = sorted(set(chosen))
        for spec in (self.starting, self.ending):
            named = spec.offsets if isinstance(spec, SpecificOffsets) else spec.timestamps if isinstance(spec, SpecificTimestamps) else None
            if named is not None and set(named) != set(chosen):
                raise OptionError(
                    f"option '{spec.option}' must name every partition read and only those "  # type: ignore[union-attr]
                    f"(Spark's rule; use -2 for earliest, -1 for latest): it names {_tps(named)}, the read covers {_tps(chosen)}"
                )
        return chosen


# -- parsing -------------------------------------------------------------------------------------


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """Validate ``options`` (names case-insensitive) into :class:`ReadOptions`, or raise :class:`OptionError`.

    ``streaming``: Spark's rules for streaming queries instead of batch ones (``KafkaSourceProvider``'s
    ``validateStreamOptions``): ``startingOffsets`` defaults to ``latest`` and may be ``latest``
    (or -1), ending options are not allowed; ``ending`` is then :class:`Latest` (unused)."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}

    unknown = sorted(k for k in opts if k not in KNOWN_OPTIONS and k not in IGNORED_OPTIONS and not k.startswith("kafka."))
    if unknown:
        log.warning("tiered-kafka: ignoring unknown option(s) %s", ", ".join(unknown))
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError(f"option 'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed' (Kafka's isolation.level), got {isolation!r}")

    mode = parse_mode(opts, OptionError)
    kafka_config = kafka_settings(opts, mode, OptionError)
    gateway_url = _required(opts, "tiered.gateway.url")
    if not gateway_url.startswith(("http://", "https://")):
        raise OptionError(f"option 'tiered.gateway.url' must start with http:// or https://, got {gateway_url!r}")
    cluster = _required(opts, "tiered.cluster")
    token = opts.get("tiered.gateway.token") or None

    selection = _selection(opts)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {strategy!r}")
    starting = _offset_spec(opts, "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets", default=Latest() if streaming else Earliest())
    ending = _offset_spec(opts, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets", default=Latest())
    if streaming:
        given = [n for n in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp") if n.lower() in opts]
        if given:
            raise OptionError(f"option '{given[0]}' is not valid in streaming queries (Spark's rule: a stream reads on)")
    elif isinstance(starting, Latest):
        raise OptionError("option 'startingOffsets': starting offset can't be latest for batch queries (Spark's rule)")
    if isinstance(starting, SpecificOffsets) and not streaming:
        for tp, offset in sorted(starting.offsets.items()):
            if offset == LATEST:
                raise OptionError(f"option 'startingOffsets': startingOffsets for {_tp(tp)} can't be latest (-1) for batch queries (Spark's rule)")
    if isinstance(ending, Earliest) and not streaming:
        raise OptionError("option 'endingOffsets': ending offset can't be earliest for batch queries (Spark's rule)")
    if isinstance(ending, SpecificOffsets):
        for tp, offset in sorted(ending.offsets.items()):
            if offset == EARLIEST:
                raise OptionError(f"option 'endingOffsets': endingOffsets for {_tp(tp)} can't be earliest (-2) for batch queries (Spark's rule)")
    if isinstance(selection, Assign):
        assigned = {(t, p) for t, ps in selection.partitions.items() for p in ps}
        for spec in (starting, ending):
            named = spec.offsets if isinstance(spec, SpecificOffsets) else spec.timestamps if isinstance(spec, SpecificTimestamps) else None
            if named is not None and set(named) != assigned:
                raise OptionError(
                    f"option '{spec.option}' must name every assigned partition and only those "  # type: ignore[union-attr]
                    f"(Spark's rule; use -2 for earliest, -1 for latest): it names {_tps(named)}, 'assign' has {_tps(assigned)}"
                )

    min_partitions = positive_int_option(opts, "minPartitions")
    max_bytes = DEFAULT_MAX_BYTES_PER_PARTITION
    if opts.get("maxbytesperpartition", "").strip():
        max_bytes = parse_bytes(opts["maxbytesperpartition"], "maxBytesPerPartition")

    return ReadOptions(
        gateway_url=gateway_url.rstrip("/"),
        cluster=cluster,
        token=token,
        selection=selection,
        starting=starting,
        ending=ending,
        no_match_start=strategy,  # type: ignore[arg-type]
        min_partitions=min_partitions,
        max_bytes_per_partition=max_bytes,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        include_control_records=_bool(opts, "tiered.includeControlRecords", False),
        timestamps_ordered=_bool(opts, "tiered.timestampsOrdered", False),
        read_committed=isolation == "read_committed",
        ignored=tuple(unknown),
        mode=mode,
        kafka_config=kafka_config,
        poll_timeout_ms=poll_timeout_ms(opts, OptionError),
        kafka_group_id=group_id(opts, mode),
    )


def parse_bytes(text: str, option: str) -> int:
    """``"1048576"``, ``"64k"``, ``"128m"``, ``"1g"`` (binary units; ``b``/``ib`` suffixes allowed) → bytes."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not match or int(match.group(1)) <= 0:
        raise OptionError(f"option '{option}' must be a positive byte count such as 134217728 or 128m, got {text!r}")
    return int(match.group(1)) * 1024 ** " kmgt".index(match.group(2) or " ")


def _required(opts: Mapping[str, str], name: str) -> str:
    value = opts.get(name.lower(), "").strip()
    if not value:
        raise OptionError(f"option '{name}' is required by the tiered-kafka source")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    text = opts.get(name.lower(), "").strip().lower()
    if not text:
        return default
    value = parse_bool(text)
    if value is None:
        raise OptionError(f"option '{name}' must be 'true' or 'false', got {opts[name.lower()]!r}")
    return value


def positive_int_option(opts: Mapping[str, str], name: str) -> int | None:
    """Option ``name`` (``opts`` keyed in lower case) as a positive integer; None when absent or
    blank; ``OptionError`` otherwise."""
    text = opts.get(name.lower(), "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"option '{name}': invalid value {text!r}, must be a positive integer")
    return value


def _selection(opts: Mapping[str, str]) -> TopicSelection:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in opts]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(map(repr, given))} were both given: only one of 'subscribe', 'subscribePattern', 'assign' can be specified")
    if not given:
        raise OptionError("one of the options 'subscribe', 'subscribePattern', 'assign' must be specified")
    name = given[0]
    text = opts[name.lower()].strip()
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if not topics:
            raise OptionError(f"option 'subscribe' names no topic: got {text!r} (expected comma-separated topic names)")
        bad = [t for t in topics if not is_legal_topic_name(t)]
        if bad:
            raise OptionError(f"option 'subscribe': invalid topic name(s) {', '.join(map(repr, bad))} ({TOPIC_NAME_RULE})")
        return Subscribe(topics)
    if name == "subscribePattern":
        if not text:
            raise OptionError("option 'subscribePattern' is empty")
        try:
            re.compile(text)
        except re.error as err:
            raise OptionError(f"option 'subscribePattern': {text!r} is not a valid regular expression ({err})") from None
        return SubscribePattern(text)
    example = '{"topicA":[0,1],"topicB":[0]}'
    data = _json(text, "assign", example)
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option 'assign' must be a JSON object of topics to partition lists, e.g. {example}, got {text!r}")
    bad = [t for t in data if not is_legal_topic_name(t)]
    if bad:
        raise OptionError(f"option 'assign': invalid topic name(s) {', '.join(map(repr, bad))} ({TOPIC_NAME_RULE})")
    partitions: dict[str, tuple[int, ...]] = {}
    for topic, items in data.items():
        if not isinstance(items, list) or not items or not all(_is_int(p) and p >= 0 for p in items):
            raise OptionError(f"option 'assign': topic {topic!r} must map to a non-empty list of partition numbers, e.g. {example}, got {items!r}")
        partitions[topic] = tuple(sorted(set(items)))
    return Assign(partitions)


def _offset_spec(opts: Mapping[str, str], global_ts: str, by_ts: str, offsets: str, *, default: OffsetSpec) -> OffsetSpec:
    if global_ts.lower() in opts:
        text = opts[global_ts.lower()].strip()
        try:
            value = int(text)
        except ValueError:
            raise OptionError(f"option '{global_ts}' should be a long (ms since the epoch), but {text!r} is given") from None
        if value < 0:
            raise OptionError(f"option '{global_ts}' must be >= 0 (ms since the epoch), got {value}")
        return GlobalTimestamp(value, global_ts)
    if by_ts.lower() in opts:
        values = _partition_json(opts[by_ts.lower()], by_ts, '{"topicA":{"0":1700000000000,"1":1700000000000}}')
        bad = {tp: v for tp, v in values.items() if v < 0}
        if bad:
            raise OptionError(f"option '{by_ts}': timestamps must be >= 0 (ms since the epoch), got {_tps_values(bad)}")
        return SpecificTimestamps(values, by_ts)
    if offsets.lower() in opts:
        text = opts[offsets.lower()].strip()
        if text.lower() == "earliest":
            return Earliest()
        if text.lower() == "latest":
            return Latest()
        values = _partition_json(text, offsets, '{"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}', accept="'earliest', 'latest' or ")
        bad = {tp: v for tp, v in values.items() if v < EARLIEST}
        if bad:
            raise OptionError(f"option '{offsets}': offsets must be >= 0, or -2 (earliest) / -1 (latest), got {_tps_values(bad)}")
        return SpecificOffsets(values, offsets)
    return default


def _partition_json(text: str, option: str, example: str, accept: str = "") -> dict[TopicPartition, int]:
    data = _json(text, option, example, accept)
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option '{option}' must be {accept}a JSON object like {example}, got {text!r}")
    out: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict) or not partitions:
            raise OptionError(f"option '{option}': topic {topic!r} must map to an object of partition → value, e.g. {example}, got {partitions!r}")
        for key, value in partitions.items():
            if not re.fullmatch(r"[0-9]+", key) or not _is_int(value):
                raise OptionError(f"option '{option}': topic {topic!r} has {key!r}: {value!r}; expected a partition number and an integer, e.g. {example}")
            out[(topic, int(key))] = value
    return out


def _json(text: str, option: str, example: str, accept: str = "") -> Any:
    try:
        return json.loads(text)
    except ValueError as err:
        raise OptionError(f"option '{option}' is not valid JSON ({err}): expected {accept}e.g. {example}, got {text!r}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _tps(tps: Any) -> str:
    return "[" + ", ".join(_tp(tp) for tp in sorted(tps)) + "]"


def _tps_values(values: Mapping[TopicPartition, int]) -> str:
    return ", ".join(f"{_tp(tp)}: {v}" for tp, v in sorted(values.items()))


def _listing(available: Mapping[str, list[int]]) -> str:
    names = sorted(available)
    shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
    return shown or "none"
