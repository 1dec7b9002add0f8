"""pytest fixtures that run the real local services, one of each per test session.

Register with ``pytest_plugins = ["tiered_kafka_dev.services.pytest_plugin"]`` in a ``conftest.py``.
A missing program fails the test with :class:`~tiered_kafka_dev.services.MissingBinaryError` (run
``dev/install.sh``); nothing is skipped.

- ``redis_server``: a started :class:`RedisServer` (``.url``, ``.host``, ``.port``).
- ``redis_cluster``: a started :class:`RedisClusterServer`, three masters with a replica each (``.url``).
- ``zookeeper_server``: a started :class:`ZooKeeperServer` (``.hosts``).
- ``s3_server``: a started :class:`S3Server` (``.endpoint_url``, keys, ``.client()``).
- ``s3_bucket``: the name of a fresh, empty bucket on ``s3_server``, new for every test.
- ``kafka_server``: one Apache Kafka 4.x KRaft node for the whole session, for tests that only need
  topics (each test its own topic; never restart, kill or reconfigure it).
- ``start_kafka``: a factory for fresh brokers, ``start_kafka(log_dir=None, zookeeper_connect=None,
  version=None, **config)`` (broker settings under Kafka's names, dots as in Kafka:
  ``start_kafka(config={"log.retention.check.interval.ms": 200})``), for tests that restart, kill or
  reconfigure one; every broker it started is stopped at the end of the test.
- ``kafka_cluster``: a fresh three-node KRaft :class:`KafkaCluster`, stopped at the end of the test.

Every Kafka broker of the session, whoever starts it, runs with ``KafkaServer.quick_jvm`` (C1 only: a
quicker, cheaper start; ``_kafka.QUICK_JVM_OPTIONS``).
"""

from __future__ import annotations

import gc
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._kafka import KafkaCluster, KafkaServer
from ._redis import RedisServer
from ._redis_cluster import RedisClusterServer
from ._s3 import S3Server
from ._zookeeper import ZooKeeperServer

__all__ = ["kafka_cluster", "kafka_server", "start_kafka", "redis_cluster", "redis_server", "s3_bucket", "s3_server", "zookeeper_server"]


def pytest_configure(config: pytest.Config) -> None:
    KafkaServer.quick_jvm = True


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


StartKafka = Callable[..., KafkaServer]


def _release_clients() -> None:
    """Free the test's unreachable objects before its brokers stop: a confluent-kafka handle (an
    AdminClient's futures make cycles) freed only by a later garbage collection would keep
    reconnecting to a stopped broker meanwhile, and log every failed attempt."""
    gc.collect()


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[KafkaServer]:
    """A Kafka 4.x KRaft node (broker and controller) shared by the whole session."""
    with KafkaServer() as server:
        yield server


@pytest.fixture
def start_kafka(tmp_path: Path) -> Iterator[StartKafka]:
    """A factory of fresh Kafka brokers, all stopped at the end of the test.

    ``start_kafka(log_dir=None, *, zookeeper_connect=None, version=None, node_id=1, config=None)``:
    KRaft on Kafka 4.x, or a ZooKeeper-mode broker on 3.9.x when ``zookeeper_connect`` is given. The
    log.dir defaults to ``tmp_path / "kafka-logs"`` (a second broker of the same test needs its own).
    """
    started: list[KafkaServer] = []

    def start(log_dir: Path | None = None, **options: Any) -> KafkaServer:
        server = KafkaServer(log_dir=log_dir or tmp_path / "kafka-logs", **options)
        started.append(server)
        return server.start()

    yield start
    _release_clients()
    for server in reversed(started):
        server.stop()


@pytest.fixture
def kafka_cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    """A fresh three-node KRaft cluster (each node a broker and a controller voter)."""
    with KafkaCluster(3, root=tmp_path / "kafka-cluster") as cluster:
        yield cluster
        _release_clients()
