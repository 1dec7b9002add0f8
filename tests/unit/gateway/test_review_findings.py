"""Issue 36's findings answered by the HTTP layer and the settings, on the real app (``create_app``)
over clusters whose Redis and S3 are never contacted (nothing listens on port 1): the Host allowlist
(DNS rebinding) and the slash redirect; the exposure check inside the app; ``Cache-Control:
no-store``; no Swagger from a CDN and a declared security scheme; ``/metrics`` only for a token that
names it; secrets out of reprs and dumps; unknown keys refused in every section."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tiered_kafka.errors import ConfigError
from tiered_kafka.read_plan import ByteRange
from tiered_kafka_gateway.app import create_app
from tiered_kafka_gateway.caches import RemoteSegment
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.plans import Plan

UNREACHABLE = {"redis_url": "redis://gateway-user:redis-PASSWORD-7f3a@127.0.0.1:1/0", "s3": {"bucket": "b", "endpoint_url": "http://127.0.0.1:1"}}
SCOPED = "scoped-token-3e1f0a9c"  # c1 only, no metrics
SCRAPER = "scrape-token-9b2c4d1e"  # metrics only
ANYWHERE = "wide-token-77d2b4e618"  # every cluster and topic, no metrics


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)


def app_of(**overrides: object) -> TestClient:
    return TestClient(create_app(load_settings(clusters={"c1": UNREACHABLE, "c2": UNREACHABLE}, **overrides)), base_url=LOCAL_URL)


@pytest.fixture
def open_client() -> Iterator[TestClient]:
    with app_of() as client:
        yield client


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8080", "localhost.attacker.example", "testserver"])
def test_a_host_name_outside_allowed_hosts_is_refused_before_routing(open_client: TestClient, host: str) -> None:
    for path in ("/v1/clusters", "/ui/", "/healthz", "/metrics", "/no/such/route"):
        answer = open_client.get(path, headers={"Host": host})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "host_not_allowed", (path, answer.status_code, answer.text[:200])
        assert host.split(":")[0] not in answer.text  # the Host is never echoed
    redirect = open_client.get("/ui", headers={"Host": host}, follow_redirects=False)  # Starlette's slash redirect echoed the Host
    assert redirect.status_code == 403 and "location" not in redirect.headers, redirect.headers


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "LOCALHOST.", "127.0.0.1:9", "[::1]:8080", "192.0.2.7", "[fd00::2]"])
def test_loopback_names_and_ip_literals_are_answered(open_client: TestClient, host: str) -> None:
    answer = open_client.get("/v1/clusters", headers={"Host": host})
    assert answer.status_code == 200 and answer.json() == {"clusters": ["c1", "c2"]}
    redirect = open_client.get("/ui", headers={"Host": host}, follow_redirects=False)
    assert redirect.status_code == 307


def test_allowed_hosts_names_the_hosts_a_deployment_answers_for() -> None:
    with app_of(allowed_hosts=["gateway.example.com", "*.corp.example"]) as client:
        assert client.get("/healthz", headers={"Host": "gateway.example.com:443"}).status_code == 200
        assert client.get("/healthz", headers={"Host": "gw.eu.corp.example"}).status_code == 200
        assert client.get("/healthz", headers={"Host": "corp.example.attacker.example"}).status_code == 403
        assert client.get("/healthz", headers={"Host": "localhost"}).status_code == 403  # the list replaces the default
    with app_of(allowed_hosts=["*"]) as client:
        assert client.get("/healthz", headers={"Host": "anything.example"}).status_code == 200
    with pytest.raises(ConfigError, match="allowed_hosts"):
        load_settings(clusters={"c1": UNREACHABLE}, allowed_hosts=["http://x/"])


def test_without_authentication_the_app_answers_on_loopback_only_whatever_started_it() -> None:
    """``uvicorn tiered_kafka_gateway.asgi:app --host 0.0.0.0`` runs no CLI check: the app checks the
    address each request arrived on (TestClient's: its base URL's host)."""
    settings = load_settings(clusters={"c1": UNREACHABLE})
    with TestClient(create_app(settings), base_url="http://192.0.2.2:8080") as client:
        answer = client.get("/v1/clusters")
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "anonymous_beyond_loopback", answer.text
        assert "auth.enabled" in answer.json()["error"]["message"]
    anonymous = settings.model_copy(update={"auth": settings.auth.model_copy(update={"allow_anonymous": True})})
    with TestClient(create_app(anonymous), base_url="http://192.0.2.2:8080") as client:
        assert client.get("/v1/clusters").status_code == 200
    with app_of(auth={"enabled": True, "tokens": {SCOPED: ["t"]}}) as local:
        assert local.get("/v1/clusters", headers={"X-API-Key": SCOPED}).status_code == 200


def test_every_answer_says_no_store(open_client: TestClient) -> None:
    for path, status in (("/healthz", 200), ("/v1/clusters", 200), ("/ui/", 200), ("/v1/clusters/nowhere/topics", 404), ("/openapi.json", 200)):
        answer = open_client.get(path)
        assert answer.status_code == status, (path, answer.text[:200])
        assert answer.headers["cache-control"] == "no-store" and answer.headers["x-frame-options"] == "DENY", (path, answer.headers)
    with app_of(auth={"enabled": True, "tokens": {SCOPED: ["t"]}}) as client:
        assert client.get("/v1/clusters").headers["cache-control"] == "no-store"  # the 401 too


def test_no_swagger_from_a_cdn_and_the_description_declares_its_security(open_client: TestClient) -> None:
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert open_client.get(path).status_code == 404, path
    spec = open_client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearerToken"] == {"type": "http", "scheme": "bearer", "description": "a token of auth.tokens (when auth.enabled)"}
    assert spec["components"]["securitySchemes"]["apiKey"]["name"] == "X-API-Key"
    assert spec["security"] == [{"bearerToken": []}, {"apiKey": []}]
    assert spec["paths"]["/healthz"]["get"]["security"] == [] and "security" not in spec["paths"]["/v1/clusters"]["get"]
    assert "cdn" not in json.dumps(spec).lower()


def test_metrics_are_served_only_to_a_token_that_names_them() -> None:
    """The review's case: a token limited to one cluster read every cluster's series (decision:
    ``tokens`` module doc)."""
    tokens = {SCOPED: {"topics": [".*"], "clusters": ["c1"]}, SCRAPER: {"topics": [], "metrics": True}, ANYWHERE: [".*"]}
    with app_of(auth={"enabled": True, "tokens": tokens}) as client:
        for token in (SCOPED, ANYWHERE):
            answer = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 403 and answer.json()["error"]["code"] == "metrics_not_authorized", answer.text[:200]
            assert 'cluster="c2"' not in answer.text
        assert client.get("/metrics").status_code == 401
        scraped = client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"})
        assert scraped.status_code == 200 and 'cluster="c2"' in scraped.text
        assert client.get("/v1/clusters", headers={"Authorization": f"Bearer {SCRAPER}"}).json() == {"clusters": ["c1", "c2"]}
        assert client.get("/v1/clusters/c1/topics/t/partitions/0", headers={"Authorization": f"Bearer {SCRAPER}"}).status_code == 403  # no topic
    with app_of() as client:  # authentication off: every caller reads everything
        assert client.get("/metrics").status_code == 200


def test_no_secret_in_the_settings_repr_or_dump_nor_a_presigned_url_in_a_plan_repr() -> None:
    settings = load_settings(clusters={"c1": UNREACHABLE}, auth={"enabled": True, "tokens": {SCOPED: ["t"], SCRAPER: {"topics": [], "metrics": True}}})
    shown = repr(settings) + str(settings)
    assert "redis-PASSWORD-7f3a" not in shown and "gateway-user" in shown, shown  # the user stays, the password goes
    dumped = json.dumps(settings.model_dump(), default=repr) + json.dumps(settings.model_dump(mode="json"))
    assert SCOPED not in dumped and SCRAPER not in dumped, dumped
    again = load_settings(**{k: v for k, v in settings.model_dump().items() if k != "auth"},
                          auth={**settings.model_dump()["auth"], "tokens": [{**e, "token": e["token"].get_secret_value()} for e in settings.model_dump()["auth"]["tokens"]]})
    assert again.auth.tokens == settings.auth.tokens  # the dump's form reads back (a test harness writes it to a file)
    url = "https://s3.example/bucket/key?X-Amz-Credential=AKIA&X-Amz-Signature=0123456789abcdef"
    plan = Plan(RemoteSegment("p/t-0/00000000000000000000.log", 0, 9, 100, -1), [ByteRange(0, 100, 0, 9)], [url], 0, None)
    assert "X-Amz-Signature" not in repr(plan) and "s3.example" not in repr(plan), repr(plan)


@pytest.mark.parametrize(
    ("section", "where"),
    [
        ({"clusters": {"c1": {**UNREACHABLE, "kafka_securty": {"sasl.password": "x"}}}}, "kafka_securty"),
        ({"clusters": {"c1": {**UNREACHABLE, "kafka_security": {"sasl.usrname": "u", "sasl.password": "x"}}}}, "sasl.usrname"),
        ({"clusters": {"c1": {**UNREACHABLE, "kafka_security": {"ssl.ca.locaton": "/ca.pem"}}}}, "ssl.ca.locaton"),
        ({"clusters": {"c1": {**UNREACHABLE, "s3": {"bucket": "b", "secret_key": "x"}}}}, "secret_key"),
        ({"clusters": {"c1": UNREACHABLE}, "cache": {"index_byte": 4096}}, "index_byte"),
        ({"clusters": {"c1": UNREACHABLE}, "auth": {"enabled": True, "token": {SCOPED: ["t"]}}}, "token"),
        ({"clusters": {"c1": UNREACHABLE}, "kafka": {"timeout": 3}}, "timeout"),
        ({"clusters": {"c1": UNREACHABLE}, "timeouts": {"redis": 3}}, "redis"),
        ({"clusters": {"c1": {"kind": "kip405", "rsm": {"bucket": "r", "keyprefix": "x"}}}}, "keyprefix"),
    ],
)
def test_an_unknown_key_in_any_section_is_refused_naming_it(section: dict, where: str, tmp_path: Path) -> None:
    """The review's case: a typo in ``kafka_security`` silently dropped SASL."""
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps(section))
    with pytest.raises(ConfigError, match=where) as refused:
        load_settings(config)
    assert "x" not in str(refused.value).split(":")[-1] or "Extra inputs" in str(refused.value)


