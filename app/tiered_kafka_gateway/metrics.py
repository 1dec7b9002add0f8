"""Gateway metrics: request latency by route, caches, presigns, S3 GETs, Kafka proxy use.

The cluster readers and the Kafka pools keep plain per-process counts (ints, no locking on the
hot path); ``GatewayMetrics.sync`` copies them into prometheus_client metrics after every request
(``app._RouteTiming``) and before every scrape: a count's growth since the last sync is added to
its Counter, a size is set on its Gauge. Exported, per cluster (and cache name for caches)::

    tiered_kafka_gateway_request_seconds                      histogram (route, status)
    tiered_kafka_gateway_presigned_urls_total                 counter
    tiered_kafka_gateway_s3_gets_total                        counter
    tiered_kafka_gateway_kafka_proxy_calls_total              counter
    tiered_kafka_gateway_cache_hits_total, _cache_misses_total, _cache_evictions_total   counters
    tiered_kafka_gateway_cache_bytes, _cache_capacity_bytes, _cache_entries              gauges
    tiered_kafka_gateway_cache_hit_ratio                      gauge, derived at scrape time

**Several worker processes** (``tiered-kafka-gateway --workers N``): when $PROMETHEUS_MULTIPROC_DIR
is set (the launcher sets it for N > 1, in a temporary directory it creates and removes), every
metric lives in prometheus_client's multiprocess files and ``/metrics`` answers from
``MultiProcessCollector``, so whichever worker answers the scrape reports the whole server:

  * counters and histograms: the sum over every worker that ever ran (a dead worker's counts
    stay, so counters never go down while the server runs);
  * cache gauges: ``livesum``, the sum over live workers: bytes, entries and capacity of all the
    caches the server holds now (each worker has its own caches: capacity is N x the setting).
    Files of workers no longer alive (killed, not only exited) are dropped at each scrape
    (``prometheus_client.multiprocess.mark_process_dead``);
  * hit ratio: hits / (hits + misses) of the summed counters (0 before any lookup), never an
    average of per-worker ratios.

With one process and no $PROMETHEUS_MULTIPROC_DIR the same metrics come from the process's own
registry (``multiprocess_mode`` is then ignored).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from tiered_kafka_service.processes import pid_exists
from tiered_kafka_gateway import kafka_offsets
from tiered_kafka_gateway.kafka_listener.metrics import ListenerMetrics

PREFIX = "tiered_kafka_gateway"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's variable: the directory of the workers' metric files (multiprocess mode)."""

_LIVE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db$")


def multiprocess_dir() -> str | None:
    """The multiprocess directory of this process's metrics, None in single-process mode."""
    return os.environ.get(MULTIPROC_ENV) or None


class _LiveWorkers(Collector):
    """``MultiProcessCollector`` over ``path``, first dropping live gauges of dead processes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._collector = MultiProcessCollector(None, path=path)

    def collect(self) -> Iterable[Metric]:
        for name in glob.glob(os.path.join(self.path, "gauge_live*_*.db")):
            match = _LIVE_FILE.search(name)
            if match and not pid_exists(int(match.group(1))):
                mark_process_dead(int(match.group(1)), self.path)
        return self._collector.collect()


class _WithHitRatio(Collector):
    """What ``source`` collects, plus the caches' hit ratios computed from its (summed) counters."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        metrics = list(self.source.collect())
        yield from metrics
        totals: dict[str, dict[tuple[str, str], float]] = {"hits": {}, "misses": {}}
        for metric in metrics:
            for kind in totals:
                if metric.name == f"{PREFIX}_cache_{kind}":
                    for sample in metric.samples:
                        if sample.name.endswith("_total"):
                            key = (sample.labels["cluster"], sample.labels["cache"])
                            totals[kind][key] = totals[kind].get(key, 0.0) + sample.value
        ratio = GaugeMetricFamily(f"{PREFIX}_cache_hit_ratio", "Hits / lookups of an in-memory cache (every worker)", labels=["cluster", "cache"])
        for key in sorted(totals["hits"].keys() | totals["misses"].keys()):
            hits, misses = totals["hits"].get(key, 0.0), totals["misses"].get(key, 0.0)
            ratio.add_metric(list(key), hits / (hits + misses) if hits + misses else 0.0)
        yield ratio


