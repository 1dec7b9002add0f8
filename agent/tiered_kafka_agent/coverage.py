"""A partition's coverage start: where the agent's promise "no offset lost silently" begins.

DESIGN.md, contract 5: per partition, the agent records the log start offset it observed when
an agent first began following the partition. Every offset at or after it is, at any moment,
in remote storage, still in Kafka, in a recorded gap with its reason, or was deleted by remote
retention. ``tiered-kafka-agent audit`` checks it.

Where the start comes from, when a partition is followed (``establish_coverage_start``):

1. the registry's (``Registry.coverage_start``), when there is one; its S3 copy is rewritten if
   missing (a crash between the two writes below);
2. else the S3 copy (``coverage.json`` beside offset.wm, ``Keyspace.coverage_start_key``): the
   registry was lost or rebuilt without it; it goes back into the registry;
3. else it is observed now. Offsets deleted before any agent ever watched the partition cannot be
   claimed, so the start is the log start the agent sees now: the partition directory's first
   segment's base offset, or Kafka's ``log-start-offset-checkpoint`` entry when that is ahead
   (DeleteRecords or retention moved the log start inside the first segment). A previous agent's
   work counts too: if the registry already holds segments or gaps for the partition (an agent
   from before coverage starts existed), the start is the earliest of those; if S3 holds an
   offset.wm, the start is no later than its segment (``PartitionUploader`` takes the expected
   next offset from it, and anything missing after it becomes a gap).

Crash order when the start is observed (step 3): the registry first (atomic set-if-absent: of
two agents racing, e.g. across a leadership move, the first wins and both use its value), then
the S3 copy, then (``faults.crash_point("after_coverage_start")``) the first upload. A crash
after the registry write leaves the S3 copy missing: step 1 rewrites it on restart. A crash
before the registry write leaves nothing: the start is observed again on restart, and if
retention deleted segments meanwhile, they were never claimed (no agent had recorded a start).
Once recorded, a start never moves: if the agent is down while retention deletes the first
segments, the uploader records their offsets, from the start on, as a gap on restart.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tiered_kafka.errors import CorruptCheckpointError
from tiered_kafka.format.checkpoints import LOG_START_OFFSET_CHECKPOINT, parse_offset_checkpoint_bytes
from tiered_kafka.format.segment_names import parse_partition_dir_name
from tiered_kafka.registry import CoverageStart, Registry
from tiered_kafka_agent.faults import crash_point
from tiered_kafka_agent.local_segments import LocalSegment
from tiered_kafka_agent.log_dir_files import read_log_dir_file
from tiered_kafka_agent.remote_store import MetadataError, RemoteStore

log = logging.getLogger(__name__)


def checkpointed_log_start(directory: Path) -> int | None:
    """The partition's entry in ``{log.dir}/log-start-offset-checkpoint``, None when absent or unreadable."""
    topic, partition = parse_partition_dir_name(directory.name)
    path = directory.parent / LOG_START_OFFSET_CHECKPOINT
    try:
        data = read_log_dir_file(directory.parent, LOG_START_OFFSET_CHECKPOINT)  # no link followed, bounded (log_dir_files)
        return None if data is None else parse_offset_checkpoint_bytes(data, str(path)).get((topic, partition))
    except (OSError, CorruptCheckpointError) as err:  # the broker rewrites it atomically; a bad one is only skipped
        log.warning("%s unreadable, using the first segment's base offset: %s", path, err)
        return None


def observed_log_start(directory: Path, segments: list[LocalSegment], active: int | None) -> int | None:
    """The log start offset visible now: the first segment's base, or the checkpoint's when ahead."""
    first = segments[0].base_offset if segments else active
    if first is None:
        return None
    checkpoint = checkpointed_log_start(directory)
    return first if checkpoint is None else max(first, checkpoint)


def establish_coverage_start(
    topic: str,
    partition: int,
    registry: Registry,
    store: RemoteStore,
    observed: int,
    watermark: int | None,
) -> CoverageStart:
    """The partition's coverage start, recorded in the registry and in S3 (module doc for the order)."""
    name = f"{topic}-{partition}"
    stored = registry.coverage_start(topic, partition)
    if stored is not None:
        try:
            copy = store.read_coverage_start(topic, partition)
        except MetadataError as err:  # the registry's is the reference: a bad copy is replaced
            log.warning("%s: %s; rewriting it from the registry", name, err)
            copy = None
        if copy != stored:
            store.write_coverage_start(topic, partition, stored)
        return stored
    remote = store.read_coverage_start(topic, partition)
    if remote is not None:
        stored = registry.set_coverage_start(topic, partition, remote.offset, observed_ms=remote.observed_ms)
        if stored != remote:
            store.write_coverage_start(topic, partition, stored)
        log.info("%s: coverage start %d restored from S3", name, stored.offset)
        return stored
    offset, why = observed, "the log start observed now"
    previous = _previous_agent_start(topic, partition, registry)
    if previous is not None and previous < offset:
        offset, why = previous, "the earliest offset a previous agent registered"
    if watermark is not None and watermark < offset:
        offset, why = watermark, "the segment named by a previous agent's offset.wm"
    stored = registry.set_coverage_start(topic, partition, offset)
    store.write_coverage_start(topic, partition, stored)
    log.info("%s: coverage starts at offset %d (%s)", name, stored.offset, why)
    crash_point("after_coverage_start")
    return stored


def _previous_agent_start(topic: str, partition: int, registry: Registry) -> int | None:
    first = registry.next_segment(topic, partition, -1)
    gaps = registry.gaps(topic, partition)
    candidates = ([first.first] if first is not None else []) + ([gaps[0].start_offset] if gaps else [])
    return min(candidates) if candidates else None
