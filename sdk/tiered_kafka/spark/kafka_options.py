"""``tiered.mode`` and the Kafka consumer options of the ``tiered-kafka`` Spark source (no pyspark, no network).

``tiered.mode`` (``tiered_kafka.modes``; case-insensitive):
    ``REMOTE_ONLY``       the default: remote storage only (``options`` module doc)
    ``REMOTE_PREFERRED``  remote storage while it holds the offsets, Kafka for the rest (its tail,
                          and what remote storage no longer holds)
    ``KAFKA_PREFERRED``   Kafka from its log start, remote storage for what Kafka no longer holds
    ``KAFKA_ONLY``        refused: that is Spark's own ``format("kafka")``

In the two hybrid modes the executors read Kafka with confluent-kafka (``kafka_reading``) and the
driver asks Kafka its log start and end (``hybrid``), so they need Kafka's options, named as in
Spark's Kafka source:
    ``kafka.bootstrap.servers``  required (a clear error otherwise)
    ``kafka.isolation.level``    ``read_uncommitted`` (default) or ``read_committed``: the end is
                                 then Kafka's last stable offset, and confluent's consumer leaves out
                                 aborted records and control records itself
    ``kafka.*``                  any other librdkafka setting (security, timeouts), passed as is
                                 without the prefix. Settings the reader owns are refused as
                                 Spark's source refuses them (``KafkaSourceProvider``):
                                 ``auto.offset.reset``, ``enable.auto.commit``, key/value
                                 deserializers, and librdkafka's ``enable.partition.eof`` /
                                 ``enable.auto.offset.store`` (the reader's exactness needs them).
                                 Java-client-only settings (``sasl.jaas.config``, keystores and
                                 truststores) are refused naming librdkafka's equivalent; a
                                 setting librdkafka rejects is an ``OptionError`` naming it
                                 (:func:`kafka_client`).
    ``kafka.group.id`` / ``groupIdPrefix``  the group id librdkafka requires of a consumer (Spark 3's
                                 options): ``kafka.group.id`` as given, else ``<groupIdPrefix>-<uuid>``
                                 per query (prefix default ``tiered-kafka-spark``). No group is
                                 joined (assign only, no commit); group errors librdkafka reports
                                 (GROUP_AUTHORIZATION_FAILED from its FindCoordinator) are ignored
                                 by the reader (``kafka_reading``).
    ``kafkaConsumer.pollTimeoutMs``  how long an executor waits for an offset Kafka should hold
                                 (Spark's option; default 120000, Spark's ``spark.network.timeout``)

In REMOTE_ONLY the ``kafka.*`` options stay accepted and ignored (a job switches formats unchanged).
Values of ``kafka.*`` are never logged (they may hold SASL passwords).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from typing import TypeVar

from tiered_kafka.modes import Mode, reads_kafka

T = TypeVar("T")

DEFAULT_POLL_TIMEOUT_MS = 120_000
"""Spark's ``kafkaConsumer.pollTimeoutMs`` default (``spark.network.timeout``, 120 s)."""

#: librdkafka settings the executor's reader sets itself (Spark's source refuses the same ones)
OWNED_SETTINGS = frozenset(
    ("auto.offset.reset", "enable.auto.commit", "key.deserializer", "value.deserializer", "enable.auto.offset.store", "enable.partition.eof", "isolation.level")
)
#: Java-client settings librdkafka does not have (common in jobs written for format("kafka")) → what to use
JAVA_ONLY_SETTINGS = {
    "sasl.jaas.config": "sasl.username and sasl.password (or sasl.oauthbearer.*)",
    "ssl.truststore.location": "ssl.ca.location (a PEM file)",
    "ssl.truststore.password": "ssl.ca.location (a PEM file)",
    "ssl.truststore.type": "ssl.ca.location (a PEM file)",
    "ssl.keystore.type": "ssl.keystore.location (PKCS#12) or ssl.certificate.location and ssl.key.location",
    "ssl.key.password": "ssl.key.password is librdkafka's too, with ssl.key.location",
}
DEFAULT_GROUP_ID_PREFIX = "tiered-kafka-spark"


