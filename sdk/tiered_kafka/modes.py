"""The consumption modes (DESIGN.md, contract 4), in one place for the gateway and the SDK.

    REMOTE_ONLY       remote storage only; never fetches data from the brokers
    KAFKA_ONLY        Kafka only (plain confluent-kafka)
    REMOTE_PREFERRED  offsets remote storage holds are read there, newer ones from Kafka
    KAFKA_PREFERRED   Kafka; on OFFSET_OUT_OF_RANGE below the broker's log start, remote storage
                      until caught up, then Kafka again

Every handoff happens at an exact offset: a read returns records of one source, ending at its
next offset, and the next read starts exactly there, so there is no gap and no duplicate.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class Mode(str, enum.Enum):
    REMOTE_ONLY = "REMOTE_ONLY"
    KAFKA_ONLY = "KAFKA_ONLY"
    REMOTE_PREFERRED = "REMOTE_PREFERRED"
    KAFKA_PREFERRED = "KAFKA_PREFERRED"


class Source(str, enum.Enum):
    REMOTE = "remote"
    KAFKA = "kafka"


def decide(mode: Mode, *, remote_holds: Callable[[], bool], kafka_configured: bool, kafka_below_log_start: bool = False) -> Source:
    """The source of a read under ``mode`` (the consumption-mode contract, in one place).

    ``remote_holds()`` says whether remote storage holds the offset (asked only when needed);
    ``kafka_below_log_start`` is set on the second call of KAFKA_PREFERRED, after Kafka answered
    OFFSET_OUT_OF_RANGE for an offset below its log start. A REMOTE source for an offset remote
    storage does not hold yields the remote reader's 416, which is REMOTE_ONLY's answer.
    """
    if mode is Mode.KAFKA_ONLY:
        return Source.KAFKA
    if mode is Mode.KAFKA_PREFERRED:
        return Source.REMOTE if kafka_below_log_start or not kafka_configured else Source.KAFKA
    if mode is Mode.REMOTE_ONLY:
        return Source.REMOTE
    return Source.REMOTE if (not kafka_configured or remote_holds()) else Source.KAFKA
