"""The S3 object keyspace (compatible with Pinterest's tiered-storage uploader).

::

    s3://{bucket}/{prefix}/{entropy}/{cluster}/{topic}-{partition}/{base_offset:020d}.{log,index,timeindex,...}
    s3://{bucket}/{prefix}/{entropy}/{cluster}/{topic}-{partition}/offset.wm

Gap markers (offset ranges known never to reach remote storage, e.g. deleted by retention before
the agent could upload them) live beside the segments, so the registry can be rebuilt from S3
alone: ``.../{topic}-{partition}/gaps/{start:020d}-{end:020d}`` (body: JSON with the reason).

The partition's coverage start (DESIGN.md, contract 5: the log start offset the agent first
observed; ``tiered_kafka.registry.CoverageStart``) is kept beside offset.wm for the same reason:
``.../{topic}-{partition}/coverage.json`` (body: ``{"offset": int, "observed_ms": int}``), and so is
how far remote retention has deleted: ``.../{topic}-{partition}/expired.json`` (body:
``{"expired_until": int}``, offsets below it were deleted by remote retention). None of these
nor the gap markers is a segment file: :meth:`Keyspace.parse` refuses them, so listings that
look for segments pass them by.

``{entropy}`` appears only when ``entropy_bits`` N > 0: the first N bits, written as '0'/'1'
characters, of MD5 over the UTF-8 string ``f"{cluster}-{topic}-{partition}"``, bytes taken
most-significant bit first. It spreads partitions over 2**N S3 prefixes (S3 allows about
5,500 GET/s per prefix). An empty ``prefix`` is left out rather than producing ``//``.

>>> ks = Keyspace(prefix="custom-prefix", cluster="kafkaCluster1", entropy_bits=5)
>>> ks.segment_key("topicA", 0, 100, FileKind.LOG)
'custom-prefix/01011/kafkaCluster1/topicA-0/00000000000000000100.log'
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from tiered_kafka.errors import ConfigError, InvalidSegmentNameError
from tiered_kafka.format.checkpoints import OFFSET_WM
from tiered_kafka.format.segment_names import (
    FileKind,
    SegmentFileName,
    format_offset,
    parse_partition_dir_name,
    partition_dir_name,
    segment_file_name,
)

MAX_ENTROPY_BITS = 128  # the width of an MD5 digest
GAPS_DIR = "gaps"
COVERAGE_START = "coverage.json"
EXPIRED = "expired.json"
_GAP_NAME_RE = re.compile(r"^(?P<start>\d{20})-(?P<end>\d{20})$")


def entropy(cluster: str, topic: str, partition: int, bits: int) -> str:
    """The first ``bits`` bits of MD5(f"{cluster}-{topic}-{partition}"), MSB first, as '0'/'1'."""
    if not 0 <= bits <= MAX_ENTROPY_BITS:
        raise ConfigError(f"entropy bits must be between 0 and {MAX_ENTROPY_BITS}, got {bits}")
    digest = hashlib.md5(f"{cluster}-{topic}-{partition}".encode(), usedforsecurity=False).digest()
    return format(int.from_bytes(digest, "big"), "0128b")[:bits]


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """What an object key names: a partition's segment file, or its offset.wm (segment None)."""

    cluster: str
    topic: str
    partition: int
    segment: SegmentFileName | None


