"""Two listener replicas (two gateway processes) behind HAProxy in TCP mode, both advertising HAProxy's
address under one node id; the replica serving the read is SIGKILLed mid-read. librdkafka reconnects
through HAProxy to the other replica and goes on from its position: every offset once, in order."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.kafka_listener.conftest import PRODUCED, TOPIC, ListenerStack, listener_settings
from tests.integration.kafka_listener.test_confluent import as_rec
from tests.support.gateway_process import GatewayProcess
from tiered_kafka_dev.services._process import free_ports

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def haproxy_tcp(port: int, backends: list[int]) -> Iterator[None]:
    """HAProxy (Debian's) in TCP mode on ``port`` over the listeners on ``backends``, TCP health checks."""
    directory = Path(tempfile.mkdtemp(prefix="listener-haproxy-"))
    config = directory / "haproxy.cfg"
    config.write_text("\n".join([
        "global", "    maxconn 1024", "defaults", "    mode tcp", "    timeout connect 2s", "    timeout client 60s", "    timeout server 60s",
        "    retries 3", "    option redispatch 1",
        "frontend kafka", f"    bind 127.0.0.1:{port}", "    default_backend listeners",
        "backend listeners", "    balance roundrobin", "    default-server inter 200ms fall 2 rise 2",
        *[f"    server l{i} 127.0.0.1:{p} check" for i, p in enumerate(backends)], ""]))
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    proc = subprocess.Popen([haproxy, "-f", str(config), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


def open_connections(gateway: GatewayProcess) -> float:
    text = urllib.request.urlopen(f"{gateway.url}/metrics", timeout=10).read().decode()
    found = re.findall(r"^tiered_kafka_gateway_kafka_listener_connections\{[^}]*\} (\S+)$", text, re.M)
    return sum(float(v) for v in found)


def test_sigkill_of_the_serving_replica_mid_read(tiered: ListenerStack, s3_server: Any) -> None:
    lb_port, p0, p1 = free_ports(3)
    replicas: list[GatewayProcess] = []
    try:
        for port in (p0, p1):
            replicas.append(GatewayProcess(listener_settings(tiered.stack, s3_server, port=port, advertised_port=lb_port)))
        for replica in replicas:
            replica.wait_ready()
        with haproxy_tcp(lb_port, [p0, p1]):
            consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{lb_port}", "group.id": "replicas", "enable.auto.commit": False,
                                 "fetch.max.bytes": 20_000, "message.max.bytes": 20_000, "max.partition.fetch.bytes": 20_000, "reconnect.backoff.ms": 50})
            try:
                consumer.assign([TopicPartition(TOPIC, 0, 0)])
                got: list[Any] = []
                killed = False
                deadline = time.monotonic() + 120
                while len(got) < len(PRODUCED[0]):
                    assert time.monotonic() < deadline, len(got)
                    for m in consumer.consume(50, 0.5):
                        assert m.error() is None or m.error().retriable() or "disconnect" in str(m.error()).lower(), m.error()
                        if m.error() is None:
                            got.append(m)
                    if not killed and len(got) >= 300:
                        serving = max(replicas, key=open_connections)
                        serving.kill()
                        killed = True
                assert killed
                assert [m.offset() for m in got] == list(range(len(PRODUCED[0])))
                assert [as_rec(m) for m in got] == PRODUCED[0]
            finally:
                consumer.close()
    finally:
        for replica in replicas:
            replica.stop()
