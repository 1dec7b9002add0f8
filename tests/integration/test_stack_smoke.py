"""A smoke test of the `make run` flow: the whole local stack starts, does its job and stops."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_stack_runs_the_demo_and_stops_cleanly() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tiered_kafka_dev.stack", "--exit-after-demo", "--records", "6000"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert re.search(r"^Kafka\s+127\.0\.0\.1:\d+", out, re.M)
    segments = re.search(r"segments on disk: partition 0: (\d+), partition 1: (\d+)", out)
    assert segments and int(segments[1]) > 1 and int(segments[2]) > 1
    assert "read back 6000 records from Kafka" in out
    for name in ("TIERED_KAFKA_BOOTSTRAP_SERVERS", "TIERED_KAFKA_REDIS_URL", "TIERED_KAFKA_ZOOKEEPER_HOSTS", "TIERED_KAFKA_S3_ENDPOINT_URL"):
        assert f"export {name}=" in out