class GatewayMetrics:
    """The gateway's metrics; ``registry`` is what ``/metrics`` exposes (module docstring)."""

    def __init__(self, readers: dict[str, Any] | None = None) -> None:
        own = CollectorRegistry()
        self.readers: dict[str, Any] = readers if readers is not None else {}
        self.latency = Histogram(
            f"{PREFIX}_request_seconds", "Request latency by route", ["route", "status"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=own,
        )
        self.presigns = Counter(f"{PREFIX}_presigned_urls", "Presigned range URLs handed out", ["cluster"], registry=own)
        self.kafka_calls = Counter(f"{PREFIX}_kafka_proxy_calls", "Calls to Kafka (reads and offsets)", ["cluster"], registry=own)
        self.s3_gets = Counter(f"{PREFIX}_s3_gets", "S3 GET requests made by the gateway itself", ["cluster"], registry=own)
        labels = ["cluster", "cache"]
        self.cache_hits = Counter(f"{PREFIX}_cache_hits", "Lookups answered by an in-memory cache", labels, registry=own)
        self.cache_misses = Counter(f"{PREFIX}_cache_misses", "Lookups an in-memory cache had to load", labels, registry=own)
        self.cache_evictions = Counter(f"{PREFIX}_cache_evictions", "Entries evicted to keep a cache within its bytes", labels, registry=own)
        self.cache_bytes = Gauge(f"{PREFIX}_cache_bytes", "Estimated bytes held by an in-memory cache (live workers)", labels, registry=own, multiprocess_mode="livesum")
        self.cache_capacity = Gauge(f"{PREFIX}_cache_capacity_bytes", "The bytes an in-memory cache may hold (live workers)", labels, registry=own, multiprocess_mode="livesum")
        self.cache_entries = Gauge(f"{PREFIX}_cache_entries", "Entries held by an in-memory cache (live workers)", labels, registry=own, multiprocess_mode="livesum")
        self.listener = ListenerMetrics(own)  # the Kafka-protocol listener's (kafka_listener.metrics)
        path = multiprocess_dir()
        self.registry = CollectorRegistry()
        self.registry.register(_WithHitRatio(_LiveWorkers(path) if path else own))
        self._seen: dict[tuple[int, tuple[str, ...]], tuple[Any, float]] = {}  # (id(metric), labels) -> (child, last value)

    def observe(self, route: str, status: int, seconds: float) -> None:
        """One answered request: its latency, then, in multiprocess mode, the readers' counts
        (``sync``: the worker answering a scrape cannot see the other workers' readers; in one
        process ``refresh`` at scrape time does it)."""
        self.latency.labels(route, str(status)).observe(seconds)
        if multiprocess_dir():
            self.sync()

    def refresh(self, readers: dict[str, Any] | None = None) -> None:
        """Before a scrape: ``sync`` (``readers``, when given, replace those held)."""
        if readers is not None:
            self.readers = readers
        self.sync()

    def sync(self) -> None:
        """Copy the readers' counts into the metrics (counters grow by what the count grew)."""
        for name, reader in self.readers.items():
            self._count(self.s3_gets, (name,), reader.s3_gets)
            self._count(self.presigns, (name,), reader.presigns)
            self._count(self.kafka_calls, (name,), kafka_offsets.calls(name))
            for cache in reader.caches:
                key = (name, cache.name)
                self._count(self.cache_hits, key, cache.hits)
                self._count(self.cache_misses, key, cache.misses)
                self._count(self.cache_evictions, key, cache.evictions)
                self._level(self.cache_bytes, key, cache.bytes)
                self._level(self.cache_capacity, key, cache.capacity_bytes)
                self._level(self.cache_entries, key, len(cache))

    def _count(self, counter: Counter, labels: tuple[str, ...], value: int) -> None:
        child, last = self._child(counter, labels)
        if value != last:
            # a count below the last one seen was reset (e.g. a Kafka pool closed and rebuilt):
            # everything it holds now is new
            child.inc(value - last if value > last else value)
            self._seen[(id(counter), labels)] = (child, value)

    def _level(self, gauge: Gauge, labels: tuple[str, ...], value: float) -> None:
        child, last = self._child(gauge, labels)
        if value != last:
            child.set(value)
            self._seen[(id(gauge), labels)] = (child, value)

    def _child(self, metric: Counter | Gauge, labels: tuple[str, ...]) -> tuple[Any, float]:
        found = self._seen.get((id(metric), labels))
        if found is None:
            found = self._seen[(id(metric), labels)] = (metric.labels(*labels), 0)  # a new series starts at 0
        return found
