"""Kafka's ``replication-offset-checkpoint`` for a log dir written without a broker.

A broker checkpoints each partition's high watermark into ``<log.dir>/replication-offset-checkpoint``
every ``replica.high.watermark.checkpoint.interval.ms``; the agent uploads only segments that end at
or below it (``tiered_kafka_agent.high_watermark``). A log dir written by ``PartitionLog`` (tests,
benchmarks, copied fixtures) has no broker to write it: :func:`checkpoint_high_watermarks` does,
as a broker would once every record written is committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.format.checkpoints import REPLICATION_OFFSET_CHECKPOINT, format_offset_checkpoint, read_offset_checkpoint, write_atomically
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.segment_names import FileKind, SegmentFileName, Suffix, parse_partition_dir_name


def log_end_offset(directory: Path) -> int:
    """The next offset of a partition directory: after the last batch of its active (largest live) segment."""
    bases = [n.base_offset for n in (SegmentFileName.try_parse(p.name) for p in directory.iterdir()) if n is not None and n.kind == FileKind.LOG and n.suffix == Suffix.NONE]
    if not bases:
        raise ValueError(f"{directory} has no live segment")
    active = max(bases)
    end = active
    for batch in iter_batches((directory / f"{active:020d}.log").read_bytes(), allow_truncated_tail=True):
        end = batch.next_offset
    return end


def checkpoint_high_watermarks(log_dir: Path, directories: Sequence[Path] | None = None, offsets: dict[tuple[str, int], int] | None = None) -> None:
    """Write ``log_dir``'s ``replication-offset-checkpoint`` (module doc). Each partition directory of
    ``directories`` (default: every one in the log dir that holds a segment) gets its log end offset
    (everything written committed), ``offsets`` any other value; other entries already in the file
    are kept."""
    path = log_dir / REPLICATION_OFFSET_CHECKPOINT
    current = read_offset_checkpoint(path) or {}
    every = directories is None
    for directory in [d for d in log_dir.iterdir() if d.is_dir()] if directories is None else directories:
        try:
            topic_partition = parse_partition_dir_name(directory.name)
        except InvalidSegmentNameError:
            continue
        if every and not any(directory.glob("*.log")):
            continue
        current[topic_partition] = log_end_offset(directory)
    current.update(offsets or {})
    write_atomically(path, format_offset_checkpoint(current).encode())
