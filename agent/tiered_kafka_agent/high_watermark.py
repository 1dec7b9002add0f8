"""Kafka's high watermarks as the broker last checkpointed them: the upload bound.

Kafka's rule (``RemoteLogManager.RLMCopyTask.candidateLogSegments``): a rotated segment is copied
to remote storage only once its end, the next segment's base offset, is at or below the log's
last stable offset, which is at most the high watermark, "as remote storage should contain only
committed/acked messages". Offsets at or above the high watermark are not committed: a clean
election (from the ISR) truncates a new leader's log to its own high watermark and reuses those
offset numbers for other records (acks=1, or a leader that rolls and dies before its followers
fetch). The agent applies the same bound with the high watermark the broker writes to each
log.dir's ``replication-offset-checkpoint`` (``ReplicaManager.checkpointHighWatermarks``, every
``replica.high.watermark.checkpoint.interval.ms``, default 5000): it lags the broker's own high
watermark by at most that interval and never exceeds it. (Kafka bounds by the last stable
offset; the agent by the high watermark: a segment ending inside an open transaction is uploaded
with its ``open_txn_first_offset``, and read_committed readers stop there.)

A partition the checkpoint does not list, a log.dir without the file yet, or a file that is not a
checkpoint (logged) means nothing is known: its segments wait. The checkpoint is read again when
its stat changes (the broker replaces it by a rename), so the uploaders' rescans cost a ``stat``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from tiered_kafka.errors import CorruptCheckpointError
from tiered_kafka.format.checkpoints import REPLICATION_OFFSET_CHECKPOINT, parse_offset_checkpoint_bytes
from tiered_kafka_agent.log_dir_files import read_log_dir_file
from tiered_kafka.format.segment_names import FileKind, Suffix
from tiered_kafka_agent.local_segments import LocalSegment

log = logging.getLogger(__name__)

_StatKey = tuple[int, int, int]


def committed_count(segments: Sequence[LocalSegment], active: int | None, high_watermark: int | None) -> int:
    """How many of ``segments`` (consecutive rotated segments, oldest first; ``active`` the base
    offset after the last one) may be uploaded, oldest first: each one's end (the next segment's
    base offset) at or below ``high_watermark`` (None: nothing known), or found only under its
    ``.deleted`` name. The first that may not stops the count: the later ones wait behind it.

    A ``.deleted`` segment is committed whatever the checkpoint says (which lags): below the active
    segment only retention renames one, and Kafka's retention deletes only segments whose end is
    at or below the high watermark (``UnifiedLog.deletableSegments``); truncation renames only the
    segments above the one it truncates into, which is then the active one."""
    count = 0
    for index, segment in enumerate(segments):
        end = segments[index + 1].base_offset if index + 1 < len(segments) else active
        below = high_watermark is not None and end is not None and end <= high_watermark
        if not (below or deleted_only(segment)):
            break
        count += 1
    return count


def deleted_only(segment: LocalSegment) -> bool:
    """Whether the segment's .log is there only under its ``.deleted`` name (retention renamed it)."""
    return not segment.path(FileKind.LOG).exists() and segment.path(FileKind.LOG, Suffix.DELETED).exists()


class HighWatermarks:
    """Every log dir's ``replication-offset-checkpoint``, re-read when it changes; shared by the
    agent's uploaders (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[Path, tuple[_StatKey | None, dict[tuple[str, int], int]]] = {}
        self._reported: dict[Path, dict[tuple[str, int], int]] = {}  # what ``refresh`` last compared against

    def get(self, log_dir: Path, topic: str, partition: int) -> int | None:
        """The partition's high watermark as last checkpointed in ``log_dir``; None: nothing known."""
        return self._current(log_dir).get((topic, partition))

    def refresh(self, log_dir: Path) -> set[tuple[str, int]]:
        """Re-read ``log_dir``'s checkpoint if it changed; the partitions whose high watermark changed
        since the last ``refresh`` (not since the last read: an uploader's pass may have read the
        new file first, and the other partitions must still be named)."""
        after = self._current(log_dir)
        with self._lock:
            before = self._reported.get(log_dir, {})
            self._reported[log_dir] = after
        return {tp for tp in before.keys() | after.keys() if before.get(tp) != after.get(tp)}

    def _current(self, log_dir: Path) -> dict[tuple[str, int], int]:
        path = log_dir / REPLICATION_OFFSET_CHECKPOINT
        try:
            stat = os.lstat(path)
            key: _StatKey | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            key = None
        with self._lock:
            cached = self._read.get(log_dir)
            if cached is not None and cached[0] == key:
                return cached[1]
        offsets: dict[tuple[str, int], int] = {}
        if key is not None:
            try:
                data = read_log_dir_file(log_dir, REPLICATION_OFFSET_CHECKPOINT)  # no link followed, bounded (log_dir_files)
                offsets = {} if data is None else parse_offset_checkpoint_bytes(data, str(path))
            except CorruptCheckpointError as err:  # nothing known: every partition of the log dir waits
                log.warning("%s; no high watermark is known in %s: its segments wait", err, log_dir)
            except OSError as err:
                log.warning("could not read %s (%s): its segments wait", path, err)
                return {}
        with self._lock:
            self._read[log_dir] = (key, offsets)
        return offsets
