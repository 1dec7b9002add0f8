"""dev/grafana/tiered-kafka.json: every PromQL expression names series the agent and the gateway
really export, with labels they really carry.

The exported series come from real scrapes: the gateway's ``/metrics`` (``create_app``, served by
TestClient after requests to an API route and a coverage page: the readers' caches and counters are
synced at scrape time, no Redis or S3 is contacted) and the agent's registry
(``AgentMetrics``) rendered by prometheus_client after every metric was exercised with one label
set (its children only appear once used, as in a running agent after its first upload)."""

from __future__ import annotations

import json
import re
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.local_url import LOCAL_URL
from tiered_kafka_agent.metrics import AgentMetrics
from tiered_kafka_gateway.app import create_app
from tiered_kafka_gateway.config import load_settings

DASHBOARD = Path(__file__).resolve().parents[2] / "dev" / "grafana" / "tiered-kafka.json"
METRIC = re.compile(r"\b(tiered_kafka_(?:agent|gateway)_[a-z0-9_]+)\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r"(tiered_kafka_[a-z0-9_]+)\{([^}]*)\}")
TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series


def exported(text: str) -> dict[str, set[str]]:
    """Sample name -> label names, from Prometheus text exposition."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def agent_series() -> dict[str, set[str]]:
    metrics = AgentMetrics()
    for collector in list(metrics.registry._collector_to_names):  # every metric the agent defines
        names = getattr(collector, "_labelnames", ())
        child = collector.labels(*["x"] * len(names)) if names else collector
        for action in ("inc", "set", "observe"):
            if hasattr(child, action):
                getattr(child, action)(1)
                break
    return exported(generate_latest(metrics.registry).decode())


def gateway_series() -> dict[str, set[str]]:
    settings = load_settings(clusters={"c1": {"redis_url": "redis://127.0.0.1:1", "s3": {"bucket": "b", "endpoint_url": "http://127.0.0.1:1"},
                                              "kafka_listener": {"port": 0}}})
    with TestClient(create_app(settings), base_url=LOCAL_URL) as client:
        assert client.get("/healthz").status_code == 200
        kafka_listener_exchange(client.app.state.kafka_listeners.running["c1"].port)  # type: ignore[attr-defined]
        scrape = client.get("/metrics")
    assert scrape.status_code == 200
    return exported(scrape.text)


def kafka_listener_exchange(port: int) -> None:
    """One ApiVersions v0 request to the Kafka listener, then a frame it refuses: its metrics' children appear."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))
        size = struct.unpack(">i", sock.recv(4))[0]
        while size > 0:
            size -= len(sock.recv(size))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", -1))
        assert sock.recv(1) == b""  # closed


@pytest.fixture(scope="module")
def series() -> dict[str, set[str]]:
    return {**agent_series(), **gateway_series()}


def expressions(node: Any) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets (rows included) and variable queries."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            else:
                found += expressions(value)
    elif isinstance(node, list):
        for item in node:
            found += expressions(item)
    return found


def test_every_dashboard_expression_names_exported_series_and_labels(series: dict[str, set[str]]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = expressions(dashboard)
    assert len(exprs) >= 20
    for expr in exprs:
        names = METRIC.findall(expr)
        assert names, f"no tiered_kafka metric in {expr!r}"
        for name in names:
            assert name in series, f"{name} (in {expr!r}) is not exported; exported: {sorted(n for n in series if n.split('_')[2] == name.split('_')[2])}"
        labels_there = set().union(*(series[n] for n in names)) | TARGET_LABELS
        for group in GROUPING.findall(expr):
            for label in filter(None, (part.strip() for part in group.split(","))):
                assert label in labels_there, f"label {label!r} of {expr!r} is not on {names}"
        for name, matchers in MATCHER.findall(expr):
            for label in re.findall(r"([a-z_]+)\s*=~?", matchers):
                assert label in series[name] | TARGET_LABELS, f"label {label!r} of {expr!r} is not on {name}"


def test_the_dashboard_covers_what_an_operator_asks(series: dict[str, set[str]]) -> None:
    used = {name for expr in expressions(json.loads(DASHBOARD.read_text())) for name in METRIC.findall(expr)}
    wanted = {
        "tiered_kafka_agent_upload_lag_offsets", "tiered_kafka_agent_upload_lag_seconds", "tiered_kafka_agent_uploaded_bytes_total",
        "tiered_kafka_agent_segments_uploaded_total", "tiered_kafka_agent_gaps_total", "tiered_kafka_agent_upload_failures_total",
        "tiered_kafka_agent_upload_retries_total", "tiered_kafka_agent_s3_request_errors_total", "tiered_kafka_gateway_request_seconds_count",
        "tiered_kafka_gateway_request_seconds_bucket", "tiered_kafka_gateway_cache_hit_ratio",
    }  # fmt: skip
    assert wanted <= used, wanted - used
    # every metric the processes export is on the dashboard (a new metric needs a panel)
    families = {re.sub(r"_(bucket|count|sum|created|total)$", "", n) for n in series}
    shown = {re.sub(r"_(bucket|count|sum|created|total)$", "", n) for n in used}
    assert families - shown == set(), families - shown
