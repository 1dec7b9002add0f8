"""Issue 29: the gateway's Kafka proxy takes librdkafka's security settings from the cluster's
``kafka_security`` (``config``, ``kafka_offsets``), and its secrets show nowhere.

No SASL broker runs here: the test checks what reaches librdkafka (a real ``Consumer`` is built
from that configuration, so librdkafka accepts it) and that the password appears in no repr, no
str, no log record and no error, through a call that fails against a port nothing listens on."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka_gateway import kafka_offsets
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.sources import build_sources

PASSWORD = "sasl-pw-9d41c07be2"
KEY_PASSWORD = "key-pw-1a2b3c4d5e"
SECURITY = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "gateway",
    "sasl.password": PASSWORD,
    "ssl.key.password": KEY_PASSWORD,
    "enable.ssl.certificate.verification": False,
}


def test_security_settings_reach_the_consumers_and_no_secret_shows(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    cluster = {"redis_url": "redis://127.0.0.1:1/0", "s3": {"bucket": "b"}, "bootstrap_servers": "127.0.0.1:1", "kafka_security": SECURITY}
    settings = load_settings(clusters={"secured": cluster}, kafka={"timeout_s": 1})
    made: list[dict[str, Any]] = []
    real_consumer = kafka_offsets.Consumer

    def recording_consumer(config: dict[str, Any]) -> Any:
        made.append(dict(config))
        return real_consumer(config)  # librdkafka validates every key and value here

    monkeypatch.setattr(kafka_offsets, "Consumer", recording_consumer)
    source = build_sources(settings)["secured"]
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(GatewayError) as failed:
            kafka_offsets.watermarks(source, "t", 0)  # nothing listens on port 1: Kafka unavailable
        pool = kafka_offsets.pool_for(source)
    finally:
        kafka_offsets.close_pools(["secured"])
        source.close()
    assert failed.value.error is ErrorCode.KAFKA_UNAVAILABLE
    assert len(made) == 1
    assert {k: made[0][k] for k in SECURITY} == {**SECURITY, "enable.ssl.certificate.verification": "false"}
    assert made[0]["bootstrap.servers"] == "127.0.0.1:1" and made[0]["auto.offset.reset"] == "error"  # the gateway's own settings stay
    shown = [repr(settings), str(settings), repr(settings.clusters["secured"]), settings.model_dump_json(), repr(pool), str(failed.value),
             repr(failed.value.__dict__), caplog.text, *(record.getMessage() for record in caplog.records)]
    for text in shown:
        assert PASSWORD not in text and KEY_PASSWORD not in text


def test_only_security_settings_are_taken_and_the_error_names_keys_not_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    for other in ("group.id", "auto.offset.reset", "bootstrap.servers"):  # the gateway's consumers own those
        cluster = {"redis_url": "redis://h", "s3": {"bucket": "b"}, "kafka_security": {"sasl.password": PASSWORD, other: PASSWORD}}
        with pytest.raises(ConfigError) as caught:
            load_settings(clusters={"c": cluster})
        assert "clusters.c.kafka_security" in str(caught.value) and other in str(caught.value)
        assert PASSWORD not in str(caught.value)


def test_the_kip405_metadata_reader_gets_the_same_security_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    cluster = {"kind": "kip405", "rsm": {"bucket": "r", "endpoint_url": "http://127.0.0.1:1"}, "bootstrap_servers": "127.0.0.1:1", "kafka_security": SECURITY}
    source = build_sources(load_settings(clusters={"rsm": cluster}))["rsm"]
    try:
        assert source.catalog._security == {**SECURITY, "enable.ssl.certificate.verification": "false"}  # type: ignore[attr-defined]
        assert PASSWORD not in repr(source.catalog)  # type: ignore[attr-defined]
    finally:
        source.close()
