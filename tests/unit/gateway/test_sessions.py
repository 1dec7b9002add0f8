"""The browser login's rules on the real app (``create_app``, no service contacted): the cookie's
flags (``Secure`` when served over TLS), its scope (pages only, the token's grant), a token removed
from the configuration ending its sessions, and no login without a session key (``sessions``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tiered_kafka_gateway.app import create_app
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.sessions import LOGIN_COOKIE, SESSION_COOKIE, Sessions
from tiered_kafka_gateway.tokens import TokenBook

UNREACHABLE = {"redis_url": "redis://127.0.0.1:1/0", "s3": {"bucket": "b", "endpoint_url": "http://127.0.0.1:1"}}
READER = "reader-token-" + "r" * 12
SECRET = "s" * 40


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)


def settings_of(**auth: object):  # type: ignore[no-untyped-def]
    return load_settings(clusters={"c1": UNREACHABLE, "c2": UNREACHABLE},
                         auth={"enabled": True, "tokens": {READER: {"topics": ["t"], "clusters": ["c1"]}}, "session_secret": SECRET, **auth})


def log_in(client: TestClient, base: str, token: str = READER):  # type: ignore[no-untyped-def]
    form = client.get("/ui/login")
    assert form.status_code == 200
    nonce = client.cookies.get(LOGIN_COOKIE)
    assert nonce and f'value="{nonce}"' in form.text
    return client.post("/ui/login", data={"token": token, "csrf": nonce}, headers={"Origin": base}, follow_redirects=False)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(settings_of()), base_url=LOCAL_URL) as test_client:
        yield test_client


def test_the_session_cookie_is_httponly_strict_expiring_and_scoped_to_the_pages(client: TestClient) -> None:
    answer = log_in(client, LOCAL_URL)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    set_cookie = answer.headers["set-cookie"]
    assert f"{SESSION_COOKIE}=" in set_cookie and "HttpOnly" in set_cookie and "SameSite=strict" in set_cookie and "Path=/ui" in set_cookie
    assert "Max-Age=28800" in set_cookie and "Secure" not in set_cookie and READER not in set_cookie
    assert client.get("/ui/").status_code == 200 and "c2" not in client.get("/ui/").text  # the token's clusters only
    assert client.get("/ui/clusters/c2").status_code == 404  # a cluster it may not see is an unknown one
    assert client.get("/ui/clusters/c1/topics/other").status_code == 403  # a topic it may not read
    assert client.get("/v1/clusters").status_code == 401 and client.get("/metrics").status_code == 401  # headers only there


def test_over_tls_the_cookie_is_secure() -> None:
    with TestClient(create_app(settings_of()), base_url="https://localhost") as client:
        answer = log_in(client, "https://localhost")
        assert answer.status_code == 303 and "Secure" in answer.headers["set-cookie"]
    behind_a_proxy = settings_of().model_copy(update={"public_url": "https://gateway.example.com"})
    with TestClient(create_app(behind_a_proxy), base_url=LOCAL_URL) as client:  # TLS ends at the load balancer: its cookies too
        assert "Secure" in client.get("/ui/login").headers["set-cookie"]


def test_a_token_removed_from_the_configuration_ends_its_sessions(client: TestClient) -> None:
    log_in(client, LOCAL_URL)
    cookie = client.cookies.get(SESSION_COOKIE)
    assert cookie
    without = settings_of(tokens={"another-token-" + "a" * 12: ["t"]})  # same key, READER gone
    with TestClient(create_app(without), base_url=LOCAL_URL, cookies={SESSION_COOKIE: cookie}) as other:
        assert other.get("/ui/").status_code == 401
    same = settings_of()  # a replica with the same key and tokens accepts it
    with TestClient(create_app(same), base_url=LOCAL_URL, cookies={SESSION_COOKIE: cookie}) as replica:
        assert replica.get("/ui/").status_code == 200


def test_without_a_session_key_there_is_no_login() -> None:
    settings = load_settings(clusters={"c1": UNREACHABLE}, auth={"enabled": True, "tokens": {READER: ["t"]}})
    with TestClient(create_app(settings), base_url=LOCAL_URL) as client:
        assert client.get("/ui/login").status_code == 404
        assert client.get("/ui/").status_code == 401 and client.get("/ui/").json()["error"]["code"] == "unauthorized"
    with pytest.raises(Exception, match="32 characters"):
        settings_of(session_secret="short")
    assert "s" * 40 not in repr(Sessions(settings_of(), TokenBook(settings_of()))) + repr(settings_of())
