"""The coverage pages' browser login (issue 36) in a real browser (Debian's Chromium, headless, driven
by Playwright, as the coverage-page tests) against a real stack: the shared Kafka broker, the agent
uploading two topics to SeaweedFS and registering them in Redis, the gateway on uvicorn with
authentication on and a session key. A token is exchanged for a session cookie; the pages then show
only what the token may read; logout ends it; an expired or forged cookie is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext

from tests.support.agent_env import agent_settings, only_topics, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.gateway_env import gateway_settings
from tests.support.kafka_clients import create_topic, produce_numbered
from tests.support.stack_env import gateway_server
from tiered_kafka_agent.agent import Agent
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.sessions import SESSION_COOKIE, Sessions
from tiered_kafka_gateway.tokens import TokenBook

pytestmark = pytest.mark.integration

READER = "login-reader-" + "r" * 12
SECRET = "session-key-" + "k" * 30
TTL_S = 600


@dataclass
class Site:
    url: str
    cluster: str
    mine: str  # the topic READER may read
    theirs: str  # one it may not
    sessions: Sessions  # issuing cookies as any replica sharing the key would


@pytest.fixture(scope="module")
def site(kafka_server: Any, redis_server: Any, s3_server: Any) -> Iterator[Site]:
    mine, theirs = unique_topic("login-mine"), unique_topic("login-theirs")
    bootstrap = kafka_server.bootstrap_servers
    for topic in (mine, theirs):
        create_topic(bootstrap, topic, 1, **{"segment.bytes": "16000", "index.interval.bytes": "4096"})
        produce_numbered(bootstrap, topic, 0, 60)
    bucket = s3_server.create_bucket(unique_topic("login-bucket"))
    settings = agent_settings(kafka_server.log_dir, redis_server, s3_server, bucket, topics=only_topics(mine, theirs))
    registry = registry_for(settings)
    with Agent(settings):
        for topic in (mine, theirs):
            wait_for(lambda t=topic: [s.base_offset for s in registry.segments(t, 0)] == rotated_bases(kafka_server.log_dir / f"{t}-0") != [], what=f"{topic} uploaded")
    auth = {"enabled": True, "tokens": {READER: ["login-mine-.*"]}, "session_secret": SECRET, "session_ttl_s": TTL_S}
    replica = gateway_settings(settings, s3_server, auth=auth)
    with gateway_server(settings, s3_server, auth=auth) as url:
        yield Site(url, settings.cluster, mine, theirs, Sessions(replica, TokenBook(replica)))
    registry.client.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport={"width": 1100, "height": 700})
    try:
        yield context
    finally:
        context.close()


def session_cookie(context: BrowserContext) -> dict[str, Any] | None:
    return next((c for c in context.cookies() if c["name"] == SESSION_COOKIE), None)


def test_log_in_see_only_the_scoped_topics_and_log_out(site: Site, context: BrowserContext) -> None:
    page = context.new_page()
    first = page.goto(f"{site.url}/ui/")
    assert first is not None and first.status == 401  # no credentials: the way in, not the pages
    page.click("#login")
    page.fill("#token", "not-a-token-" + "x" * 12)
    with page.expect_navigation() as refused:
        page.click("#submit")
    assert refused.value.status == 401 and page.locator("#refused").count() == 1 and session_cookie(context) is None
    page.fill("#token", READER)
    with page.expect_navigation() as landed:
        page.click("#submit")
    assert landed.value.status == 200 and page.url == f"{site.url}/ui/", page.url
    cookie = session_cookie(context)
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert not cookie["secure"]  # served over plain HTTP here (Secure over TLS: tests/unit/gateway/test_sessions.py)
    assert time.time() < cookie["expires"] <= time.time() + TTL_S + 5
    assert READER not in cookie["value"] and SECRET not in cookie["value"]
    page.click(f"text={site.cluster}")
    overview = page.content()
    assert site.mine in overview and site.theirs not in overview
    theirs = page.goto(f"{site.url}/ui/clusters/{site.cluster}/topics/{site.theirs}")
    assert theirs is not None and theirs.status == 403 and "topic_authorization_failed" in page.content()
    mine = page.goto(f"{site.url}/ui/clusters/{site.cluster}/topics/{site.mine}/partitions/0")
    assert mine is not None and mine.status == 200
    # the cookie is for the pages only: the JSON API keeps to headers
    assert httpx.get(f"{site.url}/v1/clusters", cookies={SESSION_COOKIE: cookie["value"]}).status_code == 401
    page.goto(f"{site.url}/ui/logout")
    with page.expect_navigation():
        page.click("#logout")
    assert page.url == f"{site.url}/ui/login" and session_cookie(context) is None
    after = page.goto(f"{site.url}/ui/")
    assert after is not None and after.status == 401


def test_an_expired_or_forged_cookie_is_refused(site: Site, context: BrowserContext) -> None:
    access = site.sessions.book.access(READER)
    assert access is not None
    valid = site.sessions.issue(access)
    expired = site.sessions.issue(access, now_ms=int(time.time() * 1000) - 2 * TTL_S * 1000)
    payload, _, mac = valid.rpartition(".")
    forger = load_settings(clusters={site.cluster: {"redis_url": "redis://127.0.0.1:1/0", "s3": {"bucket": "b"}}},
                           auth={"enabled": True, "tokens": {READER: ["login-mine-.*"]}, "session_secret": "another-key-" + "z" * 30})
    other_key = Sessions(forger, TokenBook(forger)).issue(access)  # the same token's grant, signed under another key
    longer = payload.replace(payload.split(".")[1], str(int(payload.split(".")[1]) + 10**9)) + "." + mac  # expiry moved, MAC kept
    cases = {
        "expired": expired,
        "tampered mac": f"{payload}.{mac[:-2]}{'AA' if not mac.endswith('AA') else 'BB'}",
        "expiry extended": longer,
        "another key": other_key,
        "no mac": payload,
    }
    page = context.new_page()
    for name, value in cases.items():
        context.clear_cookies()
        context.add_cookies([{"name": SESSION_COOKIE, "value": value, "url": f"{site.url}/ui/"}])
        answer = page.goto(f"{site.url}/ui/clusters/{site.cluster}")
        assert answer is not None and answer.status == 401 and site.mine not in page.content(), name
    context.clear_cookies()
    context.add_cookies([{"name": SESSION_COOKIE, "value": valid, "url": f"{site.url}/ui/"}])  # issued elsewhere with the shared key
    answer = page.goto(f"{site.url}/ui/clusters/{site.cluster}")
    assert answer is not None and answer.status == 200 and site.mine in page.content()
    # state changes need the form's CSRF token and this origin
    with httpx.Client(base_url=site.url, cookies={SESSION_COOKIE: valid}) as http:
        bare = http.post("/ui/logout", data={}, headers={"Origin": site.url})
        assert bare.status_code == 403 and bare.json()["error"]["code"] == "csrf_refused"
        good = site.sessions.csrf_for(valid)
        cross = http.post("/ui/logout", data={"csrf": good}, headers={"Origin": "http://attacker.example"})
        assert cross.status_code == 403 and cross.json()["error"]["code"] == "csrf_refused"
        login = http.post("/ui/login", data={"token": READER, "csrf": "x"}, headers={"Origin": site.url})
        assert login.status_code == 403 and SESSION_COOKIE not in login.cookies
        done = http.post("/ui/logout", data={"csrf": good}, headers={"Origin": site.url})
        assert done.status_code == 303 and done.headers["location"] == "/ui/login"