def parse_mode(opts: Mapping[str, str], error: type[Exception]) -> Mode:
    """``tiered.mode`` of lower-cased ``opts``; ``error`` (the options' ``OptionError``) names a bad one."""
    text = opts.get("tiered.mode", "REMOTE_ONLY").strip().upper()
    try:
        mode = Mode(text)
    except ValueError:
        raise error(f"option 'tiered.mode' must be one of {', '.join(m.value for m in Mode)}, got {text!r}") from None
    if mode is Mode.KAFKA_ONLY:
        raise error("option 'tiered.mode': 'KAFKA_ONLY' is not supported by the tiered-kafka Spark source: use Spark's format(\"kafka\")")
    return mode


def kafka_settings(opts: Mapping[str, str], mode: Mode, error: type[Exception]) -> tuple[tuple[str, str], ...]:
    """librdkafka settings from the ``kafka.*`` options (prefix removed, sorted); empty in REMOTE_ONLY.
    The hybrid modes require ``kafka.bootstrap.servers``."""
    if not reads_kafka(mode):
        return ()
    settings = {name[len("kafka.") :]: value for name, value in opts.items() if name.startswith("kafka.")}
    if not settings.get("bootstrap.servers", "").strip():
        raise error(f"option 'kafka.bootstrap.servers' is required with tiered.mode={mode.value} (executors read Kafka's offsets not in remote storage)")
    owned = sorted(set(settings) & (OWNED_SETTINGS - {"isolation.level"}))
    if owned:
        raise error(f"option 'kafka.{owned[0]}' is not supported: the tiered-kafka source reads Kafka with assign and seek and sets it itself (Spark's rule)")
    java = sorted(set(settings) & (set(JAVA_ONLY_SETTINGS) - {"ssl.key.password"}))
    if java:
        raise error(f"option 'kafka.{java[0]}' is a Java client setting that librdkafka (confluent-kafka) does not have: use kafka.{JAVA_ONLY_SETTINGS[java[0]]}")
    settings.pop("isolation.level", None)  # ReadOptions.read_committed carries it
    settings.pop("group.id", None)  # ReadOptions.kafka_group_id carries it (group_id)
    return tuple(sorted(settings.items()))


def group_id(opts: Mapping[str, str], mode: Mode) -> str:
    """The consumers' ``group.id`` (module doc): ``kafka.group.id``, else ``<groupIdPrefix>-<uuid>``;
    empty in REMOTE_ONLY."""
    if not reads_kafka(mode):
        return ""
    given = opts.get("kafka.group.id", "").strip()
    if given:
        return given
    prefix = opts.get("groupidprefix", "").strip() or DEFAULT_GROUP_ID_PREFIX
    return f"{prefix}-{uuid.uuid4()}"


def kafka_client(factory: Callable[[dict[str, object]], T], config: dict[str, object]) -> T:
    """``factory(config)`` (a confluent-kafka client); librdkafka's refusal of a setting
    (``_INVALID_ARG``) becomes an ``OptionError`` naming ``kafka.<name>``."""
    from confluent_kafka import KafkaError, KafkaException

    from tiered_kafka.spark.options import OptionError

    try:
        return factory(config)
    except KafkaException as err:
        kafka_error = err.args[0] if err.args else None
        if not isinstance(kafka_error, KafkaError) or kafka_error.code() != KafkaError._INVALID_ARG:
            raise
        text = kafka_error.str()
        named = re.search(r'"([^"]+)"', text)
        name = named.group(1) if named else next((k for k in config if k in text), None)
        raise OptionError(f"option 'kafka.{name}': librdkafka refused it: {text}" if name else f"a kafka.* option was refused by librdkafka: {text}") from None


def poll_timeout_ms(opts: Mapping[str, str], error: type[Exception]) -> int:
    text = opts.get("kafkaconsumer.polltimeoutms", "").strip()
    if not text:
        return DEFAULT_POLL_TIMEOUT_MS
    if not text.isdigit() or int(text) <= 0:
        raise error(f"option 'kafkaConsumer.pollTimeoutMs' must be a positive number of milliseconds, got {text!r}")
    return int(text)
