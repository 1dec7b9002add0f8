"""Packaging: the SDK stands alone, and its public names are pinned."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import tiered_kafka

ROOT = Path(__file__).resolve().parents[2]
#: pyarrow is an SDK dependency (the columnar decoder fills Arrow arrays), not one of these
SERVER_SIDE = {"fastapi", "uvicorn", "redis", "kazoo", "watchdog", "pyspark", "boto3"}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def test_sdk_dependencies_exclude_server_side_packages() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    assert not {_name(r) for r in project["dependencies"]} & SERVER_SIDE
    assert {"agent", "gateway", "spark", "dev", "test"} <= set(project["optional-dependencies"])


def test_importing_the_sdk_core_loads_no_server_side_module() -> None:
    code = (
        "import sys, tiered_kafka, tiered_kafka.keyspace\n"
        "from tiered_kafka.format import record_batch, offset_index, time_index, segment_names, checkpoints\n"
        f"print(sorted(m for m in {sorted(SERVER_SIDE)!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_exported_names() -> None:
    assert set(tiered_kafka.__all__) == {
        "ConfigError",
        "CorruptCheckpointError",
        "CorruptIndexError",
        "CorruptRecordError",
        "FormatError",
        "InvalidSegmentNameError",
        "LogWriteError",
        "OffsetOutOfRangeError",
        "TieredKafkaError",
        "TruncatedRecordError",
        "UnsupportedCodecError",
        "__version__",
    }
    assert all(issubclass(getattr(tiered_kafka, n), tiered_kafka.TieredKafkaError) for n in tiered_kafka.__all__ if n.endswith("Error"))


def test_packages_have_unclashing_names() -> None:
    import tiered_kafka_agent
    import tiered_kafka_dev
    import tiered_kafka_gateway

    for module in (tiered_kafka, tiered_kafka_agent, tiered_kafka_gateway, tiered_kafka_dev):
        assert module.__doc__
    assert (ROOT / "sdk" / "tiered_kafka" / "py.typed").exists()
