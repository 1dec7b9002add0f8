"""Loading a partition directory on open (Java ``LogLoader``, ``LogSegment.recover``,
``ProducerStateManager.truncateAndReload``).

``LogRecovery`` is a mixin of ``log_writer.PartitionLog``, kept apart so that each module stays one
job. On ``PartitionLog.open``:
- the producer state starts from the newest readable ``{base}.snapshot`` at or below the active
  segment (a corrupt one is deleted and an older one tried, as Kafka's ``loadFromSnapshot``);
  without one, from nothing at the first segment;
- rotated segments are read as they are (timestamps, next offset, their ``.txnindex``); their
  batches past the snapshot are replayed into the producer state (``AppendOrigin.REPLICATION``:
  no check, the log is already written);
- the active segment keeps the valid prefix of its ``.log`` (a torn or corrupt tail is cut), gets
  its indexes rebuilt, and, when every one of its batches was replayed, its ``.txnindex`` rebuilt
  from the aborted transactions the replay completed (Kafka's ``LogSegment.recover`` does the same
  through ``updateTxnIndex``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from tiered_kafka.errors import FormatError
from tiered_kafka.format import offset_index, producer_snapshot, time_index, txn_index
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_segment import Segment
from tiered_kafka.format.producer_state import AppendOrigin, ProducerStateManager
from tiered_kafka.format.record_batch import RecordBatch, iter_batches
from tiered_kafka.format.segment_names import FileKind, segment_file_name

log = logging.getLogger(__name__)


class LogRecovery:
    """Loading and recovery of a partition log's segments (see the module docstring)."""

    directory: Path
    config: LogConfig
    clock: Callable[[], int]
    producers: ProducerStateManager
    _replay_from: int  # batches at or past this offset are replayed into the producer state

    def _load_producer_snapshot(self, offsets: list[int], first_base: int) -> None:
        """Start the producer state from the newest readable snapshot among ``offsets``; the log is
        replayed after it (from ``first_base`` when none is readable)."""
        self._replay_from = first_base
        for offset in sorted(offsets, reverse=True):
            path = self.directory / segment_file_name(offset, FileKind.SNAPSHOT)
            try:
                entries = producer_snapshot.parse(path.read_bytes(), name=str(path))
            except FormatError as err:
                log.warning("deleting unreadable producer snapshot: %s", err)
                path.unlink()
                continue
            self.producers = ProducerStateManager.from_snapshot(entries)
            self._replay_from = offset
            return

    def _replay(self, batches: list[RecordBatch]) -> list[txn_index.AbortedTxn]:
        """Replay written batches into the producer state; the aborted transactions they complete."""
        aborted = []
        for batch in batches:
            if batch.base_offset < self._replay_from or batch.producer_id < 0:
                continue
            for completed, lso in self.producers.apply(self.producers.prepare([batch], AppendOrigin.REPLICATION)):
                if completed.is_aborted:
                    aborted.append(txn_index.AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso))
        return aborted

    def _load_rotated(self, base: int) -> Segment:
        """A sealed segment as written: its indexes and .txnindex are read, not rebuilt."""
        segment = Segment(
            self.directory,
            base,
            self.clock(),
            offset_index.OffsetIndex.read(self.directory / segment_file_name(base, FileKind.INDEX), base),
            time_index.TimeIndex.read(self.directory / segment_file_name(base, FileKind.TIMEINDEX), base),
            next_offset=base,
        )
        data = segment.path(FileKind.LOG).read_bytes()
        batches = list(iter_batches(data, verify_crc=False))
        for batch in batches:
            segment.track(batch)
        self._replay(batches)
        segment.load_aborted()
        segment.size = len(data)
        return segment

    def _recover_active(self, base: int) -> Segment:
        """Kafka's ``LogSegment.recover``: keep the valid prefix of the .log, rebuild the indexes."""
        segment = Segment.empty(self.directory, base, self.clock())
        log_path = segment.path(FileKind.LOG)
        data = bytearray(log_path.read_bytes())
        batches: list[RecordBatch] = []
        try:
            for batch in iter_batches(data):
                batches.append(batch)
        except FormatError as err:  # a torn or corrupt tail: truncate it, as the broker's recovery does
            valid = batches[-1].next_position if batches else 0
            log.warning("recovering %s: truncating at position %d of %d: %s", log_path, valid, len(data), err)
            os.truncate(log_path, valid)
        segment.preallocate_indexes(self.config.segment_index_bytes)
        if batches:
            segment.index_batches(batches, self.config.index_interval_bytes)
        aborted = self._replay(batches)
        if self._replay_from <= base:  # every batch of the segment replayed: rebuild its .txnindex
            segment.path(FileKind.TXNINDEX).unlink(missing_ok=True)
            segment.append_aborted(aborted)
        else:
            segment.load_aborted()
        return segment
