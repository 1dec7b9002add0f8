"""Packaging: the SDK stands alone, and its public names are pinned."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tiered_kafka
import tiered_kafka.errors

ROOT = Path(__file__).resolve().parents[3]
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
    """What users need, at the top level: the readers' entry points and the SDK's whole error tree."""
    errors = {name for name, value in vars(tiered_kafka.errors).items() if isinstance(value, type) and issubclass(value, Exception)}
    assert set(tiered_kafka.__all__) == errors | {
        "TieredConsumer",
        "Mode",
        "BulkReader",
        "read_table",
        "read_arrow",
        "TieredKafkaDataSource",
        "__version__",
    }
    assert {"RemoteReadError", "GatewayRequestError", "TopicAuthorizationError", "RemoteGapError", "OffsetNotRemoteError"} <= errors
    assert all(getattr(tiered_kafka, n) is getattr(tiered_kafka.errors, n) for n in errors)
    assert all(issubclass(getattr(tiered_kafka, n), tiered_kafka.TieredKafkaError) for n in errors)


def test_the_entry_points_are_the_implementation_modules_own() -> None:
    from tiered_kafka.bulk import BulkReader, read_arrow, read_table
    from tiered_kafka.consumer import TieredConsumer
    from tiered_kafka.modes import Mode
    from tiered_kafka.spark import TieredKafkaDataSource

    assert (tiered_kafka.TieredConsumer, tiered_kafka.Mode, tiered_kafka.BulkReader) == (TieredConsumer, Mode, BulkReader)
    assert (tiered_kafka.read_table, tiered_kafka.read_arrow, tiered_kafka.TieredKafkaDataSource) == (read_table, read_arrow, TieredKafkaDataSource)
    assert set(tiered_kafka.__all__) <= set(dir(tiered_kafka))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        tiered_kafka.Nope  # noqa: B018


def test_importing_the_package_loads_no_reader() -> None:
    """The readers are imported on first use: ``import tiered_kafka`` (the agent and the gateway
    import it for the format core) loads neither confluent-kafka, httpx, pyarrow nor pyspark."""
    code = "import sys, tiered_kafka, tiered_kafka.format.record_batch\nprint(sorted(m for m in ('confluent_kafka', 'httpx', 'pyarrow', 'pyspark') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_packages_have_unclashing_names() -> None:
    import tiered_kafka_agent
    import tiered_kafka_dev
    import tiered_kafka_gateway

    for module in (tiered_kafka, tiered_kafka_agent, tiered_kafka_gateway, tiered_kafka_dev):
        assert module.__doc__
    assert (ROOT / "sdk" / "tiered_kafka" / "py.typed").exists()
