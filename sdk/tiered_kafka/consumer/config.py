"""TieredConsumer's configuration: confluent-kafka's keys, ours (``tiered.*``), and Pinterest's.

Every key that is not ours goes to the wrapped ``confluent_kafka.Consumer`` unchanged (it
validates them), except those the SDK must apply itself because remote reads bypass librdkafka:
``auto.offset.reset``, ``enable.auto.offset.store``, ``enable.auto.commit``,
``auto.commit.interval.ms`` and ``isolation.level`` are read here, and librdkafka gets
``auto.offset.reset=error`` (so that OFFSET_OUT_OF_RANGE reaches us),
``enable.auto.offset.store=false`` and ``enable.auto.commit=false`` (we store and commit the
offsets of records of either source).

Ours (defaults in brackets):

    tiered.mode                    [REMOTE_PREFERRED] REMOTE_ONLY, KAFKA_ONLY, REMOTE_PREFERRED, KAFKA_PREFERRED
    tiered.gateway.url             the gateway, e.g. http://gateway:8080 (required unless KAFKA_ONLY)
    tiered.gateway.token           bearer token or API key for the gateway
    tiered.cluster                 the cluster name the gateway serves the topics under (required unless KAFKA_ONLY)
    tiered.prefetch.max.bytes      [134217728] memory for prefetched remote data, all partitions together
    tiered.prefetch.parallelism    [4] concurrent presigned GETs
    tiered.plan.max.bytes          [derived] caps the bytes asked per read plan (one GET each); unset, plans
                                   are sized by the budget: a reader's share of the prefetch budget split
                                   among its ranges in flight, within the gateway's default max_bytes_limit
                                   (``prefetch.plan_bytes``; 16 MiB with the defaults); set it when the
                                   gateway runs with a smaller max_bytes_limit
    tiered.remote.retries          [5] retries of a failed gateway call or GET before the error surfaces
    tiered.remote.retry.backoff.ms [100] first backoff (doubles each retry)
    tiered.gateway.timeout.ms      [10000] HTTP timeout of one gateway call or GET
    tiered.remote.poll.interval.ms [1000] REMOTE_ONLY at the end of remote storage: how often to look for new segments
    tiered.remote.gap.policy       [error] a gap in remote storage that Kafka cannot fill: error (the partition's
                                   OFFSET_OUT_OF_RANGE error message) or skip (logged, reading continues after it)

Pinterest's ``TieredStorageConsumer`` names are accepted where the meaning is the same:
``tiered.storage.mode`` (``TIERED_STORAGE_ONLY``/``TIERED_STORAGE_PREFERRED`` are our REMOTE_*),
``kafka.cluster.id`` (= tiered.cluster) and ``offset.reset.policy`` (EARLIEST, LATEST, NONE =
auto.offset.reset earliest, latest, error). Its ``storage.service.endpoint.*`` keys point the
consumer at S3 directly, which this SDK never does (clients get presigned URLs from the gateway),
so they are refused with a message saying what to set instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tiered_kafka.consumer.prefetch import THREAD_OVERHEAD
from tiered_kafka.errors import ConfigError
from tiered_kafka.modes import Mode, reads_kafka, reads_remote
from tiered_kafka.properties import parse_bool

#: ``tiered.prefetch.max.bytes``: twice librdkafka's queued.max.messages.kbytes (64 MiB), because a
#: range is reserved three times over while it is fetched (``prefetch.IN_FLIGHT_FACTOR``)
#: and the fetch threads are paid from it too: one partition then plans 16 MiB at a time, the GET
#: size at which S3's per-request cost stops mattering (#15: about 90 S3 GETs per GB, bench_plans.py)
DEFAULT_PREFETCH_MAX_BYTES = 128 * 2**20

_PINTEREST_MODES = {
    "TIERED_STORAGE_ONLY": Mode.REMOTE_ONLY,
    "TIERED_STORAGE_PREFERRED": Mode.REMOTE_PREFERRED,
    "KAFKA_ONLY": Mode.KAFKA_ONLY,
    "KAFKA_PREFERRED": Mode.KAFKA_PREFERRED,
}
_PINTEREST_RESET = {"EARLIEST": "earliest", "LATEST": "latest", "NONE": "error"}
_RESET_ALIASES = {"smallest": "earliest", "beginning": "earliest", "earliest": "earliest", "largest": "latest", "end": "latest", "latest": "latest", "error": "error"}


@dataclass(frozen=True)
class TieredConfig:
    mode: Mode
    gateway_url: str | None
    gateway_token: str | None = field(repr=False)  # a secret: out of the default repr
    cluster: str | None
    prefetch_max_bytes: int
    prefetch_parallelism: int
    plan_max_bytes: int | None  # None: sized by the prefetch budget (prefetch.plan_bytes)
    remote_retries: int
    remote_retry_backoff_s: float
    gateway_timeout_s: float
    remote_poll_interval_s: float
    gap_skip: bool
    auto_offset_reset: str  # earliest | latest | error
    auto_offset_store: bool
    auto_commit: bool
    auto_commit_interval_s: float
    cooperative: bool  # incremental rebalancing: cooperative-sticky, or the KIP-848 consumer protocol
    read_committed: bool
    # what the wrapped confluent_kafka.Consumer gets (None when no bootstrap.servers); out of the default
    # repr: it may hold sasl.password, ssl.key.password, ssl.key.pem and the like
    kafka: dict[str, Any] = field(repr=False)

    @property
    def has_kafka(self) -> bool:
        return bool(self.kafka.get("bootstrap.servers"))


def parse_config(config: dict[str, Any]) -> TieredConfig:
    """Split and validate a TieredConsumer configuration (see the module docstring)."""
    if not isinstance(config, dict):
        raise ConfigError(f"configuration must be a dict, got {type(config).__name__}")
    rest = dict(config)
    for key in [k for k in rest if k.startswith("storage.service.endpoint.")]:
        raise ConfigError(f"{key}: this SDK does not read S3 directly; set tiered.gateway.url and tiered.cluster (the gateway presigns reads)")
    mode_name = rest.pop("tiered.mode", None)
    pinterest_mode = rest.pop("tiered.storage.mode", None)
    if mode_name is None and pinterest_mode is not None:
        if str(pinterest_mode).upper() not in _PINTEREST_MODES:
            raise ConfigError(f"tiered.storage.mode: {pinterest_mode!r} is not one of {', '.join(_PINTEREST_MODES)}")
        mode = _PINTEREST_MODES[str(pinterest_mode).upper()]
    else:
        mode = _mode(mode_name if mode_name is not None else Mode.REMOTE_PREFERRED.value)
    cluster = rest.pop("tiered.cluster", None)
    pinterest_cluster = rest.pop("kafka.cluster.id", None)
    cluster = cluster if cluster is not None else pinterest_cluster

    reset = rest.pop("auto.offset.reset", None)
    pinterest_reset = rest.pop("offset.reset.policy", None)
    if reset is None and pinterest_reset is not None:
        if str(pinterest_reset).upper() not in _PINTEREST_RESET:
            raise ConfigError(f"offset.reset.policy: {pinterest_reset!r} is not one of EARLIEST, LATEST, NONE")
        reset = _PINTEREST_RESET[str(pinterest_reset).upper()]
    reset = _RESET_ALIASES.get(str(reset if reset is not None else "latest").lower())
    if reset is None:
        raise ConfigError(f"auto.offset.reset: {config.get('auto.offset.reset')!r} is not one of earliest, latest, error")

    isolation = str(rest.get("isolation.level", "read_committed"))
    if isolation not in ("read_committed", "read_uncommitted"):
        raise ConfigError(f"isolation.level: {isolation!r} is not read_committed or read_uncommitted")

    gateway_url = rest.pop("tiered.gateway.url", None)
    token = rest.pop("tiered.gateway.token", None)
    tiered = TieredConfig(
        mode=mode,
        gateway_url=None if gateway_url is None else str(gateway_url),
        gateway_token=None if token is None else str(token),
        cluster=None if cluster is None else str(cluster),
        prefetch_max_bytes=_int(rest, "tiered.prefetch.max.bytes", DEFAULT_PREFETCH_MAX_BYTES, minimum=2**16),
        prefetch_parallelism=_int(rest, "tiered.prefetch.parallelism", 4, minimum=1),
        plan_max_bytes=_optional_int(rest, "tiered.plan.max.bytes", minimum=1024),
        remote_retries=_int(rest, "tiered.remote.retries", 5, minimum=0),
        remote_retry_backoff_s=_int(rest, "tiered.remote.retry.backoff.ms", 100, minimum=0) / 1000,
        gateway_timeout_s=_int(rest, "tiered.gateway.timeout.ms", 10_000, minimum=1) / 1000,
        remote_poll_interval_s=_int(rest, "tiered.remote.poll.interval.ms", 1000, minimum=1) / 1000,
        gap_skip=_choice(rest, "tiered.remote.gap.policy", ("error", "skip"), "error") == "skip",
        auto_offset_reset=reset,
        auto_offset_store=_bool(rest.pop("enable.auto.offset.store", True), "enable.auto.offset.store"),
        auto_commit=_bool(rest.pop("enable.auto.commit", True), "enable.auto.commit"),
        auto_commit_interval_s=_int(rest, "auto.commit.interval.ms", 5000, minimum=1) / 1000,
        cooperative="cooperative" in str(rest.get("partition.assignment.strategy", "")) or str(rest.get("group.protocol", "classic")) == "consumer",
        read_committed=isolation == "read_committed",
        kafka=rest,
    )
    unknown = [k for k in rest if k.startswith("tiered.")]
    if unknown:
        raise ConfigError(f"unknown configuration key(s): {', '.join(sorted(unknown))}")
    if reads_remote(mode) and (not tiered.gateway_url or not tiered.cluster):
        raise ConfigError(f"mode {mode.value} reads remote storage: set tiered.gateway.url and tiered.cluster")
    if reads_kafka(mode) and not tiered.has_kafka:
        raise ConfigError(f"mode {mode.value} reads from Kafka: set bootstrap.servers")
    if tiered.gateway_url is not None and not tiered.gateway_url.startswith(("http://", "https://")):
        raise ConfigError(f"tiered.gateway.url must start with http:// or https://, got {tiered.gateway_url!r}")
    if "enable.partition.eof" in rest:
        rest["enable.partition.eof"] = _bool(rest["enable.partition.eof"], "enable.partition.eof")
    least = tiered.prefetch_parallelism * THREAD_OVERHEAD + 2**20
    if reads_remote(mode) and tiered.prefetch_max_bytes < least:
        raise ConfigError(
            f"tiered.prefetch.max.bytes: {tiered.prefetch_max_bytes} leaves no room for data with "
            f"tiered.prefetch.parallelism={tiered.prefetch_parallelism}; give at least {least}"
        )
    # librdkafka reports OFFSET_OUT_OF_RANGE to us, lets us store offsets, and leaves commits to us
    rest.update({"auto.offset.reset": "error", "enable.auto.offset.store": False, "enable.auto.commit": False})
    return tiered


def _mode(value: Any) -> Mode:
    try:
        return Mode(str(value).upper())
    except ValueError:
        raise ConfigError(f"tiered.mode: {value!r} is not one of {', '.join(m.value for m in Mode)}") from None


def _int(config: dict[str, Any], key: str, default: int, minimum: int) -> int:
    raw = config.pop(key, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{key}: {value} is below the minimum {minimum}")
    return value


def _optional_int(config: dict[str, Any], key: str, minimum: int) -> int | None:
    """``key``'s integer, or None when it is absent (or given as None)."""
    if config.get(key) is None:
        config.pop(key, None)
        return None
    return _int(config, key, 0, minimum)


def _bool(raw: Any, key: str) -> bool:
    value = parse_bool(raw)
    if value is None:
        raise ConfigError(f"{key}: expected true or false, got {raw!r}")
    return value


def _choice(config: dict[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = str(config.pop(key, default)).lower()
    if value not in choices:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(choices)}")
    return value
