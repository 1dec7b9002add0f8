"""Every failure path of ``tiered-kafka topics`` and ``describe`` run as a user runs them (a
subprocess of the installed command against the gateway on uvicorn, authentication on): exit
status 1 and one line naming the cause, never a traceback (issue 36: each ended in
``TypeError: 'module' object is not callable``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_env import agent_settings, unique_topic
from tests.support.stack_env import gateway_server
from tiered_kafka_dev.services._process import free_ports

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).parent / "tiered-kafka"
READER = "reader-token-" + "r" * 12


@pytest.fixture(scope="module")
def gateway(redis_server: Any, s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A gateway with authentication on over an empty cluster: (its URL, the cluster's name)."""
    bucket = s3_server.create_bucket(unique_topic("cli-failures"))
    settings = agent_settings(tmp_path_factory.mktemp("logs"), redis_server, s3_server, bucket)
    with gateway_server(settings, s3_server, auth={"enabled": True, "tokens": {READER: ["orders", "other-.*"]}}) as url:
        yield url, settings.cluster


def run(*args: str, token: str | None = READER) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_")}
    env["XDG_CONFIG_HOME"] = "/nonexistent"  # no user configuration file
    if token is not None:
        env["TIERED_KAFKA_TOKEN"] = token
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize(
    ("command", "where", "token", "cluster", "expected"),
    [
        (["topics"], "topics", "w" * 24, None, "401"),
        (["describe", "orders"], "orders", "w" * 24, None, "401"),
        (["topics"], "topics", None, None, "401"),
        (["describe", "secret-topic"], "secret-topic", READER, None, "TOPIC_AUTHORIZATION_FAILED"),
        (["describe", "orders"], "orders", READER, None, "orders"),
        (["topics"], "topics", READER, "no-such-cluster", "no-such-cluster"),
        (["describe", "orders"], "orders", READER, "no-such-cluster", "no-such-cluster"),
        (["describe", ".."], "..", READER, None, "cannot be '.' or '..'"),
        (["topics"], "topics", READER, None, "no topic"),
    ],
)
def test_each_failure_of_topics_and_describe_exits_1_naming_its_cause(gateway, command, where, token, cluster, expected) -> None:
    url, name = gateway
    done = run(*command, "--gateway", url, "--cluster", cluster or name, token=token)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "TypeError" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"tiered-kafka: {where}") and expected in done.stderr, done.stderr
    assert "w" * 24 not in done.stderr and READER not in done.stderr  # a token never echoed


@pytest.mark.parametrize("command", [["topics"], ["describe", "orders"]])
def test_an_unreachable_gateway_exits_1_naming_it(command) -> None:
    url = f"http://127.0.0.1:{free_ports(1)[0]}"
    done = run(*command, "--gateway", url, "--cluster", "c")
    assert done.returncode == 1 and "Traceback" not in done.stderr and done.stderr.startswith("tiered-kafka: "), done.stderr
