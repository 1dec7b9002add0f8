"""The agent and the gateway start while their Redis Cluster cannot be reached, keep running (the
agent retries, the gateway answers 503), and work once it can: ``connect`` builds the cluster client
at its first use (``LazyRedisCluster``), as a single Redis connects at its first command.

The cluster URL names one seed, a port nothing listens on at first; then a forwarder opens on that
port to a node of the real cluster (``redis_cluster``). The seed only serves the first slot-map
read: from then on the clients talk to the nodes the cluster names."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.integration.cluster.conftest import ReplyDroppingProxy
from tests.support.agent_env import AgentProcess, agent_settings, checkpoint_high_watermarks, wait_for
from tests.support.fixtures import FIXTURES
from tests.support.gateway_env import gateway_settings
from tests.support.gateway_process import GatewayProcess
from tiered_kafka.registry import Registry, connect
from tiered_kafka_dev.services._process import free_ports

pytestmark = pytest.mark.integration


def test_agent_and_gateway_start_before_the_cluster_is_reachable_and_recover(redis_cluster, s3_server, s3_bucket, tmp_path: Path) -> None:
    (seed_port,) = free_ports(1)
    url = f"redis+cluster://127.0.0.1:{seed_port}"
    log_dir = tmp_path / "logs"
    shutil.copytree(FIXTURES / "test_topic_a-0", log_dir / "plain-0")
    checkpoint_high_watermarks(log_dir)  # no broker: everything written is committed
    settings = agent_settings(log_dir, SimpleNamespace(url=url), s3_server, s3_bucket, upload={"rescan_interval_s": 0.5, "backoff_base_s": 0.05, "backoff_max_s": 0.5})
    gateway = GatewayProcess(gateway_settings(settings, s3_server))
    agent = AgentProcess(settings, tmp_path / "agent.properties")
    proxy = None
    try:
        gateway.wait_ready(120)  # /healthz: the process serves although its registry is unreachable
        partition = f"/v1/clusters/{settings.cluster}/topics/plain/partitions/0"
        status, body = gateway.get("/readyz")
        assert status == 503 and body["status"] == "unavailable", (status, body)
        status, body = gateway.get(partition)
        assert (status, body["error"]["code"]) == (503, "registry_unavailable"), (status, body)
        wait_for(lambda: "upload pass failed" in agent.output(), timeout_s=120, what="the agent failing to reach the registry")
        time.sleep(1)
        assert agent.process.poll() is None, agent.output()[-3000:]  # retrying, not exited

        node = redis_cluster.nodes[0]
        proxy = ReplyDroppingProxy(node.host, node.port, listen_port=seed_port)  # the seed answers from now on
        with connect(redis_cluster.url) as client:
            registry = Registry(client, settings.cluster)
            wait_for(lambda: len(registry.segments("plain", 0)) >= 2, timeout_s=120, what="the agent registering once the cluster is reachable")
        wait_for(lambda: gateway.get("/readyz")[0] == 200, timeout_s=60, what="the gateway ready")
        status, body = gateway.get(partition)
        assert status == 200 and body["remote"]["segment_count"] >= 2, (status, body)
        assert agent.process.poll() is None and gateway.proc.poll() is None
        assert "Traceback" not in gateway.output()
    finally:
        agent.stop()
        gateway.stop()
        if proxy is not None:
            proxy.close()
