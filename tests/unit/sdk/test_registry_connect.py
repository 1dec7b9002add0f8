"""The registry's URL forms (``tiered_kafka.registry.connect``): parsing, refusals, no password in messages.

Pure logic: nothing here reaches a Redis (``connect`` against real servers is tested in
tests/integration/cluster/ and tests/integration/test_registry.py); the unreachable-cluster cases
name a host that does not resolve (``.invalid``) or a port nothing listens on."""

from __future__ import annotations

import doctest
import logging
import re
from urllib.parse import quote

import pytest
import redis
from redis.connection import parse_url

from tiered_kafka.errors import ConfigError
from tiered_kafka.registry import Registry, RegistryUnavailableError, RegistryValueError, check_url, connect, describe_url, is_cluster_url
from tiered_kafka.registry import _connect
from tiered_kafka.registry import LazyRedisCluster
from tiered_kafka.registry._connect import _cluster_seeds
from tiered_kafka_agent.config import load_settings as load_agent_settings
from tiered_kafka_dev.services._process import free_ports

PASSWORD = "pw-91c7e2aa"
# passwords a URL cannot hold as they are ("/", "?", "#" end the host part) or can ("@": the host part starts after the last one)
AWKWARD = {"slash": "Qx7v/Zk9w+Ef", "question": "Qx7v?Zk9w=Ef", "hash": "Qx7v#Zk9w", "at": "Qx7v@Zk9w", "all": "Qx7v/Zk9w?Mn3b#Tr5c@Yy2d"}
FORMS = {"single": "redis://app:{}@h1:6379/0", "cluster": "redis+cluster://app:{}@h1:7000,h2:7001/0"}
AGENT = {"cluster": "c", "broker_id": 0, "log_dirs": "/tmp/x", "leadership": {"mode": "static"}, "s3": {"bucket": "b"}}


def _secret_parts(password: str) -> list[str]:
    """The password and every piece of it a wrong split could show (around its special characters)."""
    return [password, quote(password, safe=""), *re.split(r"[/?#@+=]", password)]


def _assert_hidden(text: str, password: str) -> None:
    for piece in _secret_parts(password):
        assert piece not in text, f"{piece!r} of the password is in {text!r}"


@pytest.mark.parametrize(
    ("url", "seeds", "first"),
    [
        ("redis+cluster://h1:7000", [("h1", 7000)], "redis://h1:7000/"),
        ("redis+cluster://h1:7000,h2:7001,h3:7002/0", [("h1", 7000), ("h2", 7001), ("h3", 7002)], "redis://h1:7000/0"),
        (f"redis+cluster://app:{PASSWORD}@h1:7000,h2:7001?client_name=a", [("h1", 7000), ("h2", 7001)], f"redis://app:{PASSWORD}@h1:7000/?client_name=a"),
        ("rediss+cluster://[::1]:7000,h2:7001/?ssl_cert_reqs=none", [("::1", 7000), ("h2", 7001)], "rediss://[::1]:7000/?ssl_cert_reqs=none"),
        ("redis+cluster://app:p@ss@h1:7000", [("h1", 7000)], "redis://app:p@ss@h1:7000/"),
    ],
)
def test_cluster_urls_give_their_seeds_and_a_node_url_with_the_credentials_and_options(url: str, seeds: list, first: str) -> None:
    scheme = _connect.CLUSTER_SCHEMES[url.partition("://")[0]]
    assert _cluster_seeds(url, scheme) == (seeds, first)
    assert is_cluster_url(url) and check_url(url) == url


@pytest.mark.parametrize("url", ["redis://h:6379/0", "rediss://:tok@h/1", "unix:///run/redis.sock?db=2", "redis://u:p@ss@h:1/0"])
def test_single_redis_urls_are_accepted(url: str) -> None:
    assert check_url(url) == url and not is_cluster_url(url)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"http://u:{PASSWORD}@h:6379/0", "must start with redis://"),
        ("h:6379", "must start with redis://"),
        (f"redis+cluster://u:{PASSWORD}@h1", "seed 1 of 1 is not one"),
        ("redis+cluster://h1:7000,,h2:7000", "seed 2 of 3 is not one"),
        ("redis+cluster://h1:notaport", "port of seed 1 of 1"),
        (f"redis+cluster://u:{PASSWORD}@h1:7000/2", "only database 0"),
        (f"redis+cluster://u:{PASSWORD}@h1:7000/0?db=3", "only database 0"),
        (f"redis://u:{PASSWORD}", "port of the Redis URL"),  # the "@host" forgotten: the password is where the port goes
        (f"redis+cluster://{PASSWORD}:h1:7000", "port of seed 1 of 1"),
        ("redis://h:6379/0?client_name=a@" + PASSWORD, "must be percent-encoded"),
    ],
)
def test_malformed_urls_are_refused_naming_the_problem_without_the_password(url: str, problem: str) -> None:
    for check in (check_url, connect):
        with pytest.raises(RegistryValueError) as caught:
            check(url)
        assert problem in str(caught.value) and PASSWORD not in str(caught.value)
        assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", AWKWARD)
