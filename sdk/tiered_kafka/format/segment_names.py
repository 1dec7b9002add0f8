"""Names of the files in a Kafka partition directory (Java ``LogFileUtils``, ``LocalLog``).

A partition directory is ``{log.dir}/{topic}-{partition}``. Each segment is a set of files
sharing a 20-digit, zero-padded base offset::

    00000000000000000100.log        record batches
    00000000000000000100.index      offset index
    00000000000000000100.timeindex  time index
    00000000000000000100.txnindex   aborted transactions (only when there are any)
    00000000000000000100.snapshot   producer state snapshot (named by offset, written on roll)

Remote storage also holds ``{base}.batchindex``, our agent's per-batch index (``batch_index``).

A trailing ``.deleted`` marks files that retention has scheduled for deletion (removed after
``file.delete.delay.ms``), ``.cleaned`` and ``.swap`` are the log cleaner's intermediate files.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.topic_names import TOPIC_NAME_RULE, is_legal_topic_name

OFFSET_DIGITS = 20


class FileKind(enum.StrEnum):
    """What a segment file holds, by its extension."""

    LOG = "log"
    INDEX = "index"
    TIMEINDEX = "timeindex"
    TXNINDEX = "txnindex"
    SNAPSHOT = "snapshot"
    BATCHINDEX = "batchindex"  # not Kafka's: one entry per batch, written by our agent (format.batch_index)


class Suffix(enum.StrEnum):
    """The trailing suffix retention and the log cleaner add to a segment file."""

    NONE = ""
    DELETED = "deleted"
    CLEANED = "cleaned"
    SWAP = "swap"


#: The files a segment always has once rotated (Kafka creates .txnindex lazily).
SEGMENT_KINDS = (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX)

_NAME_RE = re.compile(
    r"^(?P<offset>\d{%d})\.(?P<kind>%s)(?:\.(?P<suffix>deleted|cleaned|swap))?$"
    % (OFFSET_DIGITS, "|".join(k.value for k in FileKind))
)
_PARTITION_DIR_RE = re.compile(r"^(?P<topic>[A-Za-z0-9._-]{1,249})-(?P<partition>\d+)$")


@dataclass(frozen=True, slots=True, order=True)
class SegmentFileName:
    """A parsed segment file name, e.g. ``00000000000000000100.log.deleted``.

    >>> SegmentFileName.parse("00000000000000000100.log.deleted")
    SegmentFileName(base_offset=100, kind=<FileKind.LOG: 'log'>, suffix=<Suffix.DELETED: 'deleted'>)
    >>> str(SegmentFileName(100, FileKind.INDEX))
    '00000000000000000100.index'
    """

    base_offset: int
    kind: FileKind
    suffix: Suffix = Suffix.NONE

    @classmethod
    def parse(cls, name: str) -> SegmentFileName:
        match = _NAME_RE.match(name)
        if match is None:
            raise InvalidSegmentNameError(
                f"{name!r} is not a segment file name (20-digit offset, .log/.index/.timeindex/.batchindex/"
                ".txnindex/.snapshot, optional .deleted/.cleaned/.swap)"
            )
        return cls(int(match["offset"]), FileKind(match["kind"]), Suffix(match["suffix"] or ""))

    @classmethod
    def try_parse(cls, name: str) -> SegmentFileName | None:
        """Parse ``name``, or None for other files of a partition directory."""
        try:
            return cls.parse(name)
        except InvalidSegmentNameError:
            return None

    def __str__(self) -> str:
        name = f"{format_offset(self.base_offset)}.{self.kind.value}"
        return f"{name}.{self.suffix.value}" if self.suffix else name

    def with_suffix(self, suffix: Suffix) -> SegmentFileName:
        return SegmentFileName(self.base_offset, self.kind, suffix)


def format_offset(offset: int) -> str:
    """The 20-digit zero-padded form of an offset, as in file names and offset.wm."""
    if offset < 0:
        raise ValueError(f"offsets in file names are non-negative, got {offset}")
    return f"{offset:0{OFFSET_DIGITS}d}"


def segment_file_name(base_offset: int, kind: FileKind, suffix: Suffix = Suffix.NONE) -> str:
    return str(SegmentFileName(base_offset, kind, suffix))


def partition_dir_name(topic: str, partition: int) -> str:
    """``{topic}-{partition}``, the name of a partition's directory in a log.dir."""
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """(topic, partition) of a directory named ``{topic}-{partition}``.

    Raises InvalidSegmentNameError for other names, including the ``-delete`` and
    ``-future`` directories Kafka uses while deleting or moving a partition.
    """
    match = _PARTITION_DIR_RE.match(name)
    if match is None or not is_legal_topic_name(match["topic"]):  # "..-0" is not one: Kafka's rule (topic_names)
        raise InvalidSegmentNameError(f"{name!r} is not a partition directory name ({{topic}}-{{partition}}; {TOPIC_NAME_RULE})")
    return match["topic"], int(match["partition"])
