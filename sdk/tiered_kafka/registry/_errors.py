"""The registry's exceptions (all under :class:`RegistryError`, itself a ``TieredKafkaError``)::

    RegistryError
    ├── RegistryUnavailableError   (also ConnectionError; retriable)
    ├── RegistryValueError         (also ValueError)
    ├── MalformedRegistryDataError
    ├── SegmentOverlapError
    └── RegistryConflictError
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiered_kafka.errors import TieredKafkaError

if TYPE_CHECKING:
    from tiered_kafka.registry._entries import SegmentEntry


# -- exceptions ----------------------------------------------------------------------------------


class RegistryError(TieredKafkaError):
    """Root of the registry's errors; also raised for Redis errors that retrying cannot fix."""


class RegistryUnavailableError(RegistryError, ConnectionError):
    """Redis could not be reached or answered "try again" (connection, timeout, loading, cluster down).

    Also a built-in :class:`ConnectionError`, so generic retry loops recognise it.
    """

    retriable = True


class RegistryValueError(RegistryError, ValueError):
    """A value handed to the registry is invalid: a topic, partition, offset or segment field."""


class MalformedRegistryDataError(RegistryError):
    """What Redis holds does not follow the layout (a missing or malformed field, member or value).

    ``key`` is the Redis key read (None when the data did not come from Redis) and ``field`` the
    hash field, when one field is at fault.
    """

    def __init__(self, message: str, *, key: str | None = None, field: str | None = None) -> None:
        where = [f"key {key!r}"] if key is not None else []
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.key = key
        self.field = field


class SegmentOverlapError(RegistryError):
    """A new segment's offset range overlaps a registered segment of the same partition.

    ``new_range`` and ``conflicting_range`` are inclusive (base_offset, last_offset) pairs.
    """

    def __init__(self, topic: str, partition: int, new_range: tuple[int, int], conflicting_range: tuple[int, int]) -> None:
        super().__init__(
            f"segment {new_range[0]}..{new_range[1]} of {topic}-{partition} overlaps the registered "
            f"segment {conflicting_range[0]}..{conflicting_range[1]}"
        )
        self.topic = topic
        self.partition = partition
        self.new_range = new_range
        self.conflicting_range = conflicting_range


class RegistryConflictError(RegistryError):
    """A segment with this base offset is registered already, with other content.

    ``existing`` is the registered entry (None if it could not be read back), ``new`` the one
    refused, ``existing_range`` the registered (base_offset, last_offset).
    """

    def __init__(self, new: SegmentEntry, existing: SegmentEntry | None, existing_range: tuple[int, int]) -> None:
        if existing is not None:
            differ = [f for f in ("last_offset", "checksum", "size") if getattr(existing, f) != getattr(new, f)]
            detail = ", ".join(f"{f} {getattr(existing, f)!r} registered, {getattr(new, f)!r} new" for f in differ)
        else:
            detail = f"registered range {existing_range[0]}..{existing_range[1]}, its details unreadable"
        super().__init__(
            f"segment {new.base_offset} of {new.topic}-{new.partition} is registered with other content ({detail})"
        )
        self.topic = new.topic
        self.partition = new.partition
        self.new = new
        self.existing = existing
        self.existing_range = existing_range
