"""Checkpoint files: ``offset.wm`` and Kafka's text checkpoints (Java ``CheckpointFile``).

Kafka's checkpoint files are text, one item per line::

    0                  version
    2                  number of entries
    0 0                entries; per file kind:
    5 7729               leader-epoch-checkpoint:  "{leaderEpoch} {startOffset}"
                         recovery-point-offset-checkpoint, replication-offset-checkpoint,
                         log-start-offset-checkpoint: "{topic} {partition} {offset}"

The broker writes each one to ``{name}.tmp``, fsyncs and renames it over the old file, so a
reader sees either the old or the new contents; ``write_atomically`` does the same.

``offset.wm`` is the uploader's watermark (Pinterest's format): the file name stem of the last
segment fully uploaded, i.e. its 20-digit zero-padded base offset. A trailing newline is
accepted when reading and never written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tiered_kafka.errors import CorruptCheckpointError
from tiered_kafka.format.segment_names import OFFSET_DIGITS, format_offset

CHECKPOINT_VERSION = 0
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
OFFSET_WM = "offset.wm"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so readers never see a partial file (tmp, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _parse_lines(text: str, name: str, fields: int) -> list[list[str]]:
    lines = text.splitlines()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{name}: expected a version and a count line, got {len(lines)} lines")
    if lines[0].strip() != str(CHECKPOINT_VERSION):  # the line itself is not quoted: the file may not be a checkpoint at all
        raise CorruptCheckpointError(f"{name}: unsupported version (the first line is not {CHECKPOINT_VERSION})")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"{name}: the entry count (line 2) is not an integer") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if count != len(entries):
        raise CorruptCheckpointError(f"{name}: count line says {count} entries, file holds {len(entries)}")
    for number, entry in enumerate(entries, start=3):
        if len(entry) != fields:
            raise CorruptCheckpointError(f"{name}: line {number} {' '.join(entry)!r} should have {fields} fields")
    return entries


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise CorruptCheckpointError(f"{name}: {value!r} is not an integer") from None


def parse_leader_epoch_checkpoint(text: str, name: str = LEADER_EPOCH_CHECKPOINT) -> list[EpochEntry]:
    entries = [EpochEntry(_int(e, name), _int(o, name)) for e, o in _parse_lines(text, name, 2)]
    for before, after in zip(entries, entries[1:]):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            raise CorruptCheckpointError(f"{name}: epochs must increase with their start offsets: {before}, {after}")
    return entries


def format_leader_epoch_checkpoint(entries: list[EpochEntry]) -> str:
    body = "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)
    return f"{CHECKPOINT_VERSION}\n{len(entries)}\n{body}"


def parse_offset_checkpoint(text: str, name: str) -> dict[tuple[str, int], int]:
    """A ``{topic} {partition} {offset}`` checkpoint (recovery point, log start offset, ...)."""
    return {(t, _int(p, name)): _int(o, name) for t, p, o in _parse_lines(text, name, 3)}


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int] | None:
    """A ``{topic} {partition} {offset}`` checkpoint file as the broker last wrote it (e.g.
    ``replication-offset-checkpoint``: every partition's high watermark), None when it is absent.
    The broker replaces it by a rename (module doc), so the contents read are whole.

    Raises ``CorruptCheckpointError`` when the file is not a checkpoint."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return parse_offset_checkpoint_bytes(data, str(path))


def parse_offset_checkpoint_bytes(data: bytes, name: str) -> dict[tuple[str, int], int]:
    """``parse_offset_checkpoint`` of a file's bytes (UTF-8; else ``CorruptCheckpointError``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{name}: not UTF-8 text") from None
    return parse_offset_checkpoint(text, name)


def format_offset_checkpoint(offsets: dict[tuple[str, int], int]) -> str:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(offsets.items()))
    return f"{CHECKPOINT_VERSION}\n{len(offsets)}\n{body}"


def parse_offset_wm(data: bytes | str, name: str = OFFSET_WM) -> int:
    """The base offset held by an ``offset.wm`` file."""
    text = data.decode("ascii", errors="replace") if isinstance(data, bytes) else data
    stem = text.strip()
    if len(stem) != OFFSET_DIGITS or not stem.isdigit():
        raise CorruptCheckpointError(f"{name}: {text[:60]!r} is not a {OFFSET_DIGITS}-digit segment base offset")
    return int(stem)


def format_offset_wm(base_offset: int) -> bytes:
    return format_offset(base_offset).encode("ascii")
