"""Fixtures shared by the agent's integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.support.agent_env import ZooKeeperKafka


@pytest.fixture
def zk_chroot(zookeeper_server: Any) -> str:
    """A fresh, empty ZooKeeper chroot on the session's server, as a connect string
    (``host:port/chroot``): the ZooKeeper-mode brokers and the agents of one test share it."""
    root = f"/agent-test-{uuid.uuid4().hex[:8]}"
    client = KazooClient(hosts=zookeeper_server.hosts)
    client.start(timeout=15)
    client.ensure_path(root)
    client.stop()
    client.close()
    return f"{zookeeper_server.hosts}{root}"


@pytest.fixture(scope="package")
def zookeeper_kafka(zookeeper_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperKafka]:
    """Two ZooKeeper-mode Kafka brokers, 1 and 2 (Kafka 3.9), in a chroot of the session's ZooKeeper,
    shared by the agent's ZooKeeper-leadership tests: each test creates its own topics (with an
    explicit replica assignment) and watches only them."""
    cluster = ZooKeeperKafka(zookeeper_server.hosts, tmp_path_factory.mktemp("zookeeper-kafka"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
