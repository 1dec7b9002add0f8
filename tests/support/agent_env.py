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
