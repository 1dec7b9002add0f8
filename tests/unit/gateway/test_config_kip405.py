"""The kip405 cluster settings (``config``): checked, and secrets never quoted (issue 18)."""

from __future__ import annotations

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka_gateway.config import load_settings


def test_kip405_settings_are_checked_without_quoting_keys(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    pem = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n"
    cluster = {"kind": "kip405", "rsm": {"bucket": "b", "key_ring": {"k1": pem}}}
    with pytest.raises(ConfigError, match="rsm_url_secret") as missing_secret:
        load_settings(clusters={"c": cluster})
    assert "c2VjcmV0" not in str(missing_secret.value)
    with pytest.raises(ConfigError, match="public_url"):
        load_settings(clusters={"c": cluster}, rsm_url_secret="s" * 32)
    (tmp_path / "k.pem").write_text(pem)
    settings = load_settings(clusters={"c": {"kind": "kip405", "rsm": {"bucket": "b", "key_ring": {"k1": str(tmp_path / "k.pem")}}}},
                             rsm_url_secret="s" * 32, public_url="http://gw")
    assert settings.clusters["c"].rsm.key_ring["k1"].get_secret_value() == pem  # type: ignore[union-attr]
    assert "c2VjcmV0" not in repr(settings)
    with pytest.raises(ConfigError, match="not PEM text, and not a readable file"):
        load_settings(clusters={"c": {"kind": "kip405", "rsm": {"bucket": "b", "key_ring": {"k1": str(tmp_path / "none.pem")}}}})
    with pytest.raises(ConfigError, match='kind "kip405" has no registry'):
        load_settings(clusters={"c": {**cluster, "redis_url": "redis://r", "rsm": {"bucket": "b"}}})
    with pytest.raises(ConfigError, match='kind "agent" needs redis_url and s3'):
        load_settings(clusters={"c": {"s3": {"bucket": "b"}}})
