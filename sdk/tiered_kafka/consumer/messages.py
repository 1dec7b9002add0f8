"""Remote records as confluent-kafka ``Message``s, and the errors TieredConsumer delivers as messages.

Messages are built with Message's positional constructor (topic, partition, offset, key, value,
headers, error, timestamp): 4x cheaper than keywords, which matters at 100k+ records/s. They are
only ever returned to the application; TieredConsumer never hands them back to librdkafka (commit
and store_offsets take their topic, partition and offset), which is what the constructor's
"testing only" warning is about.
"""

from __future__ import annotations

from confluent_kafka import (
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    Message,
)

from tiered_kafka.remote_read import DecodedBatch

_REMOTE_TS_TYPES = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME}
_NO_TIMESTAMP = (TIMESTAMP_NOT_AVAILABLE, -1)
#: bytes a delivered Message costs beyond its key and value (the object, two bytes headers, the
#: timestamp tuple, a list slot: measured with tracemalloc, rounded up)
MESSAGE_OVERHEAD = 240


def to_messages(topic: str, partition: int, batch: DecodedBatch) -> int:
    """Replace ``batch.records`` with confluent_kafka Messages; return their approximate size in memory."""
    messages = []
    append = messages.append
    size = 0
    for r in batch.records:
        ts = r.timestamp
        key, value = r.key, r.value
        timestamp = _NO_TIMESTAMP if ts is None else (_REMOTE_TS_TYPES.get(r.timestamp_type, TIMESTAMP_CREATE_TIME), ts)
        append(Message(topic, partition, r.offset, key, value, r.headers or None, None, timestamp))
        size += MESSAGE_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    batch.records = messages
    return size


def error_message(topic: str, partition: int, offset: int | None, code: int, reason: str) -> Message:
    """A partition's error as confluent-kafka delivers it: ``poll()`` returns a Message whose
    ``error()`` is ``KafkaError(code)`` (e.g. TOPIC_AUTHORIZATION_FAILED, _AUTO_OFFSET_RESET)."""
    return Message(topic=topic, partition=partition, offset=OFFSET_INVALID if offset is None else offset, error=KafkaError(code, reason))
