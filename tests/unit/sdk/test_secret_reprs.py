"""Issue 29: the SDK's default reprs show no secret: ``TieredConfig``'s gateway token and its
``kafka`` dict (SASL and SSL passwords), and a ``PlannedRange``'s presigned URL (its signature is a
credential until it expires)."""

from __future__ import annotations

from tiered_kafka.consumer.config import parse_config
from tiered_kafka.client.plan import Plan, PlannedRange

TOKEN = "gw-token-4f8e2a1c9b"
PASSWORD = "sasl-pw-0c3e5d7f91"
SIGNATURE = "X-Amz-Signature=7a6b5c4d3e2f"


def test_tiered_config_repr_shows_neither_the_token_nor_the_kafka_secrets() -> None:
    config = parse_config({
        "tiered.gateway.url": "http://gateway:8080", "tiered.cluster": "c1", "tiered.gateway.token": TOKEN,
        "bootstrap.servers": "kafka:9092", "group.id": "g", "security.protocol": "SASL_SSL", "sasl.password": PASSWORD, "ssl.key.password": PASSWORD,
    })
    assert config.gateway_token == TOKEN and config.kafka["sasl.password"] == PASSWORD  # still there for the clients
    for text in (repr(config), str(config), f"{config}", f"{config!r}"):
        assert TOKEN not in text and PASSWORD not in text
        assert "http://gateway:8080" in text and "c1" in text  # what is not secret stays useful


def test_a_planned_range_repr_leaves_its_presigned_url_out() -> None:
    url = f"https://bucket.s3.example/p/t-0/0.log?X-Amz-Credential=AK&{SIGNATURE}"
    planned = PlannedRange(0, 100, 0, 9, url, "bytes=0-99")
    assert planned.url == url
    for text in (repr(planned), str(planned)):
        assert SIGNATURE not in text and "X-Amz" not in text and "bytes=0-99" in text
    plan = Plan("t", 0, 0, "p/t-0/0.log", 0, 9, (planned,), 10, 0, None)
    assert SIGNATURE not in repr(plan) and "bytes=0-99" in repr(plan)
