"""The agent's configuration: file, environment, Pinterest names, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka_agent.config import load_settings

MINIMAL = "cluster=prod-east\nbroker_id=3\nlog_dirs=/var/kafka/a, /var/kafka/b\ns3.bucket=tiers\nredis.url=redis://127.0.0.1:6379/0\nleadership.mode=static\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.properties"
    path.write_text(text)
    return path


def test_file_values_and_defaults(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, MINIMAL + "s3.entropy_bits=5\ntopics.exclude=__.*,tmp-.*\n"))
    assert (settings.cluster, settings.broker_id) == ("prod-east", 3)
    assert settings.log_dirs == [Path("/var/kafka/a"), Path("/var/kafka/b")]
    assert settings.s3.entropy_bits == 5 and settings.topics.exclude == ["__.*", "tmp-.*"]
    assert settings.topics.include == [".*"] and settings.upload.max_concurrent_segments == 4


def test_environment_beats_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERED_KAFKA_AGENT_S3__BUCKET", "from-env")
    monkeypatch.setenv("TIERED_KAFKA_AGENT_UPLOAD__MAX_ATTEMPTS", "11")
    settings = load_settings(_write(tmp_path, MINIMAL))
    assert settings.s3.bucket == "from-env" and settings.upload.max_attempts == 11


def test_pinterest_names_are_accepted(tmp_path: Path) -> None:
    text = MINIMAL + (
        "ts.segment.uploader.kafka.topics.include=orders.*, payments\n"
        "ts.segment.uploader.kafka.topics.exclude=orders-tmp\n"
        "ts.segment.uploader.upload.thread.count=6\n"
        "ts.segment.uploader.upload.max.retries=3\n"
        "ts.segment.uploader.s3.prefix.entropy.bits=7\n"
        "ts.segment.uploader.leadership.watcher.poll.interval.seconds=30\n"
        "ts.segment.uploader.manager.gc.retention.seconds=86400\n"
        "ts.segment.uploader.manager.gc.orders.retention.seconds=60\n"
    )
    settings = load_settings(_write(tmp_path, text))
    assert settings.topics.include == ["orders.*", "payments"] and settings.topics.exclude == ["orders-tmp"]
    assert (settings.upload.max_concurrent_segments, settings.upload.max_attempts) == (6, 4)
    assert settings.s3.entropy_bits == 7 and settings.leadership.poll_interval_s == 30
    assert settings.remote_retention.for_topic("payments").ms == 86_400_000
    assert settings.remote_retention.for_topic("orders").ms == 60_000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("s3.entropy_bits=99\n", "entropy_bits"),
        ("redis.url=http://x\n", "redis://"),
        ("leadership.mode=zookeeper\n", "zookeeper_connect is required"),
        ("leadership.mode=kraft\n", "bootstrap_servers is required"),
        ("leadership.mode=raft\n", "leadership.mode"),
        ("topics.include=(unclosed\n", "invalid regex"),
        ("s3.multipart_chunk_bytes=1024\n", "multipart_chunk_bytes"),
        ("no.such.setting=1\n", "no"),
        # issue 36: unknown keys in a nested section were ignored (a typo kept the default silently)
        ("upload.max_concurent_segments=64\n", "max_concurent_segments"),
        ("remote_retention.topics.orders.msec=60000\n", "msec"),
        ("remote_retention.intervals_s=60\n", "intervals_s"),
        ("metrics.prot=0\n", "prot"),
        ("topics.includes=orders\n", "includes"),
        ("leadership.bootstrap_server=k:9092\n", "bootstrap_server"),
        ("redis.password=hunter2\n", "password"),
        ("ts.segment.uploader.storage.service.endpoint.provider.class=x\n", "no equivalent"),
        ("this line is not a property\n", "expected key=value"),
    ],
)
def test_bad_settings_name_the_problem(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(_write(tmp_path, MINIMAL + extra))


def test_missing_required_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cluster"):
        load_settings(_write(tmp_path, "broker_id=1\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.properties")


def test_secrets_are_masked_when_logged(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, MINIMAL + "s3.secret_access_key=hunter2\n"))
    assert "hunter2" not in str(settings.redacted())
    assert settings.s3.secret_access_key.get_secret_value() == "hunter2"


def test_the_redis_password_is_masked_when_logged(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, MINIMAL), redis={"url": "redis://default:hunter2@redis.example:6379/0"})
    assert "hunter2" not in str(settings.redacted())
    assert settings.redacted()["redis"]["url"] == "redis://default:***@redis.example:6379/0"
    assert settings.redis.url.endswith("hunter2@redis.example:6379/0")  # the agent still connects with it
