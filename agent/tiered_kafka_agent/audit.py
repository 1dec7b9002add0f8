"""``tiered-kafka-agent audit``: prove, per partition, that every offset is accounted for.

DESIGN.md, contract 5: every offset at or after a partition's coverage start is, at any moment,

- in remote storage (a registered segment),
- still in Kafka (at or above the broker's log start offset, below its log end offset),
- in a recorded gap (with its reason), or
- below the coverage's ``expired_until`` (deleted by remote retention, as configured).

The audit reads the registry (coverage, segments, gaps) and asks the broker for each partition's
log start and end offsets (``Consumer.get_watermark_offsets``, i.e. ListOffsets earliest and
latest, read_uncommitted). Any offset in ``[coverage start, end)`` covered by none of the four is
*unaccounted*; the audit names every such range and exits 1. ``end`` is the broker's log end
offset, or, for a partition Kafka does not know (a deleted topic), the registry's
``next_offset`` (what the agent accounted for).

A partition without a coverage start makes no claim (no agent has followed it): it is listed as
such and does not fail the audit. A broker that cannot be asked is an error (exit 3): without
it, "still in Kafka" cannot be told apart from "lost".

Races: the audit reads the broker and the registry one after the other. A segment uploaded and
then deleted by Kafka's retention between the two reads is still remote; retention that deletes
an uploaded-but-not-yet-registered segment between them can make a range look unaccounted for a
moment, so a failing audit is worth running again before acting on it.

Output: one block per partition (text), or with ``--json``
``{"ok": bool, "partitions": [{"topic", "partition", "kafka": {"log_start", "log_end"} | null,
"kafka_error": str | null, "coverage_start": {"offset", "observed_ms"} | null, "expired_until",
"next_offset", "remote": [[first, last], ...], "gaps": [{"start_offset", "end_offset", "reason",
"detected_ms"}], "unaccounted": [[first, last], ...], "ok": bool}]}`` (ranges inclusive).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tiered_kafka.registry import CoverageStart, Gap, Registry
from tiered_kafka_agent.errors import AgentError

Range = tuple[int, int]  # inclusive


class AuditError(AgentError):
    """The audit could not be carried out (the broker unreachable, a bad argument)."""


@dataclass
class PartitionAudit:
    """What the audit found for one partition."""

    topic: str
    partition: int
    kafka: Range | None  # (log start, log end): half-open in Kafka's terms, kept as two offsets
    kafka_error: str | None
    coverage_start: CoverageStart | None
    expired_until: int
    next_offset: int
    remote: list[Range] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    unaccounted: list[Range] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unaccounted

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "kafka": None if self.kafka is None else {"log_start": self.kafka[0], "log_end": self.kafka[1]},
            "kafka_error": self.kafka_error,
            "coverage_start": None if self.coverage_start is None else self.coverage_start.to_dict(),
            "expired_until": self.expired_until,
            "next_offset": self.next_offset,
            "remote": [list(r) for r in self.remote],
            "gaps": [g.to_dict() for g in self.gaps],
            "unaccounted": [list(r) for r in self.unaccounted],
            "ok": self.ok,
        }

    def to_text(self) -> str:
        name = f"{self.topic}-{self.partition}"
        kafka = f"log start {self.kafka[0]}, log end {self.kafka[1]}" if self.kafka else f"unknown to Kafka ({self.kafka_error})"
        lines = [f"{name}: {'OK' if self.ok else 'UNACCOUNTED OFFSETS'}", f"  kafka:          {kafka}"]
        if self.coverage_start is None:
            lines.append("  coverage start: none (no agent has followed this partition: nothing is claimed)")
        else:
            lines.append(f"  coverage start: {self.coverage_start.offset} (observed at {self.coverage_start.observed_ms} ms)")
        if self.expired_until > (self.coverage_start.offset if self.coverage_start else 0):
            lines.append(f"  expired:        below {self.expired_until} (deleted by remote retention)")
        lines.append(f"  remote:         {_ranges_text(self.remote)}")
        lines.append(f"  gaps:           {'none' if not self.gaps else ''}")
        lines[-1] = lines[-1].rstrip()
        lines += [f"    {g.start_offset}..{g.end_offset}: {g.reason}" for g in self.gaps]
        lines += [f"  UNACCOUNTED:    {a}..{b} (neither remote, nor in Kafka, nor a recorded gap)" for a, b in self.unaccounted]
        return "\n".join(lines)


def merge_ranges(ranges: Iterable[Range]) -> list[Range]:
    """Inclusive ranges merged into sorted, disjoint, non-adjacent runs.

    >>> merge_ranges([(10, 19), (0, 9), (30, 39), (35, 40)])
    [(0, 19), (30, 40)]
    """
    merged: list[Range] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def subtract(span: Range, covered: Sequence[Range]) -> list[Range]:
    """The parts of the inclusive ``span`` that no range of ``covered`` (merged) holds.

    >>> subtract((0, 99), [(10, 19), (50, 120)])
    [(0, 9), (20, 49)]
    """
    first, last = span
    missing: list[Range] = []
    cursor = first
    for a, b in covered:
        if b < cursor:
            continue
        if a > last:
            break
        if a > cursor:
            missing.append((cursor, min(a - 1, last)))
        cursor = max(cursor, b + 1)
        if cursor > last:
            break
    if cursor <= last:
        missing.append((cursor, last))
    return missing


def audit_partition(registry: Registry, topic: str, partition: int, kafka: Range | None, kafka_error: str | None = None) -> PartitionAudit:
    """Audit one partition; ``kafka`` is (log start, log end) from the broker, None if unknown to it."""
    coverage = registry.coverage(topic, partition)
    remote = merge_ranges((s.first, s.last_offset) for s in registry.segments(topic, partition))
    gaps = registry.gaps(topic, partition)
    result = PartitionAudit(topic, partition, kafka, kafka_error, coverage.start, coverage.expired_until, coverage.next_offset, remote, gaps)
    if coverage.start is None:
        return result
    start = coverage.start.offset
    end = kafka[1] if kafka is not None else max(coverage.next_offset, remote[-1][1] + 1 if remote else -1)
    covered = list(remote) + [(g.start_offset, g.end_offset) for g in gaps]
    if coverage.expired_until > start:
        covered.append((start, coverage.expired_until - 1))
    if kafka is not None and kafka[1] > kafka[0]:
        covered.append((kafka[0], kafka[1] - 1))
    if end > start:
        result.unaccounted = subtract((start, end - 1), merge_ranges(covered))
    return result


def _ranges_text(ranges: Sequence[Range]) -> str:
    return ", ".join(f"{a}..{b}" for a, b in ranges) if ranges else "none"


# -- the broker side ---------------------------------------------------------------------------


class KafkaOffsets:
    """Log start and end offsets from the broker, through a confluent-kafka Consumer.

    The consumer reads with ``isolation.level=read_uncommitted``, whatever ``config`` says:
    librdkafka's default, read_committed, would make ListOffsets answer the last stable offset,
    which stops at the first open transaction, instead of the log end offset the audit accounts
    up to. A configuration librdkafka refuses raises AuditError.
    """

    #: librdkafka's answers for a topic or partition the cluster does not know
    UNKNOWN = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC"})

    def __init__(self, bootstrap_servers: str, timeout_s: float = 10.0, **config: Any) -> None:
        from confluent_kafka import Consumer, KafkaException

        self.timeout_s = timeout_s
        self.config = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "tiered-kafka-agent-audit",
            "enable.auto.commit": False,
            **config,
            "isolation.level": "read_uncommitted",
        }
        try:
            self._consumer = Consumer(self.config)
        except (KafkaException, ValueError, TypeError) as err:
            raise AuditError(f"could not create a Kafka client for {bootstrap_servers!r}: {err}") from err

    def partitions(self, topic: str) -> list[int]:
        """The partitions Kafka knows for ``topic`` (empty when it does not know the topic)."""
        from confluent_kafka import KafkaException

        try:
            metadata = self._consumer.list_topics(topic, timeout=self.timeout_s)
        except KafkaException as err:
            raise AuditError(f"could not read Kafka's metadata for topic {topic!r}: {err}") from err
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return []
        return sorted(found.partitions)

    def log_range(self, topic: str, partition: int) -> tuple[Range | None, str | None]:
        """((log start, log end), None), or (None, Kafka's error name) for an unknown partition."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout_s, cached=False)
        except KafkaException as err:
            error = err.args[0]
            if error.name() in self.UNKNOWN:
                return None, error.name()
            raise AuditError(f"could not ask Kafka for the offsets of {topic}-{partition}: {error.str()} ({error.name()})") from err
        return (low, high), None

    def close(self) -> None:
        self._consumer.close()


def run_audit(registry: Registry, kafka: KafkaOffsets, topics: Sequence[str] | None = None) -> list[PartitionAudit]:
    """Audit the partitions of ``topics`` (registry's and Kafka's), or every partition in the registry."""
    known = registry.topics()
    wanted = sorted(known) if not topics else list(dict.fromkeys(topics))
    results = []
    for topic in wanted:
        partitions = set(known.get(topic, []))
        if topics:
            partitions |= set(kafka.partitions(topic))
        for partition in sorted(partitions):
            log_range, error = kafka.log_range(topic, partition)
            results.append(audit_partition(registry, topic, partition, log_range, error))
    return results


def report(results: Sequence[PartitionAudit], *, as_json: bool) -> str:
    if as_json:
        return json.dumps({"ok": all(r.ok for r in results), "partitions": [r.to_dict() for r in results]}, indent=2)
    if not results:
        return "no partitions to audit"
    bad = [r for r in results if not r.ok]
    summary = f"{len(results)} partitions audited: " + ("all offsets accounted for" if not bad else f"{len(bad)} with unaccounted offsets")
    return "\n".join([*(r.to_text() for r in results), summary])