def test_awkward_passwords_are_never_shown(form: str, kind: str) -> None:
    """Unencoded, a password with "/", "?" or "#" is refused (the host part would end inside it), an
    "@" is fine; percent-encoded, every one is accepted. No message nor description shows any of it."""
    password = AWKWARD[kind]
    raw, encoded = FORMS[form].format(password), FORMS[form].format(quote(password, safe=""))
    expected = FORMS[form].format("***")
    for url in (encoded, f"{encoded}?password={quote(password, safe='')}", f"{encoded}#{quote(password, safe='')}"):
        assert describe_url(url) == expected
    # unencoded: the host part is shown when the "@" cannot be the query's
    assert describe_url(raw) == (FORMS[form].partition("://")[0] + "://***" if set(password) & set("?#") else expected)
    if set(password) & set("/?#"):
        for check in (check_url, connect):
            with pytest.raises(RegistryValueError, match="must be percent-encoded") as caught:
                check(raw)
            _assert_hidden(str(caught.value), password)
        with pytest.raises(ConfigError) as refused:
            load_agent_settings(None, **AGENT, redis={"url": raw})
        assert "redis.url" in str(refused.value) and "percent-encoded" in str(refused.value)
        _assert_hidden(str(refused.value), password)
    else:
        assert check_url(raw) == raw
    assert check_url(encoded) == encoded
    client = connect(encoded)
    if form == "single":  # redis-py decodes the password
        assert client.connection_pool.connection_kwargs["password"] == password
    else:
        assert isinstance(client, LazyRedisCluster)
        assert parse_url(_cluster_seeds(encoded, "redis")[1])["password"] == password
        _assert_hidden(repr(client), password)
    client.close()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", AWKWARD)
def test_the_agent_logs_its_settings_without_the_password_nor_the_query(form: str, kind: str, caplog) -> None:
    password = quote(AWKWARD[kind], safe="")
    url = FORMS[form].format(password) + f"?password={password}&client_name=agent-1"
    settings = load_agent_settings(None, **AGENT, redis={"url": url})
    assert settings.redis.url == url
    shown = settings.redacted()["redis"]["url"]
    assert shown == FORMS[form].format("***")
    with caplog.at_level(logging.INFO):
        logging.getLogger("tiered_kafka_agent.agent").info("starting: %s", settings.redacted())
    _assert_hidden(caplog.text, AWKWARD[kind])


def test_descriptions_mask_the_password_and_drop_the_query() -> None:
    assert describe_url(f"redis://default:{PASSWORD}@r:6379/0?password={PASSWORD}") == "redis://default:***@r:6379/0"
    assert describe_url("redis+cluster://h1:1,h2:2") == "redis+cluster://h1:1,h2:2"
    assert describe_url(f"redis://{PASSWORD}@h") == "redis://***@h"  # no ":": the whole userinfo may be a password
    assert describe_url(f"redis://u:{PASSWORD}") == "redis://***"  # no "@": a host part that is not host:port
    assert describe_url("not a url") == "(not a URL)"
    assert doctest.testmod(_connect).failed == 0


def test_redis_py_parse_errors_are_not_quoted_unless_they_only_name_an_option() -> None:
    with pytest.raises(RegistryValueError, match="Invalid value for 'socket_timeout'"):
        connect("redis://h:6379/0?socket_timeout=abc")


@pytest.mark.parametrize("option", ["db", "retry"])
def test_options_a_cluster_client_refuses_are_refused_before_any_connection(option: str) -> None:
    with pytest.raises(RegistryValueError, match=f"takes no {option} option"):
        connect("redis+cluster://redis-db.invalid:7000", **{option: None})


@pytest.mark.parametrize("host", ["redis-db.invalid", "retry.invalid", "127.0.0.1"])
def test_an_unreachable_cluster_is_retriable_not_a_configuration_error(host: str) -> None:
    """connect() connects to nothing; the first command fails with a connection error whatever the
    seed's name holds ("db", "retry"), which the registry reports as retriable."""
    (port,) = free_ports(1)
    client = connect(f"redis+cluster://app:{PASSWORD}@{host}:{port}", socket_connect_timeout=1)
    registry = Registry(client, "kc")  # registering the scripts connects to nothing either
    with pytest.raises(redis.exceptions.ConnectionError) as direct:
        client.ping()
    assert PASSWORD not in str(direct.value)
    with pytest.raises(RegistryUnavailableError) as caught:
        registry.partitions()
    assert caught.value.retriable and PASSWORD not in str(caught.value)
    client.close()


def test_the_agent_accepts_a_cluster_url_and_refuses_a_bad_one_without_its_password() -> None:
    url = f"redis+cluster://app:{PASSWORD}@h1:7000,h2:7000"
    assert load_agent_settings(None, **AGENT, redis={"url": url}).redis.url == url
    with pytest.raises(ConfigError) as caught:
        load_agent_settings(None, **AGENT, redis={"url": f"redis+cluster://app:{PASSWORD}@h1"})
    assert "redis.url" in str(caught.value) and "seed 1 of 1 is not one" in str(caught.value) and PASSWORD not in str(caught.value)


@pytest.mark.parametrize("kind", ["slash", "all"])
def test_the_gateway_validates_its_redis_urls_when_loading_its_settings(kind: str, monkeypatch) -> None:
    from tiered_kafka_gateway.config import load_settings as load_gateway_settings

    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    password = AWKWARD[kind]
    good, bad = FORMS["cluster"].format(quote(password, safe="")), FORMS["cluster"].format(password)
    assert load_gateway_settings(clusters={"c": {"redis_url": good, "s3": {"bucket": "b"}}}).clusters["c"].redis_url == good
    with pytest.raises(ConfigError) as caught:
        load_gateway_settings(clusters={"c": {"redis_url": bad, "s3": {"bucket": "b"}}, "d": {"redis_url": "redis+cluster://h1", "s3": {"bucket": "b"}}})
    message = str(caught.value)
    assert "clusters.c.redis_url" in message and "percent-encoded" in message
    assert "clusters.d.redis_url" in message and "seed 1 of 1 is not one" in message
    _assert_hidden(message, password)
