"""pytest fixtures that run the real local services, one of each per test session.

Register with ``pytest_plugins = ["tiered_kafka_dev.services.pytest_plugin"]`` in a ``conftest.py``.
A missing program fails the test with :class:`~tiered_kafka_dev.services.MissingBinaryError` (run
``dev/install.sh``); nothing is skipped.

- ``redis_server``: a started :class:`RedisServer` (``.url``, ``.host``, ``.port``).
- ``redis_cluster``: a started :class:`RedisClusterServer`, three masters with a replica each (``.url``).
- ``zookeeper_server``: a started :class:`ZooKeeperServer` (``.hosts``).
- ``s3_server``: a started :class:`S3Server` (``.endpoint_url``, keys, ``.client()``).
- ``s3_bucket``: the name of a fresh, empty bucket on ``s3_server``, new for every test.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from ._redis import RedisServer
from ._redis_cluster import RedisClusterServer
from ._s3 import S3Server
from ._zookeeper import ZooKeeperServer

__all__ = ["redis_cluster", "redis_server", "s3_bucket", "s3_server", "zookeeper_server"]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A Redis server for the whole session."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServer]:
    """A Redis Cluster (three masters, one replica each) for the whole session; tests that kill a
    master should start their own :class:`RedisClusterServer`."""
    with RedisClusterServer() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper server for the whole session."""
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A SeaweedFS S3 endpoint for the whole session."""
    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> str:
    """A new bucket on ``s3_server``, named after the test plus a random suffix."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "test"
    return s3_server.create_bucket(f"{stem}-{uuid.uuid4().hex[:12]}")
