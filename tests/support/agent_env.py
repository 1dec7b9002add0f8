"""Building agent settings and waiting on its results, for the agent's integration tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from tiered_kafka.registry import Registry
from tiered_kafka_agent.config import AgentSettings, load_settings


def agent_settings(log_dir: Path, redis_server: Any, s3_server: Any, bucket: str, **overrides: Any) -> AgentSettings:
    """Settings for an agent on ``log_dir`` against the test services; a fresh cluster name each time."""
    base: dict[str, Any] = {
        "cluster": f"cluster-{uuid.uuid4().hex[:8]}",
        "broker_id": 0,
        "log_dirs": [log_dir],
        "s3": {
            "bucket": bucket,
            "endpoint_url": s3_server.endpoint_url,
            "access_key_id": s3_server.access_key,
            "secret_access_key": s3_server.secret_key,
            "region": s3_server.region,
            "entropy_bits": 3,
            "prefix": "tiered",
        },
        "redis": {"url": redis_server.url},
        "leadership": {"mode": "static"},
        "upload": {"rescan_interval_s": 1.0, "backoff_base_s": 0.05, "backoff_max_s": 1.0},
        "metrics": {"port": 0},
    }
    return load_settings(None, **_merge(base, overrides))


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def registry_for(settings: AgentSettings) -> Registry:
    return Registry(redis.Redis.from_url(settings.redis.url), settings.cluster)


def wait_for(condition: Callable[[], Any], timeout_s: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def rotated_bases(directory: Path) -> list[int]:
    bases = sorted(int(p.name[:20]) for p in directory.glob("*.log"))
    return bases[:-1]


def settings_properties(settings: AgentSettings) -> str:
    """The settings as a .properties file (dotted names), for an agent run as a subprocess."""
    lines: list[str] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        elif isinstance(value, list):
            lines.append(f"{prefix}={','.join(str(v) for v in value)}")
        elif value is not None:
            lines.append(f"{prefix}={value}")

    data = settings.model_dump(mode="json")
    if settings.s3.secret_access_key is not None:
        data["s3"]["secret_access_key"] = settings.s3.secret_access_key.get_secret_value()
    walk("", data)
    return "\n".join(lines) + "\n"


class AgentProcess:
    """``tiered-kafka-agent run`` as a child process (so it can be SIGKILLed like a real crash)."""

    def __init__(self, settings: AgentSettings, config_path: Path, *, crash_at: str | None = None) -> None:
        import os
        import subprocess
        import sys

        config_path.write_text(settings_properties(settings))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_AGENT_")}
        if crash_at:
            env["TIERED_KAFKA_AGENT_TEST_CRASH_AT"] = crash_at
        self.log_path = config_path.with_suffix(".log")
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tiered_kafka_agent", "run", "--config", str(config_path), "-v"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout_s)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except Exception:
                self.process.kill()
                self.process.wait(10)
        self._log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")
