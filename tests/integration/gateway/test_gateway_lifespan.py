"""The gateway's shutdown (its FastAPI lifespan) closes every pool it opened.

Against the real Redis, SeaweedFS and Kafka (the session's shared broker): after a request that used all three,
leaving the ``TestClient`` context (which runs the lifespan's shutdown, as uvicorn does) must
leave no Redis connection of the app (``CLIENT LIST`` on the server, by the client name the
test gives the app's Redis URL), no TCP connection of this process to S3 or to the broker opened
since the app was created (``/proc``), and no background load thread of the app.
"""

from __future__ import annotations

import os
import threading
import uuid
from urllib.parse import urlsplit

import pytest
import redis
from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tests.support.agent_env import agent_settings
from tests.support.gateway_env import gateway_settings, pinterest_bucket, unique_topic
from tests.support.kafka_clients import create_topic
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_gateway import kafka_offsets
from tiered_kafka_gateway.app import create_app

pytestmark = pytest.mark.integration

_ESTABLISHED = "01"


def connections_to(port: int) -> set[tuple[str, str]]:
    """(local, remote) addresses of this process's established TCP connections to ``port``."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                if state == _ESTABLISHED and inode in inodes and int(remote.rsplit(":", 1)[1], 16) == port:
                    found.add((local, remote))
    return found


def test_shutdown_closes_redis_s3_kafka_and_threads(kafka_server, redis_server, s3_server, s3_bucket, tmp_path) -> None:
    topic = unique_topic("pint")
    create_topic(kafka_server.bootstrap_servers, topic, 1)  # its offsets come from the partition leader's connection
    client_name = f"gateway-lifespan-{uuid.uuid4().hex[:8]}"
    agent = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket, redis={"url": f"{redis_server.url}?client_name={client_name}"})
    pinterest_bucket(s3_server, s3_bucket, Keyspace(agent.s3.prefix, agent.cluster, agent.s3.entropy_bits), topic, segments=2)
    settings = gateway_settings(agent, s3_server, kafka_server.bootstrap_servers)
    s3_port = urlsplit(s3_server.endpoint_url).port
    broker_port = int(kafka_server.bootstrap_servers.rsplit(":", 1)[1])
    admin = redis.Redis.from_url(redis_server.url)

    def app_redis_connections() -> int:
        return sum(1 for c in admin.client_list() if c.get("name") == client_name)

    s3_before, broker_before = connections_to(s3_port), connections_to(broker_port)
    threads_before = set(threading.enumerate())
    app = create_app(settings)
    with TestClient(app, base_url=LOCAL_URL) as client:
        answer = client.get(f"/v1/clusters/{agent.cluster}/topics/{topic}/partitions/0")  # registry, S3 listing, Kafka offsets
        assert answer.status_code == 200, answer.text
        assert answer.json()["remote"]["earliest_offset"] == 0 and answer.json()["kafka"] is not None
        assert app_redis_connections() >= 1
        assert connections_to(s3_port) - s3_before, "the app's S3 client holds no connection: nothing to prove"
        assert connections_to(broker_port) - broker_before, "the app's Kafka pool holds no connection: nothing to prove"
        loaders = [t for t in set(threading.enumerate()) - threads_before if t.name.startswith("gateway-load")]
        assert loaders
    assert app_redis_connections() == 0
    assert not connections_to(s3_port) - s3_before
    assert not connections_to(broker_port) - broker_before
    assert not [t for t in loaders if t.is_alive()]
    assert agent.cluster not in kafka_offsets._POOLS
    admin.close()
