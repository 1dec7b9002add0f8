"""TieredConsumer's one error channel, with confluent-kafka's rule for what is a Message and what is raised.

confluent-kafka's ``Consumer`` reports what goes wrong with *a partition's data* as a Message whose
``error()`` is a ``KafkaError`` (librdkafka's consumer errors: TOPIC_AUTHORIZATION_FAILED,
_AUTO_OFFSET_RESET, UNKNOWN_TOPIC_OR_PART...), and raises what concerns *the call or the client*
(a bad argument or configuration, a closed consumer, a failed synchronous commit, an exception of
the application's own rebalance callback). TieredConsumer follows it, for both tiers:

Delivered as a Message (``poll``/``consume`` return it, before any record of the same call's later
fetches; ``topic()``/``partition()`` name the partition, ``offset()`` its position or
OFFSET_INVALID; the position does not move):

=================================================  ==========================  =========================================
what happened                                      ``error().code()``          then
=================================================  ==========================  =========================================
the gateway's 403 (``TopicAuthorizationError``)    TOPIC_AUTHORIZATION_FAILED  once per event; the partition stops until
                                                                               a seek, an assign or a mode change
auto.offset.reset=error and no valid offset        _AUTO_OFFSET_RESET          as librdkafka; waits for a seek
a recorded gap, ``tiered.remote.gap.policy=error`` OFFSET_OUT_OF_RANGE         met again by the next read until the
(``RemoteGapError``), or remote data gone                                      application seeks past it
(``OffsetOutOfRangeError``)
auto.offset.reset moved the position forward      OFFSET_OUT_OF_RANGE         the partition goes on at the new
over offsets some tier holds (e.g. remote storage                              position; the message names the
under KAFKA_ONLY; ``positions``)                                               offsets and which tier holds them
the gateway knows no such partition (404)          UNKNOWN_TOPIC_OR_PART       retried by the next poll
corrupt remote data (``FormatError``)              INVALID_MSG (Kafka's        retried by the next poll
                                                   CORRUPT_MESSAGE)
a gateway or S3 failure that outlived the retries  _TRANSPORT, ``retriable()``  retried by the next poll (the remote
(``RemoteReadError``), a Kafka call failing while                              reader restarts at the position)
locating the data (``KafkaException``)             its own code
=================================================  ==========================  =========================================

Raised (``KafkaException`` or a ``tiered_kafka.errors`` class): configuration and usage errors
(``ConfigError``, ``ValueError``, ``RuntimeError("Consumer closed")``), a failed synchronous commit
(``commit(asynchronous=False)``, and the commits made on revoke and close: from the call that made
it, or, for a rebalance inside ``poll``, from that ``poll`` or the next), an exception of the
application's rebalance callback (from the ``poll`` that ran it, as confluent-kafka), and anything
unexpected (a bug is never turned into a Message). Calls other than ``poll``/``consume`` (``assign``,
``seek``, ``get_watermark_offsets``...) raise their failures, gateway ones included, as
confluent-kafka's calls raise ``KafkaException``; partitions whose start failed (in ``assign``, or in
a rebalance inside ``poll``) stay *pending*: each ``poll`` starts them again where they were asked to
start, and a failure then is their error Message.
"""

from __future__ import annotations

import logging
from collections import deque

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, Message

from tiered_kafka.consumer.tiers import is_authorization_failure
from tiered_kafka.errors import ConfigError, FormatError, GatewayRequestError, OffsetOutOfRangeError, RemoteGapError, RemoteReadError

log = logging.getLogger(__name__)


def partition_error(error: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a per-partition failure is delivered as (module table); None: it is raised."""
    reason = f"{type(error).__name__}: {error}"
    if isinstance(error, ConfigError):
        return None
    if is_authorization_failure(error):
        return KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, reason)
    if isinstance(error, (RemoteGapError, OffsetOutOfRangeError)):
        return KafkaError(KafkaError.OFFSET_OUT_OF_RANGE, reason)
    if isinstance(error, GatewayRequestError) and error.code == "unknown_topic_or_partition":
        return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, reason, retriable=True)
    if isinstance(error, FormatError):
        return KafkaError(KafkaError.INVALID_MSG, reason, retriable=True)
    if isinstance(error, RemoteReadError):
        return KafkaError(KafkaError._TRANSPORT, reason, retriable=True)
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError) and not error.args[0].fatal():
        return error.args[0]
    return None


def error_message(topic: str, partition: int, offset: int | None, code: int, reason: str) -> Message:
    """A partition's error as confluent-kafka delivers it: ``poll()`` returns a Message whose
    ``error()`` is ``KafkaError(code)`` (e.g. TOPIC_AUTHORIZATION_FAILED, _AUTO_OFFSET_RESET)."""
    return _message(topic, partition, offset, KafkaError(code, reason))


def _message(topic: str, partition: int, offset: int | None, error: KafkaError) -> Message:
    return Message(topic=topic, partition=partition, offset=OFFSET_INVALID if offset is None else offset, error=error)


class ErrorChannel:
    """Owns the error Messages waiting to be delivered (``poll``/``consume`` hand them out first) and
    the one exception the next ``poll``/``consume`` raises (``deferred``: a failed commit made
    inside a rebalance callback, or an unexpected error met after records were collected)."""

    def __init__(self) -> None:
        self._messages: deque[Message] = deque()
        self.deferred: Exception | None = None

    def __bool__(self) -> bool:
        """Something is due: a Message to deliver or an exception to raise."""
        return bool(self._messages) or self.deferred is not None

    def add(self, message: Message) -> None:
        self._messages.append(message)

    def partition_failed(self, topic: str, partition: int, offset: int | None, error: BaseException) -> bool:
        """A failure while reading one partition: its error Message when the rule (module doc) says
        so (True); False when the caller must raise ``error``."""
        kafka_error = partition_error(error)
        if kafka_error is None:
            return False
        log.info("%s-%d: %s (delivered as an error message)", topic, partition, kafka_error.str())
        self._messages.append(_message(topic, partition, offset, KafkaError(kafka_error.code(), f"{topic}-{partition}: {kafka_error.str()}", retriable=kafka_error.retriable())))
        return True

    def defer(self, error: Exception | None) -> None:
        """Raise ``error`` from the next poll/consume (the first one kept)."""
        if error is not None and self.deferred is None:
            self.deferred = error

    def raise_deferred(self) -> None:
        if self.deferred is not None:
            error, self.deferred = self.deferred, None
            raise error

    def take(self, out: list[Message], limit: int) -> None:
        """Error Messages into ``out``, up to ``limit`` in all."""
        messages = self._messages
        while messages and len(out) < limit:
            out.append(messages.popleft())
