"""Configuration errors name every problem and never quote a secret (agent and gateway)."""

from __future__ import annotations

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka_agent.config import load_settings as load_agent_settings
from tiered_kafka_gateway.config import load_settings as load_gateway_settings

PASSWORD, SECRET_KEY = "pw-2f9c41d7e0", "sk-8a1b77c3d2e4"


def test_gateway_configuration_errors_do_not_quote_secrets(monkeypatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    cluster = {"redis_url": 42, "s3": {"secret_access_key": SECRET_KEY, "access_key_id": "AK"}}  # no bucket, a bad URL type
    with pytest.raises(ConfigError) as caught:
        load_gateway_settings(clusters={"c": cluster, "d": {"redis_url": f"redis://u:{PASSWORD}@h", "s3": "not a section"}})
    message = str(caught.value)
    assert "clusters.c.s3.bucket" in message and "clusters.d.s3" in message
    assert SECRET_KEY not in message and PASSWORD not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_agent_configuration_errors_do_not_quote_secrets() -> None:
    with pytest.raises(ConfigError) as caught:
        load_agent_settings(
            cluster="c", broker_id=0, log_dirs="/tmp/x", leadership={"mode": "static"},
            s3={"secret_access_key": SECRET_KEY}, redis={"url": f"http://u:{PASSWORD}@h:6379/0"},
        )
    message = str(caught.value)
    assert "s3.bucket" in message and "redis.url" in message and "http://u:***@h:6379/0" in message
    assert SECRET_KEY not in message and PASSWORD not in message