def test_every_kafka_security_key_accepted_is_a_property_the_installed_librdkafka_knows() -> None:
    """The exact list (``config.KAFKA_SECURITY_KEYS``) stays librdkafka's: each name is known to the
    installed library (a bad value may be refused; an unknown name is "No such configuration property")."""
    import confluent_kafka

    from tiered_kafka_gateway.config import KAFKA_SECURITY_KEYS

    unknown = []
    for key in sorted(KAFKA_SECURITY_KEYS):
        try:
            confluent_kafka.Consumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:9", key: "x"}).close()
        except (confluent_kafka.KafkaException, ValueError, TypeError) as err:
            if "No such configuration property" in str(err):
                unknown.append(key)
    assert not unknown
    with pytest.raises(confluent_kafka.KafkaException, match="No such configuration property"):
        confluent_kafka.Consumer({"group.id": "g", "sasl.usrname": "x"})


def test_a_gateway_config_file_holding_secrets_that_others_may_read_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"clusters": {"c1": {**UNREACHABLE, "kafka_security": {"sasl.password": "hunter2-secret"}}}}))
    config.chmod(0o644)
    load_settings(config)
    assert "holds secrets (kafka_security, redis_url)" in caplog.text and "chmod 600" in caplog.text and "hunter2" not in caplog.text, caplog.text
    caplog.clear()
    config.chmod(0o600)
    load_settings(config)
    assert "holds secrets" not in caplog.text
