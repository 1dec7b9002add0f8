"""Fixtures shared by the agent's integration tests."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kazoo.client import KazooClient


@pytest.fixture
def zk_chroot(zookeeper_server: Any) -> str:
    """A fresh, empty ZooKeeper chroot on the session's server, as a connect string
    (``host:port/chroot``): the development broker and the agents of one test share it."""
    root = f"/agent-test-{uuid.uuid4().hex[:8]}"
    client = KazooClient(hosts=zookeeper_server.hosts)
    client.start(timeout=15)
    client.ensure_path(root)
    client.stop()
    client.close()
    return f"{zookeeper_server.hosts}{root}"