@dataclass(frozen=True, slots=True)
class Keyspace:
    """Object keys of one cluster under ``prefix`` with ``entropy_bits`` of prefix entropy."""

    prefix: str
    cluster: str
    entropy_bits: int = 0

    def __post_init__(self) -> None:
        if not self.cluster or "/" in self.cluster:
            raise ConfigError(f"cluster name {self.cluster!r} must be non-empty and contain no '/'")
        entropy("", "", 0, self.entropy_bits)  # validates the bit count

    def partition_prefix(self, topic: str, partition: int) -> str:
        """The key prefix of a partition, ending in '/': list it to find its segments."""
        parts = [self.prefix.strip("/")]
        if self.entropy_bits:
            parts.append(entropy(self.cluster, topic, partition, self.entropy_bits))
        parts += [self.cluster, partition_dir_name(topic, partition)]
        return "/".join(p for p in parts if p) + "/"

    def segment_key(self, topic: str, partition: int, base_offset: int, kind: FileKind) -> str:
        return self.partition_prefix(topic, partition) + segment_file_name(base_offset, kind)

    def offset_wm_key(self, topic: str, partition: int) -> str:
        return self.partition_prefix(topic, partition) + OFFSET_WM

    def coverage_start_key(self, topic: str, partition: int) -> str:
        """The partition's coverage start object, beside offset.wm."""
        return self.partition_prefix(topic, partition) + COVERAGE_START

    def expired_key(self, topic: str, partition: int) -> str:
        """The partition's remote retention mark, beside offset.wm."""
        return self.partition_prefix(topic, partition) + EXPIRED

    def parse_partition_file_key(self, key: str, name: str) -> tuple[str, int]:
        """(topic, partition) of a partition's ``name`` object (COVERAGE_START, EXPIRED);
        raises InvalidSegmentNameError."""
        directory, _, found = key.rpartition("/")
        if found != name:
            raise InvalidSegmentNameError(f"object key {key!r} is not a {name}")
        parsed = self.parse(f"{directory}/{OFFSET_WM}")
        return parsed.topic, parsed.partition

    def parse_coverage_start_key(self, key: str) -> tuple[str, int]:
        """(topic, partition) of a coverage start key; raises InvalidSegmentNameError."""
        return self.parse_partition_file_key(key, COVERAGE_START)

    def gap_key(self, topic: str, partition: int, start: int, end: int) -> str:
        return f"{self.partition_prefix(topic, partition)}{GAPS_DIR}/{format_offset(start)}-{format_offset(end)}"

    def parse_gap_key(self, key: str) -> tuple[str, int, int, int]:
        """(topic, partition, start, end) of a gap marker key; raises InvalidSegmentNameError."""
        head, _, name = key.rpartition("/")
        directory, _, gaps = head.rpartition("/")
        match = _GAP_NAME_RE.match(name)
        if gaps != GAPS_DIR or match is None:
            raise InvalidSegmentNameError(f"object key {key!r} is not a gap marker")
        parsed = self.parse(f"{directory}/{OFFSET_WM}")
        return parsed.topic, parsed.partition, int(match["start"]), int(match["end"])

    def cluster_prefixes(self) -> list[str]:
        """Every prefix under which this cluster's partitions live (2**N with entropy)."""
        base = self.prefix.strip("/")
        if not self.entropy_bits:
            return ["/".join(p for p in (base, self.cluster) if p) + "/"]
        return [
            "/".join(p for p in (base, format(i, f"0{self.entropy_bits}b"), self.cluster) if p) + "/"
            for i in range(2**self.entropy_bits)
        ]

    def parse(self, key: str) -> ParsedKey:
        """Split a key of this keyspace back into its parts; raises InvalidSegmentNameError."""
        prefix_parts = [p for p in self.prefix.strip("/").split("/") if p]
        parts = key.split("/")
        expected = len(prefix_parts) + (1 if self.entropy_bits else 0) + 3
        if len(parts) != expected or parts[: len(prefix_parts)] != prefix_parts:
            raise InvalidSegmentNameError(f"object key {key!r} is not under {self.prefix!r} in this keyspace")
        cluster, directory, name = parts[-3:]
        topic, partition = parse_partition_dir_name(directory)
        if cluster != self.cluster or key.rsplit("/", 1)[0] + "/" != self.partition_prefix(topic, partition):
            raise InvalidSegmentNameError(f"object key {key!r} does not match cluster {self.cluster!r} and its entropy")
        segment = None if name == OFFSET_WM else SegmentFileName.parse(name)
        return ParsedKey(cluster, topic, partition, segment)
