"""Read-ahead: one large S3 GET serves several Fetch requests of a partition read in order.

A client asks for a partition's next ``PartitionMaxBytes`` (1 MiB by default in librdkafka and the Java
client) each Fetch; one S3 GET per MiB costs the S3 server far more CPU per byte than larger GETs, and
a round trip per Fetch. So a read from S3 at a position the cache does not hold GETs up to
``read_ahead_bytes`` (the plan's batch-aligned ranges), answers its first ``PartitionMaxBytes`` (whole
batches; at least one: KIP-74) and keeps the rest, keyed by (topic, partition, next offset): the next
Fetch at exactly that offset is answered from memory. The bytes are the segment's, never re-encoded;
segments in S3 are immutable, so what is kept stays right. Bounded: at most ``capacity`` bytes over
every partition (least recently used dropped first). read_committed reads stop before the last
stable offset (``split``'s ``stop``) and keep the rest for later.

Record batch layout used to cut at batch boundaries (Kafka's ``DefaultRecordBatch``): baseOffset
int64, batchLength int32 (bytes after this field), partitionLeaderEpoch int32, magic int8, crc int32,
attributes int16, lastOffsetDelta int32 (at byte 23), ...
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict

BATCH_OVERHEAD = 12  # baseOffset + batchLength


def split(data: bytes | memoryview, limit: int, stop: int | None = None) -> tuple[int, int]:
    """(bytes of the whole batches from the start of ``data`` within ``limit``, at least one, none whose
    baseOffset is at or past ``stop`` (read_committed: the last stable offset); the offset after the
    last of them)."""
    pos, next_offset = 0, -1
    while pos + 27 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        end = pos + BATCH_OVERHEAD + length
        if end > len(data) or (pos and end > limit) or (stop is not None and base >= stop):
            break
        next_offset = base + struct.unpack_from(">i", data, pos + 23)[0] + 1
        pos = end
    return pos, next_offset


class ReadAhead:
    """Bytes read beyond what a Fetch answered, for the next Fetch (module docstring). Thread-safe."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 0
        self._entries: OrderedDict[tuple[str, int, int], memoryview] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    @staticmethod
    def _held(data: memoryview) -> int:
        """What an entry keeps in memory: the whole buffer its view is a slice of."""
        return len(data.obj) if isinstance(data.obj, bytes | bytearray) else len(data)  # type: ignore[arg-type]

    def take(self, topic: str, partition: int, offset: int) -> memoryview | None:
        with self._lock:
            data = self._entries.pop((topic, partition, offset), None)
            if data is not None:
                self.size -= self._held(data)
                self.hits += 1
            return data

    def put(self, topic: str, partition: int, offset: int, data: memoryview) -> None:
        if not len(data) or self._held(data) > self.capacity:
            return
        with self._lock:
            key = (topic, partition, offset)
            old = self._entries.pop(key, None)
            if old is not None:
                self.size -= self._held(old)
            self._entries[key] = data
            self.size += self._held(data)
            while self.size > self.capacity:
                _key, dropped = self._entries.popitem(last=False)
                self.size -= self._held(dropped)
