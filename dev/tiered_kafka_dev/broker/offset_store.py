"""Committed consumer-group offsets of the development broker, kept in one JSON file.

Real Kafka stores committed offsets as records in the compacted internal topic ``__consumer_offsets``
(key: group, topic, partition; value: offset, leader epoch, metadata, commit timestamp) and replays that
topic when a broker becomes group coordinator. The development broker keeps the same data in a single
JSON file instead (for example ``{log.dir}/dev-broker-consumer-offsets.json``): it is much simpler than
writing and compacting an internal topic, and clients cannot tell the difference, because they only see
committed offsets through OffsetCommit / OffsetFetch, which behave the same. The file is read once at
startup and rewritten atomically (temporary file, fsync, ``os.replace``, fsync of the directory) after
every change, so a crash leaves either the old or the new content, never a mix.

Offsets never expire here (Kafka drops them after ``offsets.retention.minutes`` once a group is empty).

File format (version 1)::

    {"version": 1,
     "offsets": [{"group": "g", "topic": "t", "partition": 0, "offset": 42,
                  "leader_epoch": 3, "metadata": "", "commit_timestamp_ms": 1700000000000}, ...]}

A file that cannot be read back raises :class:`CorruptOffsetsFileError` naming it; the broker does not
silently start with no offsets, which would make every consumer group re-read or skip data.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CommittedOffset", "CorruptOffsetsFileError", "OffsetStore", "OffsetStoreError"]

logger = logging.getLogger(__name__)

FILE_FORMAT_VERSION = 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One committed position, as OffsetCommit carries it (Kafka's ``OffsetAndMetadata``).

    ``leader_epoch`` is -1 when the client did not send one (OffsetCommit < v6); ``metadata`` is the
    client's free-form string (``None`` if it sent a null string).
    """

    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int


class OffsetStoreError(Exception):
    """The offsets file could not be read or written."""


class CorruptOffsetsFileError(OffsetStoreError):
    """The offsets file exists but its content is not a valid offsets document."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"corrupt consumer offsets file {path}: {detail}")
        self.path = path


class OffsetStore:
    """Committed offsets per (group, topic, partition), persisted to ``path`` (``None``: in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self._path = Path(path) if path is not None else None
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        if self._path is not None and self._path.exists():
            self._offsets = _load(self._path)
            logger.debug("loaded offsets of %d group(s) from %s", len(self._offsets), self._path)

    @property
    def path(self) -> Path | None:
        """The backing file, or ``None`` for an in-memory store."""
        return self._path

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        """Store a batch of offsets for ``group_id`` (replacing earlier ones) and persist the batch at once."""
        if offsets:
            self._replace({**self._offsets, group_id: {**self._offsets.get(group_id, {}), **offsets}})

    def get(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        """The committed offset of one partition, or ``None`` if the group never committed one."""
        return self._offsets.get(group_id, {}).get((topic, partition))

    def partitions(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """All committed offsets of ``group_id`` (a copy; empty for an unknown group)."""
        return dict(self._offsets.get(group_id, {}))

    def groups(self) -> set[str]:
        """The groups with at least one committed offset."""
        return set(self._offsets)

    def delete_group(self, group_id: str) -> None:
        """Forget every offset of ``group_id`` (DeleteGroups)."""
        if group_id in self._offsets:
            self._replace({other: parts for other, parts in self._offsets.items() if other != group_id})

    def delete_topic(self, topic: str) -> None:
        """Forget every group's offsets for ``topic`` (the topic was deleted)."""
        remaining = {
            group_id: {tp: committed for tp, committed in parts.items() if tp[0] != topic}
            for group_id, parts in self._offsets.items()
        }
        if remaining != self._offsets:
            self._replace({group_id: parts for group_id, parts in remaining.items() if parts})

    def _replace(self, offsets: dict[str, dict[TopicPartition, CommittedOffset]]) -> None:
        """Persist ``offsets`` first, then make them current: a failed write leaves the store unchanged."""
        if self._path is not None:
            _write_atomically(self._path, _dump(offsets))
        self._offsets = offsets


def _dump(offsets: Mapping[str, Mapping[TopicPartition, CommittedOffset]]) -> bytes:
    entries = [
        {
            "group": group_id,
            "topic": topic,
            "partition": partition,
            "offset": committed.offset,
            "leader_epoch": committed.leader_epoch,
            "metadata": committed.metadata,
            "commit_timestamp_ms": committed.commit_timestamp_ms,
        }
        for group_id in sorted(offsets)
        for (topic, partition), committed in sorted(offsets[group_id].items())
    ]
    return json.dumps({"version": FILE_FORMAT_VERSION, "offsets": entries}, indent=1).encode()


def _load(path: Path) -> dict[str, dict[TopicPartition, CommittedOffset]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OffsetStoreError(f"cannot read consumer offsets file {path}: {exc}") from exc
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptOffsetsFileError(path, f"not JSON ({exc})") from exc
    if not isinstance(document, dict) or document.get("version") != FILE_FORMAT_VERSION:
        raise CorruptOffsetsFileError(path, f"expected an object with version {FILE_FORMAT_VERSION}")
    entries = document.get("offsets")
    if not isinstance(entries, list):
        raise CorruptOffsetsFileError(path, "'offsets' is not a list")
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
    for index, entry in enumerate(entries):
        group_id, topic, partition, committed = _parse_entry(path, index, entry)
        offsets.setdefault(group_id, {})[(topic, partition)] = committed
    return offsets


def _parse_entry(path: Path, index: int, entry: Any) -> tuple[str, str, int, CommittedOffset]:
    if not isinstance(entry, dict):
        raise CorruptOffsetsFileError(path, f"offsets[{index}] is not an object")

    def value(name: str, kind: type, *, nullable: bool = False) -> Any:
        found = entry.get(name)
        if found is None and nullable and name in entry:
            return None
        # bool is an int subclass, but a JSON true/false is never a valid number here.
        if not isinstance(found, kind) or isinstance(found, bool):
            raise CorruptOffsetsFileError(path, f"offsets[{index}].{name} is missing or not a {kind.__name__}")
        return found

    committed = CommittedOffset(
        offset=value("offset", int),
        leader_epoch=value("leader_epoch", int),
        metadata=value("metadata", str, nullable=True),
        commit_timestamp_ms=value("commit_timestamp_ms", int),
    )
    return value("group", str), value("topic", str), value("partition", int), committed


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write a temporary file, fsync it, rename it over, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        _fsync_directory(path.parent)
    except OSError as exc:
        raise OffsetStoreError(f"cannot write consumer offsets file {path}: {exc}") from exc


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
