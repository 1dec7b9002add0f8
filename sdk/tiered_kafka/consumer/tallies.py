"""Records TieredConsumer delivered per partition and source (``TieredConsumer.delivered_by_source``)."""

from __future__ import annotations

from tiered_kafka.modes import Source

TP = tuple[str, int]


class SourceCounts:
    """Owns the count of records delivered per (topic, partition), by source."""

    def __init__(self) -> None:
        self._counts: dict[TP, dict[str, int]] = {}

    def add(self, tp: TP, source: Source, records: int) -> None:
        counts = self._counts.get(tp)
        if counts is None:
            counts = self._counts[tp] = {Source.REMOTE.value: 0, Source.KAFKA.value: 0}
        counts[source.value] += records

    def snapshot(self) -> dict[TP, dict[str, int]]:
        return {tp: dict(counts) for tp, counts in self._counts.items()}
