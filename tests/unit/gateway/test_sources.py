"""``sources.build_sources``: each cluster kind gets its source, built without contacting a server
(the Redis and boto3 clients connect on first use), both answering the ``ClusterSource`` protocol."""

from __future__ import annotations

import inspect

import pytest

from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.remote import ClusterReader
from tiered_kafka_gateway.rsm_reader import RsmClusterReader
from tiered_kafka_gateway.sources import ClusterSource, build_sources


def test_each_kind_gets_its_source_and_both_implement_the_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    settings = load_settings(clusters={
        "agent": {"redis_url": "redis://127.0.0.1:1/0", "s3": {"bucket": "b", "endpoint_url": "http://127.0.0.1:1"}},
        "rsm": {"kind": "kip405", "rsm": {"bucket": "r", "endpoint_url": "http://127.0.0.1:1"}},
    })
    sources = build_sources(settings)
    try:
        assert type(sources["agent"]) is ClusterReader and type(sources["rsm"]) is RsmClusterReader
        assert not issubclass(RsmClusterReader, ClusterReader) and not issubclass(ClusterReader, RsmClusterReader)
        wanted = {name for name, _ in inspect.getmembers(ClusterSource) if not name.startswith("_")}
        for source in sources.values():
            assert all(hasattr(source, name) for name in wanted | {"name", "settings", "bootstrap_servers"}), type(source)
            assert source.s3_gets == source.presigns == 0
    finally:
        for source in sources.values():
            source.close()
