"""The agent's secrets never reach its logs, at DEBUG, on the happy path and on failures.

Secrets: the password in the Redis URL (a real ACL user with a password on the test Redis) and
the S3 secret access key (the real SeaweedFS key, random per session). Each case runs
``tiered-kafka-agent run -vv`` (DEBUG: botocore, urllib3, redis-py and the agent's own loggers)
as a process, with the settings in a .properties file, and searches everything it printed.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from tests.support.agent_env import checkpoint_high_watermarks
from tests.support.fixtures import FIXTURES

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_user(redis_server) -> tuple[str, str]:
    """A Redis ACL user with a password (the server's default user is left as it is)."""
    user, password = f"agent-{uuid.uuid4().hex[:6]}", "rpw" + secrets.token_hex(12)
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    yield user, password
    admin.execute_command("ACL", "DELUSER", user)
    admin.close()


def _properties(log_dir: Path, redis_url: str, s3_server, bucket: str, secret_key: str) -> str:
    return "\n".join([
        f"cluster=secrets-{uuid.uuid4().hex[:6]}",
        "broker_id=0",
        f"log_dirs={log_dir}",
        f"s3.bucket={bucket}",
        f"s3.endpoint_url={s3_server.endpoint_url}",
        f"s3.region={s3_server.region}",
        f"s3.access_key_id={s3_server.access_key}",
        f"s3.secret_access_key={secret_key}",
        f"redis.url={redis_url}",
        "leadership.mode=static",
        "upload.rescan_interval_s=0.5",
        "upload.backoff_base_s=0.05",
        "upload.backoff_max_s=0.2",
        "metrics.port=0",
    ]) + "\n"


def _run_agent(config: Path, until, timeout_s: float = 30) -> str:
    """Run the agent at DEBUG until ``until(output)`` holds, SIGTERM it; everything it printed."""
    out = config.with_suffix(".out")
    with open(out, "wb") as sink:
        process = subprocess.Popen([sys.executable, "-m", "tiered_kafka_agent", "run", "--config", str(config), "-vv"], stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout_s
            while not until(out.read_text(errors="replace")):
                assert process.poll() is None, out.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, "timed out: " + out.read_text(errors="replace")[-3000:]
                time.sleep(0.1)
            process.send_signal(signal.SIGTERM)
            assert process.wait(120) == 0  # generous: a fresh clone's suite run on a loaded machine took over 30 s to stop
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    return out.read_text(errors="replace")


def _assert_absent(output: str, *secret_values: str) -> None:
    for value in secret_values:
        assert value not in output, f"a secret ({value[:3]}...) is in the agent's output"


def test_no_secret_in_debug_logs_while_uploading(redis_server, redis_user, s3_server, s3_bucket, tmp_path) -> None:
    user, password = redis_user
    parts = urlsplit(redis_server.url)
    redis_url = f"redis://{user}:{password}@{parts.hostname}:{parts.port}/0"
    log_dir = tmp_path / "logs"
    shutil.copytree(FIXTURES / "test_topic_a-0", log_dir / "plain-0")
    checkpoint_high_watermarks(log_dir)
    config = tmp_path / "agent.properties"
    config.write_text(_properties(log_dir, redis_url, s3_server, s3_bucket, s3_server.secret_key))
    output = _run_agent(config, lambda text: text.count("uploaded and registered") >= 2)
    assert "DEBUG" in output and "botocore" in output  # really at DEBUG, really talking to S3
    assert f"{user}:***@" in output  # the settings line, redacted
    _assert_absent(output, password, s3_server.secret_key)


@pytest.mark.parametrize("failure", ["redis-unreachable", "s3-refuses-the-key"])
def test_no_secret_in_logs_when_a_service_fails(failure: str, redis_server, redis_user, s3_server, s3_bucket, tmp_path) -> None:
    user, password = redis_user
    parts = urlsplit(redis_server.url)
    if failure == "redis-unreachable":  # nothing listens on port 1: every registry call fails
        redis_url, secret_key, expected = f"redis://{user}:{password}@127.0.0.1:1/0", s3_server.secret_key, "Connection refused"
    else:  # a wrong secret key: SeaweedFS answers SignatureDoesNotMatch
        redis_url, secret_key, expected = f"redis://{user}:{password}@{parts.hostname}:{parts.port}/0", "s3w" + secrets.token_urlsafe(24), "SignatureDoesNotMatch"
    log_dir = tmp_path / "logs"
    shutil.copytree(FIXTURES / "test_topic_a-1", log_dir / "failing-0")
    checkpoint_high_watermarks(log_dir)
    config = tmp_path / "agent.properties"
    config.write_text(_properties(log_dir, redis_url, s3_server, s3_bucket, secret_key))
    output = _run_agent(config, lambda text: text.count("upload pass failed") >= 2)
    assert expected in output
    _assert_absent(output, password, secret_key)


def test_no_secret_in_configuration_errors(s3_server, tmp_path) -> None:
    password, secret_key = "rpw" + secrets.token_hex(12), "s3k" + secrets.token_urlsafe(24)
    config = tmp_path / "agent.properties"
    # a Redis URL of the wrong scheme (its password in the value), and no s3.bucket beside the secret key
    text = _properties(tmp_path / "logs", f"http://admin:{password}@127.0.0.1:6379/0", s3_server, "unused", secret_key)
    config.write_text("\n".join(line for line in text.splitlines() if not line.startswith("s3.bucket=")) + "\n")
    result = subprocess.run([sys.executable, "-m", "tiered_kafka_agent", "run", "--config", str(config), "-vv"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "redis.url" in result.stderr and "s3.bucket" in result.stderr  # the error still names the problems
    _assert_absent(result.stdout + result.stderr, password, secret_key)
