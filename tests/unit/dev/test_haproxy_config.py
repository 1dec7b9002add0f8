"""The HAProxy configuration ``HAProxyServer`` writes for gateway replicas (pure text), and its
missing-binary error. The running load balancer is tested in tests/integration/gateway/test_replicas.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiered_kafka_dev.services import HAProxyServer, MissingBinaryError
from tiered_kafka_dev.services._haproxy import config_text


def test_the_config_balances_checks_and_replays_on_another_server() -> None:
    text = config_text([("127.0.0.1", 8081), ("127.0.0.1", 8082)], bind="127.0.0.1:8080", health_path="/healthz", check_interval_ms=500, fall=3, rise=2)
    lines = [line.strip() for line in text.splitlines()]
    for expected in (
        "mode http", "retries 3", "option redispatch 1", "retry-on conn-failure empty-response junk-response",
        "bind 127.0.0.1:8080", "balance roundrobin", "option httpchk GET /healthz", "http-check expect status 200",
        "default-server inter 500ms fall 3 rise 2", "server gw0 127.0.0.1:8081 check", "server gw1 127.0.0.1:8082 check",
    ):  # fmt: skip
        assert expected in lines, expected
    assert not any(line.startswith("stats socket") for line in lines)


def test_a_config_needs_a_backend() -> None:
    with pytest.raises(ValueError, match="at least one backend"):
        config_text([], bind="127.0.0.1:8080")
    with pytest.raises(ValueError, match="at least one backend port"):
        HAProxyServer([])


def test_a_missing_haproxy_says_to_run_install_sh(tmp_path: Path) -> None:
    server = HAProxyServer([8081], executable=tmp_path / "haproxy")
    with pytest.raises(MissingBinaryError, match=r"haproxy is not installed .*dev/install\.sh"):
        server.start()
    assert server.pid is None
